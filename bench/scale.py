"""Scale mode: this provider alone (no reference strategy) at growing clusters, and how each cost grows
with the cluster: the log-log slope of each cost against ingress nodes x aliases.

Run: make bench-scale                                   (the four sizes below, one run)
     make bench-scale ARGS="--config 500,10000,2000 --events 3 --output bench/results/over-quota.md"
     .venv/bin/python -m bench.scale --help
A cost that grows with the change, not with the cluster, has a slope near 0 (a one-node event) or at most
1 (a loop that must read every token once); above 1 it grows faster than the cluster does.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.measure import Cell, environment_note, run_config
from bench.report import cell_table
from bench.run import RESULTS, bytecode_like_a_deployment
from bench.scenarios import EVENTS, Config
from bench.strategies import OURS
from bench.worker import PROFILE_DIR
from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY

SIZES = (Config(30, 5000, 300), Config(150, 5000, 300), Config(300, 5000, 1000), Config(500, 10000, 1000))
SLOPE_TARGET = 1.1
APPLY_TARGET = 2.0
READ_CPU_TARGET_MS = 200.0


def _ms(seconds: float) -> float:
    return seconds * 1000


def _event(cells: Sequence[Cell], name: str) -> Cell | None:
    return next((c for c in cells if c.event == name), None)


def _read_cpu(name: str) -> Callable[[Sequence[Cell]], float | None]:
    def cost(cells: Sequence[Cell]) -> float | None:
        cell = _event(cells, name)
        return None if cell is None else _ms(cell.read_cpu)

    return cost


def _apply(name: str, what: str) -> Callable[[Sequence[Cell]], float | None]:
    def cost(cells: Sequence[Cell]) -> float | None:
        cell = _event(cells, name)
        if cell is None or "apply" not in cell.timings:
            return None
        timing = cell.timings["apply"]
        return _ms(timing.wall if what == "wall" else timing.cpu)

    return cost


def _worst_read_cpu(cells: Sequence[Cell]) -> float | None:
    return max((_ms(c.read_cpu) for c in cells), default=None)


def _peak_rss(cells: Sequence[Cell]) -> float | None:
    return max((c.peak_rss_mb for c in cells), default=None)


@dataclass(frozen=True)
class Cost:
    name: str
    unit: str
    of: Callable[[Sequence[Cell]], float | None]


COSTS = (
    Cost("R+A CPU, steady state", "ms", _read_cpu("steady state")),
    Cost("R+A CPU, settling loop", "ms", _read_cpu("settling loop")),
    Cost("R+A CPU, worst loop", "ms", _worst_read_cpu),
    Cost("first publish Apply CPU", "ms", _apply("first publish", "cpu")),
    Cost("+1 alias Apply CPU", "ms", _apply("+1 alias", "cpu")),
    Cost("+1 node Apply wall", "ms", _apply("+1 ingress node", "wall")),
    Cost("+1 node Apply CPU", "ms", _apply("+1 ingress node", "cpu")),
    Cost("relabel Apply wall", "ms", _apply("node relabelled out", "wall")),
    Cost("peak RSS", "MB", _peak_rss),
)


def size_of(config: Config) -> int:
    """What a cost that grows with the cluster grows with: tokens published (ingress nodes x aliases)."""
    return config.ingress * config.aliases


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(cost) against log(size); None with fewer than two usable points."""
    usable = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(usable) < 2:
        return None
    mean_x = sum(x for x, _ in usable) / len(usable)
    mean_y = sum(y for _, y in usable) / len(usable)
    spread = sum((x - mean_x) ** 2 for x, _ in usable)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in usable) / spread


def _ratio(cell: Cell | None) -> str:
    if cell is None or cell.apply_bound is None or "apply" not in cell.timings:
        return "-"
    bound = cell.apply_bound
    wall = cell.timings["apply"].wall
    cpu = cell.timings["apply"].cpu
    return f"{wall / bound:.2f}x ({_ms(wall):.0f} / {_ms(bound):.0f} ms; CPU {_ms(cpu):.0f})"


