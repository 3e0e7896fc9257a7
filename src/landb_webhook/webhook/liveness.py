"""Whether the process still gets work done: the rule behind ``/healthz``.

The event loop can answer probes while every provider call is stuck in its thread (a library waiting
on a lock for good, a read that never ends): each webhook call then meets its deadline, external-dns
gets 503 loop after loop, and a probe that only asks "does the loop answer" keeps the pod running
forever. Only a restart clears such a wedge, so the liveness probe must see it.

The rule: the process is *stalled* when a provider call has been in flight (handed to a thread and not
returned) for longer than ``stall_after`` seconds, and no call of any kind returned within those
``stall_after`` seconds. A slow or failing upstream does not stall anything: its calls return, with an
error or past their reply deadline, within a timeout or two. A call still queued when its deadline
passes is cancelled and stops counting, so only calls that hold a thread can stall the process.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

STALL_AFTER_DEADLINES = 6
"""``stall_after`` in reply deadlines: a call runs past its deadline by at most a timeout or two."""


class CallProgress:
    """Calls in flight and the last one that returned; thread-safe."""

    def __init__(self, stall_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after = stall_after
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._in_flight: dict[int, float] = {}
        self._last_return = clock()
        """Start-up counts as a return: a process is given ``stall_after`` before it can be stalled."""

    def started(self) -> int:
        """Register a call handed to a thread; give the id to :meth:`ended` when it is done."""
        with self._lock:
            call = next(self._ids)
            self._in_flight[call] = self._clock()
            return call

    def ended(self, call: int, *, returned: bool) -> None:
        """``returned``: the call ran and came back (a result or an error); False: it was cancelled
        before it ran, which says nothing about progress."""
        with self._lock:
            self._in_flight.pop(call, None)
            if returned:
                self._last_return = self._clock()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def stalled(self) -> str | None:
        """Why the process is stuck (see the module docstring), or None while it gets work done."""
        with self._lock:
            now = self._clock()
            oldest = min(self._in_flight.values(), default=None)
            if oldest is None or now - oldest <= self.stall_after:
                return None
            if now - self._last_return <= self.stall_after:
                return None
            return (
                f"{len(self._in_flight)} webhook call(s) in flight, the oldest for {now - oldest:.0f} s, "
                f"and none returned for {now - self._last_return:.0f} s: the process is stuck"
            )
