"""A daemon thread that runs one step after another: the DNS watch's and the event emitter's."""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class PeriodicWorker:
    """Runs ``step`` in a daemon thread named ``name``, again after the seconds it returns (``idle`` when it
    returns None), and at once when woken. A step that raises is logged with ``failed`` and the next runs
    after ``after_failure`` seconds: the thread outlives any surprise."""

    def __init__(
        self, name: str, step: Callable[[], float | None], *, idle: float, after_failure: float, failed: str
    ) -> None:
        self._name = name
        self._step = step
        self._idle = idle
        self._after_failure = after_failure
        self._failed = failed
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay: float | None = 0.0
        while True:
            self._wake.wait(self._idle if delay is None else delay)
            self._wake.clear()  # a wake from here on cuts the next wait short: none is lost
            if self._stop.is_set():
                return
            try:
                delay = self._step()
            except Exception:
                log.exception(self._failed)
                delay = self._after_failure
