"""A clock and sleeper for retry tests: sleeping returns at once and moves the clock on instead."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Sleep:
    at: float
    """The clock when the sleep started."""
    seconds: float


class FakeTime:
    """``monotonic()`` is the real monotonic clock plus everything slept so far, so real call durations
    (timeouts) count and backoff delays cost no wall time. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0
        self.sleeps: list[Sleep] = []

    def monotonic(self) -> float:
        with self._lock:
            return time.monotonic() + self._offset

    def time(self) -> float:
        """The wall clock (epoch seconds), moved on by the same sleeps."""
        with self._lock:
            return time.time() + self._offset

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(Sleep(time.monotonic() + self._offset, seconds))
            self._offset += seconds

    @property
    def delays(self) -> list[float]:
        with self._lock:
            return [sleep.seconds for sleep in self.sleeps]
