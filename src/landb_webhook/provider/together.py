"""The requests of one phase, sent together: one round trip where there were as many as requests.

None of an apply's reads (state, servers, load balancers, claims, quota) needs another's answer, nor do
Records' three, nor an apply's two Kubernetes writes after its metadata writes. ``Together`` starts each
on a small pool of its own and waits for all of them:

- each runs in a copy of the caller's context, so the adapters see the call's reply deadline;
- the wait ends at the reply deadline: a request still unanswered then is an UpstreamError;
- a failure fails the phase once every request has ended: the first in the order started;
- Nova's listing, the large one, is made by the calling thread inside the block (why: the malloc arenas,
  docs/architecture.md "The reads of one phase go out together").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextvars import copy_context
from typing import TypeVar

from landb_webhook.backends import UpstreamError
from landb_webhook.deadline import reply_deadline

T = TypeVar("T")

MAX_READS = 5
"""Threads of one phase's pool: the most reads a phase starts (the apply's four, and one spare)."""


class Together:
    """``with Together("apply") as reads: a = reads.start(read_a, ...); b = read_b()``; after the block,
    ``a.result()`` is read_a's answer. The block's end waits for every read started (see the module
    docstring); a read made in the block by the caller itself (``read_b``) runs meanwhile."""

    def __init__(self, phase: str) -> None:
        self._phase = phase
        self._started: list[tuple[str, str, Future[object]]] = []
        self._optional: set[Future[object]] = set()
        self._pool = ThreadPoolExecutor(MAX_READS, thread_name_prefix=f"landb-{phase}-read")

    def start(self, read: Callable[[], T], *, upstream: str, what: str, optional: bool = False) -> Future[T]:
        """Send ``read`` now; ``upstream`` (metrics.UPSTREAMS) and ``what`` name it if it is not answered
        by the reply deadline. ``optional``: a read whose answer may turn out not to be needed: its
        failure is raised by its ``result()``, where it is used, not by the block's end."""
        if len(self._started) >= MAX_READS:
            raise ValueError(f"more than {MAX_READS} reads in one phase")
        future = self._pool.submit(copy_context().run, read)
        self._started.append((upstream, what, future))  # type: ignore[arg-type]
        if optional:
            self._optional.add(future)  # type: ignore[arg-type]
        return future

    def __enter__(self) -> Together:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if exc_info[0] is None:
                self._wait()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _wait(self) -> None:
        deadline = reply_deadline()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        _, pending = wait([future for _, _, future in self._started], timeout=timeout)
        for _, _, future in self._started:
            if future.done() and future not in self._optional and (error := future.exception()) is not None:
                raise error
        late = [
            (upstream, what)
            for upstream, what, future in self._started
            if future in pending and future not in self._optional
        ]
        if late:
            raise UpstreamError(
                late[0][0],
                f"{', '.join(what for _, what in late)} not answered by the reply deadline ({self._phase})",
            )
