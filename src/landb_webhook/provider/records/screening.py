"""AdjustEndpoints' first step: what every namespace asks for, screened by provider.ownership.tenancy
before anything is placed. One asker per name (the owner first), the caps per resource and per namespace,
and a load balancer target only of the namespace judged. Each refusal is a metric reason, one log line said
once per period (context.warnings) and a ``Refused`` event on the object asking, once per object and
refusal, not one per name.

Names outside the domain filter are not counted: external-dns drops them itself after AdjustEndpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from landb_webhook.endpoint import DomainFilter, Endpoint
from landb_webhook.provider.apply.loadbalancers import LoadBalancers
from landb_webhook.provider.context import ALIAS_RECORD_TYPES, Context, named
from landb_webhook.provider.ownership.tenancy import (
    Excess,
    chosen_asker,
    may_publish_on,
    namespace_of,
    over_caps,
    service_of,
    with_owner,
)
from landb_webhook.provider.read.txt_registry import RESOURCE_LABEL, is_ownership_record
from landb_webhook.provider.watch.events import NameChange

CAP_SETTINGS = {
    "resource_cap": "LANDB_MAX_NAMES_PER_RESOURCE",
    "namespace_cap": "LANDB_MAX_NAMES_PER_NAMESPACE",
}


@dataclass(frozen=True)
class Screened:
    endpoints: list[Endpoint]
    """The endpoints left, in their order: one per alias name (its owner's ``resource``), the TXT claims,
    and those no name can come of (the next step drops them, saying why)."""
    owners: Mapping[str, str]
    """Label -> the resource its claim names."""
    askers: Mapping[str, str]
    """Label -> the resource whose endpoint was kept for it (``""``: none), before its owner's was put on."""


def screen(context: Context, endpoints: Sequence[Endpoint], owners_by_name: Mapping[str, str]) -> Screened:
    """Rules 1 and 2 of provider.ownership.tenancy over AdjustEndpoints' input; each refusal told."""
    domain_filter = DomainFilter(include=context.options.domain_filter)
    owners: dict[str, str] = {}
    for name, resource in owners_by_name.items():
        if (label := context.label_or_none(name)) is not None:
            owners[label] = resource
    others: list[tuple[int, Endpoint]] = []
    askers: dict[str, dict[str, tuple[int, Endpoint]]] = {}
    for position, endpoint in enumerate(endpoints):
        label = None
        if not is_ownership_record(endpoint) and endpoint.record_type.upper() in ALIAS_RECORD_TYPES:
            label = (
                context.label_or_none(endpoint.dns_name) if domain_filter.matches(endpoint.dns_name) else None
            )
        if label is None:
            others.append((position, endpoint))
            continue
        # one endpoint per resource and name: a resource asking twice (A and AAAA) is no conflict
        askers.setdefault(label, {}).setdefault(endpoint.label(RESOURCE_LABEL) or "", (position, endpoint))

    # rule 2: one asker per name, its owner's if it asks, whatever the order
    chosen: dict[str, tuple[int, Endpoint]] = {}
    asks: dict[str, list[str]] = {}
    kept_for: dict[str, str] = {}
    for label, by_resource in askers.items():
        candidates = list(by_resource.items())
        owner = owners.get(label)
        asker, (position, kept) = candidates[chosen_asker([e for _, (_, e) in candidates], owner)]
        chosen[label] = (position, with_owner(kept, owner))
        asks.setdefault(asker, []).append(label)
        kept_for[label] = asker
        for resource, (_, endpoint) in candidates:
            if resource != asker:
                _refuse_asker(context, endpoint, asker, owner)

    # rule 1: the caps, over what each resource still asks for
    options = context.options
    for excess in over_caps(
        asks,
        owners,
        per_resource=options.max_names_per_resource,
        per_namespace=options.max_names_per_namespace,
    ):
        _refuse_excess(context, excess)
        for label in excess.dropped:
            del chosen[label]
    kept_positions = sorted([*chosen.values(), *others], key=lambda item: item[0])
    return Screened([endpoint for _, endpoint in kept_positions], owners, kept_for)


def _refuse_asker(context: Context, endpoint: Endpoint, kept_by: str, owner: str | None) -> None:
    resource = endpoint.label(RESOURCE_LABEL) or "a source without resource"
    holder = owner if owner is not None and owner == kept_by else kept_by or "another source"
    why = "owns it" if owner is not None and owner == kept_by else "asks for it too and is chosen"
    reason = f"{holder} {why}; one name is published for one resource"
    context.metrics.dropped_endpoints_total.labels(reason="owned_elsewhere").inc()
    context.events.tell(NameChange(endpoint.dns_name, "refused", reason, "owned_elsewhere"), [endpoint])
    context.warn_once(
        f"{endpoint.dns_name} {resource}",
        "endpoint dropped: the name is another resource's",
        resource=resource,
        kept_for=holder,
    )


def _refuse_excess(context: Context, excess: Excess) -> None:
    """One event for the object, however many names it loses: on its first dropped name, which stays the
    same loop after loop, so the event's series counts the repeats."""
    setting = CAP_SETTINGS[excess.reason]
    scope = "resource" if excess.reason == "resource_cap" else "namespace"
    kept = excess.asked - len(excess.dropped)
    detail = (
        f"{excess.resource} asks for {excess.asked} names, {len(excess.dropped)} over the cap of "
        f"{excess.limit} per {scope} ({setting}); {kept} kept, not published: "
        f"{named(context.dns_name(label) for label in excess.dropped)}"
    )
    first = context.dns_name(excess.dropped[0])
    source = Endpoint(first, "A", labels=((RESOURCE_LABEL, excess.resource),))
    context.metrics.dropped_endpoints_total.labels(reason=excess.reason).inc(len(excess.dropped))
    context.events.tell(NameChange(first, "refused", detail, "too_many_names"), [source])
    context.warnings.warning(
        (excess.resource, excess.reason),
        "endpoints dropped: over the cap",
        resource=excess.resource,
        asked=excess.asked,
        dropped=len(excess.dropped),
        limit=excess.limit,
        setting=setting,
    )


def foreign_targets(
    context: Context, endpoint: Endpoint, screened: Screened, label: str, load_balancers: LoadBalancers
) -> Endpoint:
    """``endpoint`` without the targets of load balancers its name may not go to (rule 3), each refusal
    told to the object asking and to the Service the load balancer serves."""
    homes = load_balancers.homes(endpoint.targets)
    if not homes:
        return endpoint
    owner, asker = screened.owners.get(label), screened.askers.get(label) or None
    may = may_publish_on(context.options.shared_load_balancers, asker, owner)
    refused = [lb for lb in load_balancers.of(homes) if not may(lb)]
    if not refused:
        return endpoint
    addresses = {address for lb in refused for address in lb.addresses}
    for lb in refused:
        served = service_of(lb)
        whose = f"namespace {served[0]}'s" if served else "no namespace's (not made for a Service)"
        reason = (
            f"target {', '.join(a for a in lb.addresses if a in endpoint.targets)} is load balancer "
            f"{lb.name or lb.id}, {whose}: "
            + (f"the name is owned by {owner}" if owner else f"{asker} may not publish on it")
        )
        context.metrics.dropped_endpoints_total.labels(reason="foreign_load_balancer").inc()
        # The owner asking with other targets left keeps its name as it was: a target someone else merged
        # in is no news to it (and "not published" would be false); anyone else hears it.
        keeps = asker == owner and any(t.strip() not in addresses for t in endpoint.targets)
        told = (
            [Endpoint(endpoint.dns_name, "A", labels=((RESOURCE_LABEL, asker),))]
            if asker and not keeps
            else []
        )
        if served is not None and served[0] != namespace_of(asker):
            service = f"service/{served[0]}/{served[1]}"
            told.append(Endpoint(endpoint.dns_name, "A", labels=((RESOURCE_LABEL, service),)))
        context.events.tell(NameChange(endpoint.dns_name, "refused", reason, "foreign_load_balancer"), told)
        context.warn_once(
            f"{endpoint.dns_name} {lb.id}",
            "endpoint target refused: another namespace's load balancer",
            resource=asker or "",
            owner=owner or "",
            load_balancer=lb.name or lb.id,
            hint="list it in LANDB_SHARED_LOAD_BALANCERS if every namespace may use it",
        )
    return Endpoint(
        endpoint.dns_name,
        endpoint.record_type,
        tuple(t for t in endpoint.targets if t.strip() not in addresses),
        endpoint.set_identifier,
        endpoint.record_ttl,
        endpoint.labels,
        endpoint.provider_specific,
    )
