"""ONE TEAM CANNOT HURT ANOTHER: whose name it is, which names a resource may ask for, which resource a name
keeps, and which load balancers a namespace may publish on (pure: values in, decisions out).

A shared cluster's namespaces are its tenants. external-dns names the object behind each endpoint in its
``resource`` label (``ingress/<namespace>/<name>``, endpoint/labels.go ``ResourceLabelKey``), and the TXT
claim of an owned name keeps the resource that owns it (provider.read.txt_registry ``resource_of``). An
endpoint without a ``resource`` label comes from a source only the operator configures (``fake``,
``connector``): it belongs to no namespace, and none of these rules limits it.

1. **Caps.** A resource asking for more than ``per_resource`` names keeps ``per_resource`` of them; a
   namespace whose resources then ask for more than ``per_namespace`` loses the excess of its largest
   requester (the largest brought down to the next, and so on, until the namespace fits). A requester
   keeps the names it owns now first, then the others in name order: a cap never takes a published name
   from a team while it adds another. A name asked twice by one resource counts once.
2. **Owner first.** Among the resources asking for one name, the one its claim names keeps it, whatever
   the order they came in; when the claim names none of them (or there is no claim), the one external-dns'
   planner would pick for a create (the smallest targets, plan/conflict.go ``ResolveCreate``), then the
   smallest resource, so that no order decides. An endpoint asked under another namespace's ``resource``
   keeps its owner's, so its claim is never rewritten to another namespace's object by an update; one of
   the owner's namespace keeps its own (an Ingress moved to an HTTPRoute: the events follow the route).
3. **Load balancers by namespace.** A target that is a load balancer's address publishes the name on it
   only when that load balancer belongs to a Service of the namespace judged (the openstack cloud
   controller manager names it ``kube_service_<cluster>_<namespace>_<service>`` and describes it as
   ``Kubernetes external service <namespace>/<service> from cluster <cluster>``), or is shared by the
   operator (LANDB_SHARED_LOAD_BALANCERS, by name or id). The namespace judged is the owner's when the
   name has one, else the asker's: a target added by another namespace never moves an owned name.

| case                                                  | what happens                                | rule |
|-------------------------------------------------------|---------------------------------------------|------|
| an Ingress of 10,001 names, cap 200 per resource      | 200 kept (owned first), 9,801 refused       | 1    |
| a namespace of 3 x 400 names, cap 1,000 per namespace | the largest brought down, 334/333/333 kept  | 1    |
| endpoints without a ``resource`` label                | never capped                                | 1    |
| a name asked by team-a (its claim's resource) and b   | team-a's, in either order; b refused        | 2    |
| a name asked by two resources, no claim               | smallest targets, then smallest resource    | 2    |
| team-b's endpoint of team-a's name (merged targets)   | kept with team-a's resource                 | 2    |
| team-a's HTTPRoute asking for its Ingress's name      | kept with the route's resource (events)     | 2    |
| a target of team-b's load balancer, name owned by a   | that target refused; the rest as before     | 3    |
| a target of the asker's own namespace's LB            | published on it                             | 3    |
| a load balancer not made by the controller manager    | only through LANDB_SHARED_LOAD_BALANCERS    | 3    |
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from landb_webhook.backends import LoadBalancer
from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.read.txt_registry import (
    RESOURCE_LABEL,
    is_ownership_record,
    owned_name,
    resource_of,
)

NO_NAMESPACE = ""
"""The namespace of the names no resource asks for (adopted claims, registry noop, a hand-set alias): such
names are counted together."""
CCM_NAME_PREFIX = "kube_service_"
"""openstack cloud-controller-manager's load balancer names: ``kube_service_<cluster>_<namespace>_<name>``
(pkg/openstack/loadbalancer.go ``servicePrefix``, ``lbFormat``); a namespace and a Service name hold no
``_``, a cluster name may."""
_CCM_DESCRIPTION = re.compile(r"Kubernetes external service ([a-z0-9-]+)/([a-z0-9-]+) from cluster ")


def namespace_of(resource: str | None) -> str | None:
    """``ingress/team-a/site`` -> ``team-a``; None without a label or for a malformed one."""
    if not resource:
        return None
    parts = resource.split("/")
    return parts[1] if len(parts) == 3 and all(parts) else None


def namespaces(
    claims: Iterable[Endpoint],
    endpoints: Iterable[Endpoint],
    label_of: Callable[[str], str | None],
) -> dict[str, str]:
    """Whose name it is: alias label -> its namespace, for every alias a claim or an endpoint names with one:
    the claim's ``resource`` first (the resource that owns it now; ``claims``: those stored, then those of
    this apply), else an endpoint's. ``label_of``: a DNS name's alias label, or None when it cannot be one."""
    found: dict[str, str] = {}
    for endpoint in endpoints:
        if is_ownership_record(endpoint):
            continue
        namespace = namespace_of(endpoint.label(RESOURCE_LABEL))
        label = label_of(endpoint.dns_name)
        if namespace and label is not None:
            found.setdefault(label, namespace)
    for claim in claims:
        namespace = namespace_of(resource_of(claim))
        label = label_of(owned_name(claim))
        if namespace and label is not None:
            found[label] = namespace
    return found


def count_by_namespace(labels: Iterable[str], whose: Mapping[str, str]) -> Counter[str]:
    """How many of ``labels`` each namespace holds (``NO_NAMESPACE``: those of none)."""
    return Counter(whose.get(label, NO_NAMESPACE) for label in labels)


# -- rule 1: caps ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Excess:
    """What one resource loses to a cap: ``dropped`` (its names, sorted) of ``asked``."""

    resource: str
    reason: str
    """``resource_cap`` (``limit`` per resource) or ``namespace_cap`` (``limit`` per namespace)."""
    limit: int
    asked: int
    dropped: tuple[str, ...]


def over_caps(
    asks: Mapping[str, Collection[str]],
    owners: Mapping[str, str],
    *,
    per_resource: int,
    per_namespace: int,
) -> list[Excess]:
    """The names each resource loses to the caps (rule 1), sorted by resource. ``asks``: resource -> the
    names it asks for; ``owners``: name -> the resource its claim names. Resources of no namespace are
    not capped."""
    kept: dict[str, list[str]] = {}
    reasons: dict[str, tuple[str, int]] = {}
    for resource, names in asks.items():
        if namespace_of(resource) is None:
            continue
        ordered = sorted(set(names), key=lambda name: (owners.get(name) != resource, name))
        kept[resource] = ordered
        if len(ordered) > per_resource:
            kept[resource] = ordered[:per_resource]
            reasons[resource] = ("resource_cap", per_resource)
    by_namespace: dict[str, list[str]] = {}
    for resource in kept:
        by_namespace.setdefault(namespace_of(resource) or "", []).append(resource)
    for resources in by_namespace.values():
        counts = {resource: len(kept[resource]) for resource in resources}
        for resource, count in brought_down(counts, per_namespace).items():
            if count < len(kept[resource]):
                kept[resource] = kept[resource][:count]
                reasons[resource] = ("namespace_cap", per_namespace)
    return [
        Excess(
            resource,
            reason,
            limit,
            len(set(asks[resource])),
            tuple(sorted(set(asks[resource]) - set(kept[resource]))),
        )
        for resource, (reason, limit) in sorted(reasons.items())
    ]


def brought_down(counts: Mapping[str, int], limit: int) -> dict[str, int]:
    """``counts`` with the largest brought down to the next largest, and so on, until their sum is at most
    ``limit``: what each keeps. Ties take their share in resource order (the first ones one more)."""
    result = dict(counts)
    excess = sum(result.values()) - limit
    while excess > 0:
        top = max(result.values())
        tied = sorted(resource for resource, count in result.items() if count == top)
        below = max((count for count in result.values() if count < top), default=0)
        room = (top - below) * len(tied)
        if room <= excess:
            for resource in tied:
                result[resource] = below
            excess -= room
            continue
        each, extra = divmod(excess, len(tied))
        for position, resource in enumerate(tied):
            result[resource] = top - each - (1 if position >= len(tied) - extra else 0)
        excess = 0
    return result


# -- rule 2: owner first -------------------------------------------------------------------------


def chosen_asker(candidates: Sequence[Endpoint], owner: str | None) -> int:
    """The index of the endpoint that keeps a name among ``candidates`` (one per resource), whatever their
    order: the owner's, else the smallest targets then the smallest resource (rule 2)."""
    for index, endpoint in enumerate(candidates):
        if owner is not None and endpoint.label(RESOURCE_LABEL) == owner:
            return index
    return min(
        range(len(candidates)),
        key=lambda index: (
            sorted(target.lower() for target in candidates[index].targets),
            candidates[index].label(RESOURCE_LABEL) or "",
            candidates[index].record_type.upper(),
        ),
    )


