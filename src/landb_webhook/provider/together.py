"""The requests of one phase, sent together: one round trip where there were as many as requests.

An apply needs, before it can plan, the state ConfigMap, Nova's servers, the project's load balancers,
the claims and the metadata quota; Records needs the servers, the load balancers and the claims. None
of them needs the answer of another, and with 50 ms per request the apply of a node joining spent more
time waiting for them one after the other than writing. ``Together`` starts each on a small pool of its
own, and waits for all of them. After its metadata writes, an apply's two Kubernetes writes (the claims
dropped, the state stored: provider.apply step 8) go out together the same way:

- each read runs in a copy of the caller's context, so the adapters see the call's reply deadline
  (landb_webhook.deadline) and stop retrying at it, as they do when called directly;
- the wait itself ends at the reply deadline: a read still unanswered then is an UpstreamError (the
  webhook has answered 503 by then), and the reads left running finish on their own threads;
- a read that fails fails the phase, after every read has ended: the first failure in the order the
  reads were started is raised, so the error does not depend on which answer came first;
- what one read does in order (the pages of one listing, each needing the marker of the one before)
  stays in order: it is one read;
- the largest read, Nova's listing (~13 MB of JSON at 500 nodes x 1,000 names), is made by the calling
  thread inside the block, as before, while the others are in flight: decoded in a fresh pool thread
  each call, it went to whichever malloc arena that thread was given, and each arena kept its own freed
  pages (300 x 1,000: the peak RSS grew by 144 MB over the benchmark's eight loops, 88 MB before).
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
