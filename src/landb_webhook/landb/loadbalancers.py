"""Aliases on Octavia load balancers: ``landb-alias=<label>`` tags, one per alias.

CERN names a load balancer with a tag ``landb-alias=myapp`` (``openstack loadbalancer set --tag``), the
load-balancer counterpart of a server's ``landb-alias`` metadata. Octavia replaces a load balancer's whole
tag list on every write, so a write is always "these tags, plus ours, minus ours": every other tag, and
every ``landb-alias=`` tag in a form we do not write, is kept as it is.

The apply ordering, as for servers (landb.plan): a load balancer's change is a *make* write (additions)
and a *break* write (removals), every make before any break anywhere, so a name moving between load
balancers, or between ingress nodes and a load balancer, is never without a home. Two writes cost two
``PENDING_UPDATE`` rounds on the same load balancer, so a removal that needs no replacement (its name
leaves DNS altogether) rides along with that load balancer's make write when it has one.

| the load balancer ...                        | make write            | break write            |
|----------------------------------------------|-----------------------|------------------------|
| gains a name                                 | add                   | -                      |
| loses a name that moves elsewhere            | -                     | remove                 |
| loses a name leaving DNS, gains another      | add + remove          | -                      |
| loses a name leaving DNS, gains nothing      | -                     | remove                 |
| carries a tag we do not own or do not write  | kept                  | kept                   |

tests/property/test_loadbalancer_tags_properties.py checks these rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from landb_webhook.landb.names import InvalidName, validate_label

TAG_PREFIX = "landb-alias="


def alias_tag(label: str) -> str:
    """``myapp`` -> ``landb-alias=myapp``."""
    return TAG_PREFIX + validate_label(label)


def tag_label(tag: str) -> str | None:
    """The alias a tag names, if it is one in the form we write; None for any other tag (kept as it is)."""
    if not tag.startswith(TAG_PREFIX):
        return None
    try:
        return validate_label(tag[len(TAG_PREFIX) :])
    except InvalidName:
        return None


def tag_labels(tags: Iterable[str]) -> frozenset[str]:
    return frozenset(label for tag in tags if (label := tag_label(tag)) is not None)


def tags_after(tags: Iterable[str], add: Iterable[str], remove: Iterable[str]) -> list[str]:
    """The whole tag list to write: ``tags`` in their order, without ``remove``'s alias tags, then
    ``add``'s not already there. Nothing else is dropped, so other tags survive the replacing write."""
    gone = {alias_tag(label) for label in remove}
    kept = [tag for tag in dict.fromkeys(tags) if tag not in gone]
    return kept + [tag for label in sorted(set(add)) if (tag := alias_tag(label)) not in kept]


@dataclass(frozen=True)
class TagWrite:
    """One write of one load balancer's tags: aliases to add and to remove, in one replacing PUT."""

    load_balancer_id: str
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True)
class TagPlan:
    make_writes: tuple[TagWrite, ...] = ()
    """Phase 1, with the servers' make writes: additions (and removals of names leaving DNS)."""
    break_writes: tuple[TagWrite, ...] = ()
    """Phase 2, once every make landed: removals of names that have a new home."""


def plan_tags(
    carried: Mapping[str, Iterable[str]], wanted: Mapping[str, Set[str]], *, leaving: Set[str]
) -> TagPlan:
    """The writes that make load balancers carry what ``wanted`` says.

    ``carried``: load balancer id -> the aliases its tags hold now. ``wanted``: alias -> the load
    balancers that must carry it (empty: none); aliases not named are left as they are. ``leaving``:
    the aliases leaving DNS altogether, whose removal needs no replacement first.
    """
    adds: dict[str, set[str]] = {}
    removes: dict[str, set[str]] = {}
    for label, homes in wanted.items():
        for lb_id in homes:
            if label not in carried.get(lb_id, ()):
                adds.setdefault(lb_id, set()).add(label)
        for lb_id, labels in carried.items():
            if label in labels and lb_id not in homes:
                removes.setdefault(lb_id, set()).add(label)
    make_writes: list[TagWrite] = []
    break_writes: list[TagWrite] = []
    for lb_id in sorted(adds.keys() | removes.keys()):
        added, removed = adds.get(lb_id, set()), removes.get(lb_id, set())
        along = removed & leaving if added else set()
        if added:
            make_writes.append(TagWrite(lb_id, tuple(sorted(added)), tuple(sorted(along))))
        if removed - along:
            break_writes.append(TagWrite(lb_id, (), tuple(sorted(removed - along))))
    return TagPlan(tuple(make_writes), tuple(break_writes))