def with_owner(endpoint: Endpoint, owner: str | None) -> Endpoint:
    """``endpoint`` carrying its name's owner as its ``resource`` when another namespace's object asks
    (rule 2), so that the claim external-dns writes with an update names the owner's namespace still."""
    asker = endpoint.label(RESOURCE_LABEL)
    if owner is None or asker in (owner, None) or namespace_of(asker) == namespace_of(owner):
        return endpoint
    labels = tuple(sorted({**dict(endpoint.labels), RESOURCE_LABEL: owner}.items()))
    return Endpoint(
        endpoint.dns_name,
        endpoint.record_type,
        endpoint.targets,
        endpoint.set_identifier,
        endpoint.record_ttl,
        labels,
        endpoint.provider_specific,
    )


# -- rule 3: load balancers by namespace -------------------------------------------------------------


def service_of(lb: LoadBalancer) -> tuple[str, str] | None:
    """(namespace, Service) a load balancer serves, as the cloud controller manager named or described it;
    None for one it did not make."""
    if lb.name.startswith(CCM_NAME_PREFIX):
        parts = lb.name[len(CCM_NAME_PREFIX) :].rsplit("_", 2)
        if len(parts) == 3 and all(parts):
            return parts[1], parts[2]
    found = _CCM_DESCRIPTION.match(lb.description)
    return (found.group(1), found.group(2)) if found else None


def judged_namespace(asker: str | None, owner: str | None) -> str | None:
    """The namespace whose load balancers a name may go to: its owner's, else its asker's (rule 3)."""
    return namespace_of(owner) if namespace_of(owner) is not None else namespace_of(asker)


def may_publish_on(
    shared: Collection[str], asker: str | None, owner: str | None
) -> Callable[[LoadBalancer], bool]:
    """Whether a name asked by ``asker`` (its ``resource``) and owned by ``owner`` may go to a load
    balancer (rule 3). An asker of no namespace, and no owner's, is the operator's: any load balancer."""
    namespace = judged_namespace(asker, owner)

    def may(lb: LoadBalancer) -> bool:
        if namespace is None or lb.id in shared or lb.name in shared:
            return True
        served = service_of(lb)
        return served is not None and served[0] == namespace

    return may
