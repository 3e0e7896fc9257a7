"""WHOSE NAME IT IS: the namespace of each alias, for the rules that treat a shared cluster's teams apart
(the removal guard per namespace, the cap of names per namespace).

external-dns labels every endpoint with the object it comes from (``resource``: ``ingress/<namespace>/
<name>``, ``service/...``, ``httproute/...``) and writes that label into the name's TXT claim. A name's
namespace is its claim's (the resource that owns it now), else the one an endpoint of this call names; a
name with neither (adopted claims carry no resource, registry noop has no claims, a hand-set alias) has
no namespace, ``""``: such names are counted together. Pure: values in, a mapping out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.read.txt_registry import (
    RESOURCE_LABEL,
    is_ownership_record,
    owned_name,
    resource_of,
)

NO_NAMESPACE = ""


def namespace_of(resource: str | None) -> str:
    """``ingress/team-a/web`` -> ``team-a``; ``""`` for no resource or one not of that form."""
    if not resource:
        return NO_NAMESPACE
    parts = resource.split("/")
    return parts[1] if len(parts) == 3 and all(parts) else NO_NAMESPACE


def namespaces(
    claims: Iterable[Endpoint],
    endpoints: Iterable[Endpoint],
    label_of: Callable[[str], str | None],
) -> dict[str, str]:
    """Alias label -> its namespace, for every alias a claim or an endpoint names with one: the claim's
    ``resource`` first (``claims``: those stored, then those of this apply), else an endpoint's.
    ``label_of``: a DNS name's alias label, or None when it cannot be one."""
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
    """How many of ``labels`` each namespace holds (``""``: those of no namespace)."""
    return Counter(whose.get(label, NO_NAMESPACE) for label in labels)
