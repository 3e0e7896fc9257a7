"""Sends one phase of a plan's writes to Nova, ``concurrency`` requests at a time: the machinery that
steps 6 and 7 of provider.apply call (which phase runs when, and which removals are held back, is decided
there).

Each request is fenced (provider.fence): it is sent only while this writer surely still holds the writer
lease; the first one that is not stops the apply, and nothing more is sent.

Within one server's write the POST lands before its DELETEs (landb.plan.MetadataWrite). Within that rule
every request is independent, so a phase is scheduled request by request, not server by server: a
server's DELETEs run side by side once its POST has landed, and the pool is kept full with the requests
that release the most work first.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import structlog

from landb_webhook.backends import ServerStore, UpstreamError
from landb_webhook.deadline import contexts_for
from landb_webhook.landb.plan import MetadataWrite, ServerPlan
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.fence import WriteFence, WriterLeaseLost, send_fenced

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WriteFailure:
    plan: ServerPlan
    phase: str
    reason: str


@dataclass(frozen=True, eq=False)
class _Request:
    """One Nova request of a server's write: the merge POST (``key`` None) or the DELETE of ``key``."""

    server: _ServerWrite
    key: str | None = None

    @property
    def operation(self) -> str:
        return "post" if self.key is None else "delete"


@dataclass
class _ServerWrite:
    """One server's write in one phase, and how far it got."""

    plan: ServerPlan
    write: MetadataWrite
    unfinished: int = 0
    errors: list[str] = field(default_factory=list)

    def first_requests(self) -> list[_Request]:
        """What may start at once: the POST, else (nothing to merge) every DELETE."""
        return [_Request(self)] if self.write.upserts else self.deletes()

    def deletes(self) -> list[_Request]:
        return [_Request(self, key) for key in self.write.deletes]


class PlanExecutor:
    def __init__(self, servers: ServerStore, *, concurrency: int, dry_run: bool, metrics: Metrics) -> None:
        self._servers = servers
        self._concurrency = concurrency
        self._dry_run = dry_run
        self._metrics = metrics

    def run_phase(
        self,
        phase: str,
        plans: Sequence[ServerPlan],
        write_of: Callable[[ServerPlan], MetadataWrite],
        fence: WriteFence,
    ) -> tuple[list[WriteFailure], WriterLeaseLost | None]:
        """Every request of the phase, at most ``concurrency`` at a time; returns one failure per server
        whose write did not fully land, and why the phase was abandoned if the fence stopped it."""
        writes = [_ServerWrite(plan, write_of(plan)) for plan in plans]
        if self._dry_run:
            for server in writes:
                self._skip(phase, server)
            return [], None
        abandoned: WriterLeaseLost | None = None
        # Ready requests, the most work they release first: a POST with many DELETEs behind it, then
        # other POSTs, then DELETEs. Ties keep the plan's order.
        ready: list[tuple[int, int, _Request]] = []
        order = itertools.count()

        def release(requests: list[_Request]) -> None:
            for request in requests:
                behind = len(request.server.write.deletes) if request.key is None else -1
                heapq.heappush(ready, (-behind, next(order), request))

        for server in writes:
            server.unfinished = int(bool(server.write.upserts)) + len(server.write.deletes)
            release(server.first_requests())
        running: dict[Future[UpstreamError | WriterLeaseLost | None], _Request] = {}
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix=f"landb-{phase}") as pool:
            while ready or running:
                free = self._concurrency - len(running)
                for context in contexts_for(min(free, len(ready))):  # they see this call's reply deadline
                    request = heapq.heappop(ready)[2]
                    running[pool.submit(context.run, self._send, request, fence)] = request
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    request = running.pop(future)
                    error = future.result()
                    if isinstance(error, WriterLeaseLost):
                        # Not sent: let what is in flight finish, start nothing more.
                        abandoned = abandoned or error
                        ready.clear()
                        continue
                    server = request.server
                    server.unfinished -= 1
                    self._count(request, error)
                    if error is not None:
                        self._log_failure(phase, request, error)
                        server.errors.append(error.reason)
                        server.unfinished -= len(server.write.deletes) if request.key is None else 0
                    elif request.key is None:
                        release(server.deletes())
                    if server.unfinished == 0 and not server.errors:
                        log.info(
                            "metadata written", values=dict(server.write.upserts), **_context(phase, server)
                        )
        if abandoned is not None:
            log.error(
                "apply abandoned: writer lease no longer certain, nothing more is sent",
                phase=phase,
                reason=str(abandoned),
                nodes_not_fully_written=sorted(s.plan.server.node_name for s in writes if s.unfinished),
            )
        return [WriteFailure(s.plan, phase, _reason(s)) for s in writes if s.errors], abandoned

    def _send(self, request: _Request, fence: WriteFence) -> UpstreamError | WriterLeaseLost | None:
        plan = request.server.plan
        server_id = plan.server.server_id

        def write() -> None:
            if request.key is None:
                self._servers.set_metadata(server_id, request.server.write.upserts)
            else:
                self._servers.delete_metadata(server_id, request.key)

        return send_fenced(fence, f"{request.operation} on {plan.server.node_name}", write)

    def _count(self, request: _Request, error: UpstreamError | None) -> None:
        self._metrics.metadata_writes_total.labels(
            operation=request.operation, result="ok" if error is None else "error"
        ).inc()
        if error is not None:
            self._metrics.upstream_errors_total.labels(upstream=error.upstream).inc()

    def _skip(self, phase: str, server: _ServerWrite) -> None:
        log.info(
            "dry run: metadata write skipped", values=dict(server.write.upserts), **_context(phase, server)
        )
        for request in ([_Request(server)] if server.write.upserts else []) + server.deletes():
            self._metrics.metadata_writes_total.labels(operation=request.operation, result="dry_run").inc()

    def _log_failure(self, phase: str, request: _Request, error: UpstreamError) -> None:
        log.error(
            "metadata write failed",
            reason=error.reason,
            retryable=error.retryable,
            request=request.operation if request.key is None else f"delete {request.key}",
            **_context(phase, request.server),
        )


def _reason(server: _ServerWrite) -> str:
    """One line per server, however many of its requests failed (each is logged and counted)."""
    more = len(server.errors) - 1
    return f"{server.plan.server.node_name}: {server.errors[0]}" + (
        f" (and {more} more failed request{'s' if more > 1 else ''})" if more else ""
    )


def _context(phase: str, server: _ServerWrite) -> dict[str, object]:
    plan, write = server.plan, server.write
    tokens = plan.added if phase == "make" else plan.removed
    return {
        "phase": phase,
        "node": plan.server.node_name,
        "server": plan.server.server_name,
        "server_id": plan.server.server_id,
        "keys_set": sorted(write.upserts),
        "keys_deleted": list(write.deletes),
        ("aliases_added" if phase == "make" else "aliases_removed"): [t.render() for t in tokens],
    }
