"""THE REFUSALS: what one apply refuses is one list of ``Refusal(label, kind, reason)`` (landb.plan's),
collected stage by stage in the apply's ``Refusals``; step 9 settles that list, here and nowhere else, into
the four ways a refusal is told:

- the metric ``refused_changes_total{reason}``: one per refusal (a name; a name and a node for the plan's;
  a verdict on many names, once);
- the log: each stage's line, with its context, said once where the stage asks so; the plan's refusals
  grouped, a line per alias and one per node out of room (a cluster over its metadata quota refuses
  (alias, node) pairs by the hundred thousand in every loop: a line each would flood the log);
- a ``Refused`` event on the objects asking for each name (provider.watch.events), the first reason found;
- the 503's text: the refusals a later loop may land, one line per reason.

How each kind is counted, told and answered is the table ``KINDS``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import structlog

from landb_webhook.landb.plan import Refusal, ServerState
from landb_webhook.metrics import Metrics
from landb_webhook.provider.context import Context, named
from landb_webhook.provider.watch.events import NameChange

log = structlog.get_logger(__name__)

FROZEN = "alias held in a key or form we never edit: left in place"
NAMED_AT_MOST = 5
"""Nodes (or aliases) named on one line; the line gives how many there are in all."""


@dataclass(frozen=True)
class Kind:
    """How a kind of refusal is told."""

    counted_as: str | None
    """``refused_changes_total``'s reason; None: not counted (a write failure is no refusal of ours)."""
    told: bool = True
    """A ``Refused`` event on the objects asking for the name."""
    answered: bool = True
    """In the 503's text: a later loop may land it, so external-dns must hear that this one did not."""
    per_reason: bool = False
    """Counted once per reason, not per name: a verdict on many names at once (the removal guard's on a
    namespace, whose names ``removals_held_back_total`` counts; no ingress node at all)."""


KINDS: dict[str, Kind] = {
    # the plan's (landb.plan), one per (alias, node)
    "capacity": Kind("plan"),
    "plain_alias": Kind("plain_alias"),
    "frozen": Kind("frozen", told=False, answered=False),
    # the ownership gate (provider.ownership.claims)
    "not_owned": Kind("not_owned"),
    "claim_alone": Kind("not_owned", told=False),
    "cname_kept": Kind("plain_alias", told=False),
    # the load balancers (provider.apply.loadbalancers, provider.apply.foreign)
    "foreign_load_balancer": Kind("foreign_load_balancer"),
    # DNS first (provider.apply.first_look): not written, nothing failed
    "dns_elsewhere": Kind("dns_elsewhere", answered=False),
    # per namespace
    "removal_guard": Kind("removal_guard", per_reason=True),
    "name_policy": Kind("name_policy"),
    "namespace_cap": Kind("namespace_cap"),
    # the plan's input
    "no_ingress_nodes": Kind("no_ingress_nodes", per_reason=True),
    # the writes: told to the owners; the failures answer for themselves
    "write_failed": Kind(None, answered=False),
    # a whole apply (provider.apply.fence), answered by its exception
    "not_the_writer": Kind("not_the_writer", told=False, answered=False),
    "writer_lease_lost": Kind("writer_lease_lost", told=False, answered=False),
}
"""Every kind an apply refuses with (tests/unit/test_webhook_metrics.py checks the code uses no other)."""


@dataclass(frozen=True)
class _Said:
    message: str
    level: Literal["warning", "error"]
    once: Hashable | None
    fields: dict[str, object]


