"""The DNS watcher's cost in the steady state: questions a second, CPU and memory, for N names.

Knot DNS (bench/knot.py, Debian's ``knot``) serves ``cern.ch.`` on loopback with every name published
as the webhook expects it, so the watcher finds each ``published`` and stays there. The watcher runs its
real thread with the production defaults (5 questions a second at most, each name every 120 s) in this
process, whose main thread only waits: after a warm-up (the first round), the questions asked, the
process' CPU time and its resident memory are read over a steady window.

Run: .venv/bin/python -m bench.dns_watch            (300 names, 60 s warm-up, 240 s window)
     .venv/bin/python -m bench.dns_watch --names 1000 --recheck-period 60 --seconds 120
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.knot import running_knot
from landb_webhook.adapters.dns import DnsResolver
from landb_webhook.config import Settings, parse_resolver
from landb_webhook.landb.propagation import Answer, State
from landb_webhook.logs import configure_logging
from landb_webhook.metrics import Metrics
from landb_webhook.provider.watch.dns_watch import DnsWatch
from landb_webhook.provider.watch.publications import PublicationLog
from landb_webhook.wiring import dns_watch_options


@dataclass
class Counting:
    resolver: DnsResolver
    asked: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def where(self) -> str:
        return self.resolver.where

    def resolve(self, dns_name: str) -> Answer:
        with self.lock:
            self.asked += 1
        return self.resolver.resolve(dns_name)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ips_for(index: int) -> list[str]:
    """Three ingress nodes per name, as a cluster's are."""
    return [f"10.{index // 250}.{index % 250}.{node}" for node in (1, 2, 3)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--names", type=int, default=300)
    parser.add_argument("--queries-per-second", type=float, default=5.0)
    parser.add_argument("--recheck-period", type=float, default=120.0)
    parser.add_argument("--warm-up", type=float, default=60.0, help="seconds before the window")
    parser.add_argument("--seconds", type=float, default=240.0, help="the steady window")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")

    names = {f"watched{i}.cern.ch": ips_for(i) for i in range(args.names)}
    records = [f"watched{i} A {ip}" for i in range(args.names) for ip in ips_for(i)]
    with tempfile.TemporaryDirectory() as directory, running_knot(Path(directory), records) as knot:
        published = PublicationLog()
        published.reported(names, time.time())
        resolver = Counting(DnsResolver([parse_resolver(knot.address)]))
        options = replace(
            dns_watch_options(Settings()),
            queries_per_second=args.queries_per_second,
            recheck_period=args.recheck_period,
        )
        metrics = Metrics.create(process_metrics=False)
        rss_before = rss_mib()
        watch = DnsWatch(published, resolver, options, metrics=metrics)
        watch.start()
        try:
            time.sleep(args.warm_up)
            asked_before, cpu_before, wall_before = resolver.asked, time.process_time(), time.monotonic()
            time.sleep(args.seconds)
            asked, cpu = resolver.asked - asked_before, time.process_time() - cpu_before
            wall = time.monotonic() - wall_before
            rss_after = rss_mib()
        finally:
            watch.stop()
        states = [j.state for j in watch.judgements().values()]
    on_air = states.count(State.PUBLISHED)
    print(f"names: {args.names}, published: {on_air}, other: {len(states) - on_air}")
    every = f"each name every {args.recheck_period:g} s"
    print(f"settings: {args.queries_per_second:g} questions/s at most, {every}")
    print(f"steady window: {wall:.0f} s after a {args.warm_up:g} s warm-up")
    expected = min(args.names / args.recheck_period, args.queries_per_second)
    print(f"questions: {asked} = {asked / wall:.2f}/s (expected {expected:.2f}/s)")
    per_question = 1000 * cpu / max(asked, 1)
    print(f"CPU: {cpu:.2f} s = {100 * cpu / wall:.2f}% of one core ({per_question:.2f} ms a question)")
    print(f"memory: RSS {rss_before:.1f} MiB before the watcher, {rss_after:.1f} MiB at the window's end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