def summary_table(by_config: Sequence[tuple[Config, Sequence[Cell]]]) -> list[str]:
    """The issue's table: one row per size, measured side by side in one run."""
    rows = [
        "| ingress x aliases (servers) | R+A CPU steady / settling / worst (ms) | +1 node Apply wall / bound "
        "| relabel Apply wall / bound | writes = min | Records Nova reads | log lines (worst loop) "
        "| largest ApplyChanges body | peak RSS MB | end state |",
        "|---|---|---|---|---|---:|---:|---|---:|---|",
    ]
    for config, cells in by_config:
        steady, settling = _read_cpu("steady state")(cells), _read_cpu("settling loop")(cells)
        worst = _worst_read_cpu(cells)
        minimal = sum(c.counts.nova_writes == c.minimum.writes for c in cells)
        reads = max(c.calls["records"].nova_reads for c in cells)
        lines = max(sum(t.log_lines for t in c.timings.values()) for c in cells)
        correct = all(c.converged for c in cells)
        errors = sorted({c.apply_error[:60] for c in cells if c.apply_error})
        body = max(cells, key=lambda c: c.apply_body_bytes)
        over = " **over the default limit**" if body.apply_body_bytes > DEFAULT_MAX_REQUEST_BODY else ""
        rows.append(
            f"| {config.ingress} x {config.aliases} ({config.project:,}) "
            f"| {_fmt(steady)} / {_fmt(settling)} / {_fmt(worst)} "
            f"| {_ratio(_event(cells, '+1 ingress node'))} | {_ratio(_event(cells, 'node relabelled out'))} "
            f"| {minimal} of {len(cells)} | {reads} | {lines} "
            f"| {body.apply_body_bytes / 2**20:.2f} MiB ({body.event}){over} | {_peak_rss(cells):.0f} "
            f"| {'correct' if correct else '**not converged**'}{'; ' + '; '.join(errors) if errors else ''} |"
        )
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def slope_table(by_config: Sequence[tuple[Config, Sequence[Cell]]]) -> list[str]:
    """Each cost at each size, the slope of each step and of the least-squares fit over every size."""
    configs = [config for config, _ in by_config]
    steps = [f"{a.ingress}x{a.aliases} -> {b.ingress}x{b.aliases}" for a, b in itertools.pairwise(configs)]
    rows = [
        "| cost | "
        + " | ".join(f"{c.ingress} x {c.aliases}" for c in configs)
        + " | "
        + " | ".join(f"slope {step}" for step in steps)
        + " | slope, fit | last step <= 1.1 |",
        "|---|" + "---:|" * (len(configs) + len(steps) + 1) + ":-:|",
    ]
    for cost in COSTS:
        values = [cost.of(cells) for _, cells in by_config]
        points = [(float(size_of(c)), v) for c, v in zip(configs, values, strict=True) if v is not None]
        each = [
            slope([(size_of(a), va), (size_of(b), vb)]) if va is not None and vb is not None else None
            for (a, va), (b, vb) in itertools.pairwise(zip(configs, values, strict=True))
        ]
        last = each[-1] if each else None
        rows.append(
            f"| {cost.name} ({cost.unit}) | "
            + " | ".join(_fmt(v) for v in values)
            + " | "
            + " | ".join(_slope(s) for s in each)
            + f" | {_slope(slope(points))} | "
            + ("-" if last is None else "yes" if last <= SLOPE_TARGET else "**no**")
            + " |"
        )
    return rows


def _slope(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        action="append",
        metavar="INGRESS,PROJECT,ALIASES",
        help="run only this size (repeatable), e.g. 500,10000,1000; default: "
        + "; ".join(f"{c.ingress},{c.project},{c.aliases}" for c in SIZES),
    )
    parser.add_argument(
        "--events",
        type=int,
        default=len(EVENTS),
        help=f"run the first N events only (default all {len(EVENTS)})",
    )
    parser.add_argument("--latency-ms", type=float, default=50.0, help="added to every request (default 50)")
    parser.add_argument("--write-concurrency", type=int, default=4, help="the provider's (default 4)")
    parser.add_argument("--output", type=Path, default=RESULTS / "scale.md")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="write each measured call's cProfile to DIR (slows them: do not compare its times)",
    )
    args = parser.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_DIR] = str(args.profile.resolve())  # the worker processes inherit it

    configs = (
        tuple(Config(*(int(n) for n in text.split(","))) for text in args.config) if args.config else SIZES
    )
    events = EVENTS[: args.events]
    bytecode_like_a_deployment()
    note = environment_note()
    started = time.monotonic()
    by_config: list[tuple[Config, Sequence[Cell]]] = []
    for config in configs:
        cells = run_config(
            config, OURS, latency=args.latency_ms / 1000, concurrency=args.write_concurrency, events=events
        )
        by_config.append((config, cells))
    elapsed = time.monotonic() - started

    command = "make bench-scale" + (' ARGS="' + " ".join(sys.argv[1:]) + '"' if sys.argv[1:] else "")
    lines = [
        "# Scale: landb-webhook alone, cost against ingress nodes x aliases",
        "",
        f"`{command}` on {datetime.date.today().isoformat()}: {len(configs)} size(s) x {len(events)} "
        f"events, injected latency {args.latency_ms:.0f} ms on every request, write concurrency "
        f"{args.write_concurrency}; {note}; took {elapsed / 60:.1f} min. Counts are exact; times are this "
        "machine's, under its load.",
        "",
        "## Per size",
        "",
        *summary_table(by_config),
        "",
        f"Targets at the largest size: R+A CPU <= {READ_CPU_TARGET_MS:.0f} ms in every loop; +1 node "
        f"ApplyChanges <= {APPLY_TARGET:.0f}x its bound; writes at the minimum in every cell.",
        "",
        "## Slopes",
        "",
        "Log-log slope of each cost against ingress nodes x aliases: between each two sizes, and the "
        f"least-squares fit over all. Target: <= {SLOPE_TARGET} at the last step.",
        "",
        *slope_table(by_config),
        "",
        "## Every cell",
        "",
    ]
    for config, cells in by_config:
        lines += [*cell_table(cells, config), ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
