"""What a plan refused, said once per alias and once per node.

A cluster over its metadata quota refuses (alias, node) pairs by the hundred thousand: 2,000 aliases on
500 nodes that each have room for 1,200 are 400,000 refusals in every loop. One line each flooded the log
(a million lines and a minute of CPU per loop); the operator needs to know which aliases did not land,
which nodes are full, and what to do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import structlog

from landb_webhook.landb.plan import Refusal
from landb_webhook.logs import RepeatLimitedLog
from landb_webhook.metrics import Metrics

log = structlog.get_logger(__name__)

FROZEN = "alias held in a key or form we never edit: left in place"
NAMED_AT_MOST = 5
"""Nodes (or aliases) named on one line; the line gives how many there are in all."""


def report_refusals(refusals: Sequence[Refusal], metrics: Metrics, warnings: RepeatLimitedLog) -> list[str]:
    """Log and count the refusals; return, one per alias, those a later loop may land.

    Frozen holders are said once per period (no retry changes them); every other refusal gives one line
    per alias, and a node out of room one more line of its own."""
    by_label: dict[str, list[Refusal]] = defaultdict(list)
    out_of_room: dict[str, list[Refusal]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for refusal in refusals:
        counts["plan" if refusal.kind == "capacity" else refusal.kind] += 1
        if refusal.kind == "frozen":
            warnings.warning(
                (refusal.label, FROZEN), FROZEN, subject=refusal.label, node=refusal.server.node_name
            )
            continue
        by_label[refusal.label].append(refusal)
        if refusal.kind == "capacity":
            out_of_room[refusal.server.server_id].append(refusal)
    for reason, count in counts.items():
        metrics.refused_changes_total.labels(reason=reason).inc(count)

    problems: list[str] = []
    for label in sorted(by_label):
        refused = by_label[label]
        nodes = sorted({r.server.node_name for r in refused})
        log.warning(
            "change refused",
            alias=label,
            nodes=len(nodes),
            node_names=nodes[:NAMED_AT_MOST],
            reason=refused[0].reason,
        )
        problems.append(f"{label} on {_named(nodes)}: {refused[0].reason}")
    for group in sorted(out_of_room.values(), key=lambda g: g[0].server.node_name):
        labels = sorted({r.label for r in group})
        server = group[0].server
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


def _named(nodes: Sequence[str]) -> str:
    named = ", ".join(nodes[:NAMED_AT_MOST])
    return named if len(nodes) <= NAMED_AT_MOST else f"{named} and {len(nodes) - NAMED_AT_MOST} more nodes"
