"""Steps 6 and 7 of an apply: the writes, in the order that never leaves an alias without a carrier (the
steps: provider.apply.applier), and what of them landed: the summary line's counts, where each name was
written (its ``Written`` event)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

import structlog

from landb_webhook.landb.plan import Plan, ServerPlan
from landb_webhook.provider.apply.executor import PlanExecutor, WriteFailure
from landb_webhook.provider.apply.fence import WriteFence, WriterLeaseLost
from landb_webhook.provider.apply.loadbalancers import NO_TAG_WRITES, TagOutcome, TagWrites
from landb_webhook.provider.context import named

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WrittenCounts:
    """The writes of an apply that landed, counted for its summary line."""

    servers: int
    """Servers on which at least one write (leave, make or break) fully landed."""
    tokens_added: int
    tokens_removed: int


@dataclass(frozen=True)
class Outcome:
    failures: tuple[WriteFailure, ...]
    held_back: tuple[ServerPlan, ...]
    """Break writes not attempted because an addition they depend on did not land."""
    abandoned: WriterLeaseLost | None = None
    """Why the rest of the plan was not sent: the writer lease was no longer certain."""
    tags: TagOutcome = NO_TAG_WRITES
    """How the load balancers' tag writes went (provider.loadbalancers)."""

    def fully_written(self, plans: Sequence[ServerPlan]) -> list[ServerPlan]:
        """The plans whose every write landed (in a dry run: would have)."""
        missed = {f.plan.server.server_id for f in self.failures}
        missed |= {p.server.server_id for p in self.held_back}
        return [p for p in plans if p.server.server_id not in missed]

    def written_counts(self, plans: Sequence[ServerPlan]) -> WrittenCounts:
        """What of ``plans`` landed (in a dry run: would have), write by write: a server's leave write lands
        the tokens leaving DNS, its make write its added tokens, its break write its other removed ones. A
        write that failed, even in part (its POST landed, a DELETE did not), counts as failed and none of its
        tokens count; a held-back one as neither, and so do the writes of a server whose leave write failed
        (they were not sent)."""
        failed = {(f.plan.server.server_id, f.phase) for f in self.failures}
        held_back = {p.server.server_id for p in self.held_back}
        servers: set[str] = set()
        added = removed = 0
        for plan in plans:
            server_id = plan.server.server_id
            if plan.leave_write:
                if (server_id, "leave") in failed:
                    continue
                removed += len(plan.left)
                servers.add(server_id)
            if plan.make_write and (server_id, "make") not in failed:
                added += len(plan.added)
                servers.add(server_id)
            if plan.break_write and server_id not in held_back and (server_id, "break") not in failed:
                left = set(plan.left)
                removed += sum(1 for token in plan.removed if token not in left)
                servers.add(server_id)
        return WrittenCounts(servers=len(servers), tokens_added=added, tokens_removed=removed)

    def failed_labels(self) -> set[str]:
        """Labels whose change did not fully land: their TXT claims must stay."""
        labels = {t.label for f in self.failures for t in (*f.plan.added, *f.plan.removed)}
        labels.update(t.label for p in self.held_back for t in p.removed)
        return labels | self.tags.failed_labels()


def write_in_order(
    executor: PlanExecutor, plans: Sequence[ServerPlan], fence: WriteFence, tags: TagWrites | None = None
) -> Outcome:
    """Steps 6 and 7: the servers' leave writes, then every make write, on load balancers then servers,
    then the break writes whose additions landed, on servers then load balancers (``tags``: the load
    balancers' writes, if any)."""
    # 6. make writes. First the leave writes: the removals of aliases leaving DNS altogether, which have no
    # carrier to protect; each server's make write is packed on what its leave write left, so the room
    # they free serves this apply's additions. A server whose leave write failed gets no other write.
    leave_failures, abandoned = executor.run_phase(
        "leave", [p for p in plans if p.leave_write], lambda p: p.leave_write, fence
    )
    if abandoned is not None:
        return Outcome(failures=tuple(leave_failures), held_back=(), abandoned=abandoned)
    not_left = {f.plan.server.server_id for f in leave_failures}
    # Then every addition, on every load balancer and every server.
    tagged = tags.make_writes(fence) if tags is not None else NO_TAG_WRITES
    if tagged.abandoned is not None:
        return Outcome(failures=tuple(leave_failures), held_back=(), abandoned=tagged.abandoned, tags=tagged)
    make_failures, abandoned = executor.run_phase(
        "make",
        [p for p in plans if p.make_write and p.server.server_id not in not_left],
        lambda p: p.make_write,
        fence,
    )
    make_failures = [*leave_failures, *make_failures]
    if abandoned is not None:
        return Outcome(failures=tuple(make_failures), held_back=(), abandoned=abandoned, tags=tagged)

    # 7. break writes, but for a server whose make write failed, and for a removal of an alias whose new
    # carrier (a server or a load balancer) was not written: that alias would be left with no carrier.
    failed = {f.plan.server.server_id for f in make_failures}
    not_added = {t.label for f in make_failures for t in f.plan.added} | tagged.not_added()
    breaks, held_back = [], []
    for plan in plans:
        if not plan.break_write or plan.server.server_id in not_left:
            continue
        if plan.server.server_id in failed or not_added & {t.label for t in plan.removed}:
            held_back.append(plan)
            log.warning(
                "removal held back until the new carriers are written",
                node=plan.server.node_name,
                server=plan.server.server_name,
                aliases_kept=[t.render() for t in plan.removed],
            )
            continue
        breaks.append(plan)
    break_failures, abandoned = executor.run_phase("break", breaks, lambda p: p.break_write, fence)
    if abandoned is None and tags is not None:
        tagged = tagged.then(tags.break_writes(not_added, fence))
    return Outcome(
        failures=(*make_failures, *break_failures),
        held_back=tuple(held_back),
        abandoned=abandoned or tagged.abandoned,
        tags=tagged,
    )


