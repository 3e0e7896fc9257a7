"""Carries out a plan against Nova: every make write before any break write, servers in parallel."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import structlog

from landb_webhook.deadline import contexts_for
from landb_webhook.landb.plan import MetadataWrite, ServerPlan
from landb_webhook.metrics import Metrics
from landb_webhook.ports import ServerStore, UpstreamError

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WriteFailure:
    plan: ServerPlan
    phase: str
    reason: str


@dataclass(frozen=True)
class Outcome:
    failures: tuple[WriteFailure, ...]
    held_back: tuple[ServerPlan, ...]
    """Break writes not attempted because an addition they depend on did not land."""

    def failed_labels(self) -> set[str]:
        """Labels whose change did not fully land: their TXT claims must stay."""
        labels = {t.label for f in self.failures for t in (*f.plan.added, *f.plan.removed)}
        labels.update(t.label for p in self.held_back for t in p.removed)
        return labels


class PlanExecutor:
    def __init__(self, servers: ServerStore, *, concurrency: int, dry_run: bool, metrics: Metrics) -> None:
        self._servers = servers
        self._concurrency = concurrency
        self._dry_run = dry_run
        self._metrics = metrics

    def execute(self, plans: Sequence[ServerPlan]) -> Outcome:
        makes = [p for p in plans if p.make]
        make_failures = self._run_phase("make", makes, lambda p: p.make)
        failed = {f.plan.server.server_id for f in make_failures}
        unlanded = {t.label for f in make_failures for t in f.plan.added}

        breaks, held_back = [], []
        for plan in plans:
            if not plan.brk:
                continue
            if plan.server.server_id in failed or unlanded & {t.label for t in plan.removed}:
                held_back.append(plan)
                log.warning(
                    "removal held back until the new carriers are written",
                    node=plan.server.node_name,
                    server=plan.server.server_name,
                    aliases_kept=[t.render() for t in plan.removed],
                )
                continue
            breaks.append(plan)
        break_failures = self._run_phase("break", breaks, lambda p: p.brk)

        return Outcome(failures=(*make_failures, *break_failures), held_back=tuple(held_back))

    def _run_phase(
        self, phase: str, plans: Sequence[ServerPlan], write_of: Callable[[ServerPlan], MetadataWrite]
    ) -> list[WriteFailure]:
        if not plans:
            return []
        contexts = contexts_for(len(plans))  # the writes see the reply deadline of this call
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix=f"landb-{phase}") as pool:
            results = list(pool.map(lambda c, p: c.run(self._write, phase, p, write_of(p)), contexts, plans))
        return [failure for failure in results if failure is not None]

    def _write(self, phase: str, plan: ServerPlan, write: MetadataWrite) -> WriteFailure | None:
        tokens = plan.added if phase == "make" else plan.removed
        context = {
            "phase": phase,
            "node": plan.server.node_name,
            "server": plan.server.server_name,
            "server_id": plan.server.server_id,
            "keys_set": sorted(write.upserts),
            "keys_deleted": list(write.deletes),
            ("aliases_added" if phase == "make" else "aliases_removed"): [t.render() for t in tokens],
        }
        if self._dry_run:
            log.info("dry run: metadata write skipped", values=dict(write.upserts), **context)
            for operation in (["post"] if write.upserts else []) + ["delete"] * len(write.deletes):
                self._metrics.metadata_writes_total.labels(operation=operation, result="dry_run").inc()
            return None
        operation = "post"
        try:
            if write.upserts:
                self._servers.set_metadata(plan.server.server_id, write.upserts)
                self._metrics.metadata_writes_total.labels(operation="post", result="ok").inc()
            operation = "delete"
            for key in write.deletes:
                self._servers.delete_metadata(plan.server.server_id, key)
                self._metrics.metadata_writes_total.labels(operation="delete", result="ok").inc()
        except UpstreamError as exc:
            self._metrics.metadata_writes_total.labels(operation=operation, result="error").inc()
            self._metrics.upstream_errors_total.labels(upstream=exc.upstream).inc()
            log.error("metadata write failed", reason=exc.reason, retryable=exc.retryable, **context)
            return WriteFailure(plan, phase, f"{plan.server.node_name}: {exc.reason}")
        log.info("metadata written", values=dict(write.upserts), **context)
        return None
