"""One strategy in a process of its own, driven over a pipe, so its CPU time and peak RSS are its own.

The simulator runs in the benchmark's process; the strategy here talks to it over HTTP. Each call goes
through the webhook's wire codec (decode the request body, encode the reply) as the sidecar would, and
is measured: wall time, CPU time of this whole process (every thread: the node watch, the write pool),
and peak RSS during the call (Linux ``clear_refs``: the high-water mark is reset before each call).
"""

from __future__ import annotations

import cProfile
import io
import itertools
import os
import resource
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from bench.strategies import Endpoints, Strategy, build
from landb_webhook.embedding import freeze_startup_objects
from landb_webhook.logs import configure_logging
from landb_webhook.webhook import wire

T = TypeVar("T")
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"
PROFILE_DIR = "LANDB_BENCH_PROFILE"
"""Set to a directory: each measured call's profile (this thread's, cProfile) is written there as
``<n>-<command>.prof``, for ``python -m pstats`` or snakeviz. It slows the calls it profiles."""
_calls = itertools.count(1)
EVENTS_TIMEOUT = 300.0
"""At most: a first publish of 1,000 names tells 1,000 events, ~90 s at the emitter's default rate."""


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    peak_rss_mb: float
    log_lines: int = 0
    """Lines the provider logged during the call (at info, as the sidecar does)."""


class _LineCounter(io.TextIOBase):
    """Where the logs go: nowhere, but each line is counted (and its formatting cost paid)."""

    lines = 0

    def write(self, text: str) -> int:
        _LineCounter.lines += text.count("\n")
        return len(text)

    def writable(self) -> bool:
        return True


def _reset_peak() -> None:
    try:
        with open(_CLEAR_REFS, "w") as handle:
            handle.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    except OSError:
        pass  # elsewhere the peak is the process lifetime's (ru_maxrss), still a valid upper bound


def _peak_rss_mb() -> float:
    try:
        with open(_STATUS) as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measured(command: str, call: Callable[[], T]) -> tuple[T, Timing]:
    _reset_peak()
    lines = _LineCounter.lines
    profile_dir = os.environ.get(PROFILE_DIR)
    profiler = cProfile.Profile() if profile_dir else None
    wall, cpu = time.perf_counter(), time.process_time()
    result = call() if profiler is None else profiler.runcall(call)
    timing = Timing(
        time.perf_counter() - wall, time.process_time() - cpu, _peak_rss_mb(), _LineCounter.lines - lines
    )
    if profiler is not None and profile_dir:
        profiler.dump_stats(os.path.join(profile_dir, f"{next(_calls):03d}-{command}.prof"))
    return result, timing


def serve(conn: Connection, kind: str, where: Endpoints, environment: dict[str, str]) -> None:
    """Answer ``(command, argument)`` messages until ``stop``; every answer is ``(ok, value)``."""
    os.environ.update(environment)
    # The sidecar logs at info; the lines go nowhere here, but their cost and number are counted.
    configure_logging("info", "json", stream=_LineCounter())
    strategy = build(kind, where)
    strategy.records()  # authenticate, discover, connect: not part of any measured loop
    freeze_startup_objects()  # as the sidecar does once started
    conn.send((True, None))
    handlers: dict[str, Callable[[Any], Any]] = {
        "records": lambda _: measured("records", lambda: wire.encode_endpoints(strategy.records())),
        "adjust": lambda body: measured(
            "adjust", lambda: wire.encode_endpoints(strategy.adjust_endpoints(wire.decode_endpoints(body)))
        ),
        "apply": lambda body: measured("apply", lambda: _apply(strategy.apply_changes, body)),
        "events": lambda _: measured("events", lambda: _events_written(strategy)),
        "ingress": lambda _: strategy.ingress_names(),
    }
    try:
        while True:
            command, argument = conn.recv()
            if command == "stop":
                break
            try:
                conn.send((True, handlers[command](argument)))
            except Exception:
                conn.send((False, traceback.format_exc()))
    finally:
        strategy.close()


def _events_written(strategy: Strategy) -> None:
    """Wait until the Kubernetes Events the loop told have been written (their requests then count
    against the loop that caused them, not against a later one); the emitter writes ~10 a second."""
    deadline = time.monotonic() + EVENTS_TIMEOUT
    while not strategy.events_written():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the events told were not written within {EVENTS_TIMEOUT:.0f} s")
        time.sleep(0.01)


def _apply(apply: Callable[[Any], None], body: bytes) -> str | None:
    """None when every change landed, else the error ApplyChanges raised (the webhook's 503 reason)."""
    try:
        apply(wire.decode_changes(body))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