@dataclass
class Refusals:
    """What one apply refused, in the order its stages refused it, and what they said of it."""

    items: list[Refusal] = field(default_factory=list)
    _said: list[_Said] = field(default_factory=list)

    def refuse(self, label: str, kind: str, reason: str) -> None:
        """``label``: the alias (a claim's record name for ``claim_alone``, a DNS name for ``cname_kept``)."""
        self.items.append(Refusal(label, kind, reason))

    def planned(self, refusals: Sequence[Refusal]) -> None:
        """The plan's refusals, said grouped when settled."""
        self.items.extend(refusals)

    def say(
        self,
        message: str,
        *,
        level: Literal["warning", "error"] = "warning",
        once: Hashable | None = None,
        **fields: object,
    ) -> None:
        """The stage's line for what it refused; ``once``: a key said once per period (logs)."""
        self._said.append(_Said(message, level, once, fields))

    def names(self) -> set[str]:
        """The labels refused, but those only held frozen (said once, never retried): the summary's count."""
        return {r.label for r in self.items if r.kind != "frozen"}

    def settle(self, context: Context) -> list[str]:
        """Step 9: count, say and tell every refusal; return the 503's lines."""
        self._count(context.metrics)
        self._say(context)
        self._tell(context)
        answer = _say_planned([r for r in self.items if r.server is not None], context)
        return answer + _answer_lines(r for r in self.items if r.server is None and KINDS[r.kind].answered)

    def _count(self, metrics: Metrics) -> None:
        verdicts = {(r.kind, r.reason) for r in self.items if KINDS[r.kind].per_reason}
        count(metrics, [r.kind for r in self.items if not KINDS[r.kind].per_reason])
        count(metrics, [kind for kind, _ in verdicts])
        held = sum(1 for r in self.items if r.kind == "removal_guard")
        metrics.removals_held_back_total.labels(reason="removal_guard").inc(held)

    def _say(self, context: Context) -> None:
        for said in self._said:
            if said.once is None:
                getattr(log, said.level)(said.message, **said.fields)
            else:
                getattr(context.warnings, said.level)(said.once, said.message, **said.fields)

    def _tell(self, context: Context) -> None:
        """One ``Refused`` event per name, its first reason."""
        told: set[str] = set()
        for refusal in self.items:
            if KINDS[refusal.kind].told and refusal.label not in told:
                told.add(refusal.label)
                name = context.dns_name(refusal.label)
                context.events.tell(NameChange(name, "refused", refusal.reason, refusal.kind))


def count(metrics: Metrics, kinds: Iterable[str]) -> None:
    """``refused_changes_total``, the one place it is counted: the refusals of ``kinds``."""
    counted = Counter(KINDS[kind].counted_as for kind in kinds)
    for reason, times in counted.items():
        if reason is not None:
            metrics.refused_changes_total.labels(reason=reason).inc(times)


def _answer_lines(refusals: Iterable[Refusal]) -> list[str]:
    """``a, b and 3 more: reason``, a line per reason, in the order first refused."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for refusal in refusals:
        if refusal.label not in by_reason[refusal.reason]:
            by_reason[refusal.reason].append(refusal.label)
    return [f"{named(labels)}: {reason}" for reason, labels in by_reason.items()]


def _say_planned(refusals: Sequence[Refusal], context: Context) -> list[str]:
    """The plan's refusals said: frozen holders once per period (no retry changes them), every other a line
    per alias, and a node out of room one more of its own; returned, a line per alias, those a later loop
    may land."""
    by_label: dict[str, list[Refusal]] = defaultdict(list)
    out_of_room: dict[str, list[Refusal]] = defaultdict(list)
    for refusal in refusals:
        assert refusal.server is not None
        if refusal.kind == "frozen":
            context.warnings.warning(
                (refusal.label, FROZEN), FROZEN, subject=refusal.label, node=refusal.server.node_name
            )
            continue
        by_label[refusal.label].append(refusal)
        if refusal.kind == "capacity":
            out_of_room[refusal.server.server_id].append(refusal)

    problems: list[str] = []
    for label in sorted(by_label):
        refused = by_label[label]
        nodes = sorted({r.server.node_name for r in refused if r.server is not None})
        log.warning(
            "change refused",
            alias=label,
            nodes=len(nodes),
            node_names=nodes[:NAMED_AT_MOST],
            reason=refused[0].reason,
        )
        problems.append(f"{label} on {_named_nodes(nodes)}: {refused[0].reason}")
    for group in sorted(out_of_room.values(), key=lambda g: _server_of(g[0]).node_name):
        labels = sorted({r.label for r in group})
        server = _server_of(group[0])
        log.warning(
            "node out of metadata room: aliases refused on it",
            node=server.node_name,
            server=server.server_name,
            aliases=len(labels),
            alias_names=labels[:NAMED_AT_MOST],
            reason=group[0].reason,
            hint="raise the project's metadata_items quota, or publish fewer or shorter aliases",
        )
    return problems


def _server_of(refusal: Refusal) -> ServerState:
    assert refusal.server is not None
    return refusal.server


def _named_nodes(nodes: Sequence[str]) -> str:
    shown = ", ".join(nodes[:NAMED_AT_MOST])
    return shown if len(nodes) <= NAMED_AT_MOST else f"{shown} and {len(nodes) - NAMED_AT_MOST} more nodes"
