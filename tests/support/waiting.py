"""Waiting for what another thread or process makes true: a condition with a deadline, never a fixed
sleep (how we test: "time is never the synchronisation").

One helper for the tests and the benchmark. The deadline is a bound a loaded machine stays far below,
never a measure: say what it allows where it is chosen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    """The condition did not hold within its deadline (an AssertionError: a failed test, not an error)."""


def eventually(
    condition: Callable[[], T],
    *,
    what: str,
    timeout: float = 5.0,
    every: float = 0.01,
    detail: Callable[[], str] | None = None,
) -> T:
    """Ask ``condition()`` every ``every`` seconds until its answer is truthy and return that answer; raise
    TimedOut naming ``what`` (and ``detail()``, a log say) once ``timeout`` seconds have passed. An
    exception ``condition`` raises ends the wait at once (``assert process.poll() is None`` in it: a
    process that died is not waited for)."""
    __tracebackhide__ = True
    deadline = time.monotonic() + timeout
    while True:
        answer = condition()
        if answer:
            return answer
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:g} s waiting for {what}"
            raise TimedOut(f"{message}:\n{detail()}" if detail is not None else message)
        time.sleep(every)