def log_summary(
    plan: Plan,
    nodes_seen: int,
    outcome: Outcome,
    refused: int,
    started: float,
    *,
    created: Set[str],
    removed: Set[str],
    dry_run: bool,
) -> None:
    """One info line per apply for the operator, counting names (an alias on three nodes is one):
    ``+1 -1 aliases (+3 -3 tokens) on 3 of 5 nodes, 0 failed, 412 ms, created app, removed old``; with
    load balancer tags written, ``... on 0 of 5 nodes and 1 load balancer, ...``.

    Every count is what landed, never what was planned: tokens and nodes those of the writes that
    landed (``Outcome.written_counts``), aliases those whose whole change landed; the nodes and load
    balancers a write failed on are counted apart (``failed``), and so are held-back removals."""
    counts = outcome.written_counts(plan.servers)
    tokens_added, tokens_removed = counts.tokens_added, counts.tokens_removed
    tags = outcome.tags
    load_balancers = len(set(tags.written))
    failed = len({f.plan.server.server_id for f in outcome.failures}) + len(tags.failures)
    held_back = len(outcome.held_back) + len(tags.held_back)
    duration_ms = round((time.monotonic() - started) * 1000)
    on_load_balancers = f" and {load_balancers} load balancer{'s' * (load_balancers != 1)}"
    parts = [
        f"+{len(created)} -{len(removed)} aliases (+{tokens_added} -{tokens_removed} tokens) "
        f"on {counts.servers} of {nodes_seen} nodes{on_load_balancers if load_balancers else ''}",
        f"{failed} failed",
        f"{duration_ms} ms",
    ]
    parts += [f"{count} {what}" for count, what in ((held_back, "held back"), (refused, "refused")) if count]
    parts += [
        f"{what} {named(names)}" for what, names in (("created", created), ("removed", removed)) if names
    ]
    if dry_run:
        parts.append("dry run: nothing written")
    log.info(
        "apply finished",
        summary=", ".join(parts),
        aliases_added=len(created),
        aliases_removed=len(removed),
        tokens_added=tokens_added,
        tokens_removed=tokens_removed,
        nodes_written=counts.servers,
        nodes_seen=nodes_seen,
        nodes_failed=failed,
        load_balancers_written=load_balancers,
        held_back=held_back,
        refused=refused,
        duration_ms=duration_ms,
        dry_run=dry_run,
    )


def where_written(
    label: str,
    wanted: Mapping[str, frozenset[str]],
    homes: Mapping[str, frozenset[str]],
    nodes: Callable[[frozenset[str]], str],
) -> str:
    """``its load balancer``, ``3 ingress nodes (a, b, c)``: where a name was written."""
    if label in homes:
        tagged = len(homes[label])
        return "its load balancer" if tagged == 1 else f"{tagged} load balancers"
    return nodes(wanted.get(label, frozenset()))


def nodes_described(names: Mapping[str, str]) -> Callable[[frozenset[str]], str]:
    """``3 ingress nodes (a, b, c)`` for a set of server ids (``names``: id -> node name), each set
    described once: when a node joins, every name is written to the same nodes."""

    @functools.cache
    def described(server_ids: frozenset[str]) -> str:
        nodes = sorted(names.get(server_id, server_id) for server_id in server_ids)
        noun = "ingress node" if len(nodes) == 1 else "ingress nodes"
        return f"{len(nodes)} {noun} ({named(nodes)})"

    return described
