"""Work the provider hands off its request path: one piece at a time, in a thread of its own."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class BackgroundWork:
    """Runs what offer() is given in one worker thread, unless earlier work is still running then.

    Offered work is dropped rather than queued while some runs: it is what the next request detects
    again, so nothing is lost by dropping it and nothing piles up behind a slow upstream.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._running: Future[None] | None = None
        self._closed = False

    def offer(self, work: Callable[..., None], *args: Any) -> bool:
        """Start ``work(*args)`` unless other work still runs or close() was called; True if started."""
        with self._lock:
            if self._closed or (self._running is not None and not self._running.done()):
                return False
            self._running = self._executor.submit(self._run, work, *args)
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the work running now (if any) has finished; False if it runs on past ``timeout``."""
        with self._lock:
            running = self._running
        if running is None:
            return True
        finished, _ = concurrent.futures.wait([running], timeout)
        return bool(finished)

    def close(self, timeout: float | None = None) -> bool:
        """Accept no more work and wait for the running one; False if it still runs after ``timeout``."""
        with self._lock:
            self._closed = True
        finished = self.wait(timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)
        return finished

    def _run(self, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except Exception as error:  # the next request offers it again
            log.warning("background work failed", work=self._name, error=f"{type(error).__name__}: {error}")
