"""THE CAP OF NAMES PER NAMESPACE (LANDB_MAX_PUBLISHED_PER_NAMESPACE): room kept for everyone.

Every name a cluster publishes takes room in the same servers' metadata (landb/packing.py; the quota less
LANDB_RESERVED_METADATA_KEYS). Without a cap, one namespace asking for thousands of names fills it and every
other team's new name is refused for ``capacity``. With one, a namespace (provider.ownership.tenancy: its
claims' ``resource`` label) publishes at most ``cap`` names at once, counted after this apply: what it
publishes now, less its withdrawals that land, plus its creations.

| case                                                   | what happens                               |
|--------------------------------------------------------|--------------------------------------------|
| the namespace stays within the cap                     | every creation goes on                     |
| its creations would take it past the cap               | the first, in sorted order, up to the cap  |
|                                                        | go on; the others are refused              |
| it is over the cap already (the cap lowered)           | every creation refused; nothing it         |
|                                                        | publishes is taken away                    |
| it withdraws names in the same apply                   | they make room for its creations           |
| its removals are held back by the removal guard        | they still count: the names stay published |
| a name of no namespace (no resource)                   | never capped                               |

An update or a move of a name already published is no creation: it is never refused. Pure: numbers and
names in, the refused names out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from landb_webhook.provider.ownership.tenancy import NO_NAMESPACE, count_by_namespace


def over_cap(
    cap: int,
    whose: Mapping[str, str],
    *,
    published: Set[str],
    withdraw: Set[str],
    publish: Iterable[str],
) -> dict[str, list[str]]:
    """Namespace -> its creations refused, sorted. ``published``: every alias on
    the air now; ``withdraw``: those going in this apply; ``publish``: those this apply publishes (the
    ones not on the air are its creations)."""
    staying = count_by_namespace(published - withdraw, whose)
    refused: dict[str, list[str]] = {}
    creations: dict[str, list[str]] = {}
    for label in sorted(set(publish) - published):
        namespace = whose.get(label, NO_NAMESPACE)
        if namespace != NO_NAMESPACE:
            creations.setdefault(namespace, []).append(label)
    for namespace, labels in creations.items():
        room = max(cap - staying[namespace], 0)
        if len(labels) > room:
            refused[namespace] = labels[room:]
    return refused


def past_cap(namespace: str, cap: int) -> str:
    """The sentence for the owner and the operator."""
    return (
        f"namespace {namespace} would publish more than {cap} names, the most one namespace may publish "
        "at once (LANDB_MAX_PUBLISHED_PER_NAMESPACE)"
    )
