"""The Markdown results (targets, headline ratios, every cell) and the PNG plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from bench.measure import Cell
from bench.quota import Headroom
from bench.scenarios import EVENTS, HEADLINE, Config
from bench.strategies import OURS, STRATEGIES

READ_CPU_TARGET = 0.100
RSS_TARGET_MB = 150
APPLY_SLACK = 1.25


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def _reads_target(config: Config) -> int:
    return math.ceil(config.cluster_nodes / 50) + 1


def _ours(cells: Sequence[Cell]) -> list[Cell]:
    return [cell for cell in cells if cell.strategy == OURS]


def _apply_ratio(cell: Cell) -> float | None:
    bound = cell.apply_bound
    if bound is None or bound == 0 or "apply" not in cell.timings:
        return None
    return cell.timings["apply"].wall / bound


def targets(cells: Sequence[Cell], quota: Sequence[Headroom]) -> list[str]:
    ours = _ours(cells)
    rows = ["| target | measured (landb-webhook) | met |", "|---|---|:-:|"]

    def row(target: str, measured: str, met: bool) -> None:
        rows.append(f"| {target} | {measured} | {'yes' if met else '**no**'} |")

    off = [c for c in ours if c.counts.nova_writes != c.minimum.writes]
    row(
        "writes = physical minimum in every cell",
        f"{len(ours) - len(off)} of {len(ours)} cells"
        + ("" if not off else " (" + "; ".join(f"{c.config.title}, {c.event}" for c in off[:3]) + ")"),
        not off,
    )
    steady = [c for c in ours if c.event == "steady state"]
    row(
        "steady state: no write, no Kubernetes request",
        ", ".join(f"{c.counts.nova_writes} writes / {c.counts.kubernetes} Kubernetes" for c in steady[:1])
        + " in every configuration"
        * (len({(c.counts.nova_writes, c.counts.kubernetes) for c in steady}) == 1),
        all(c.counts.nova_writes == 0 and c.counts.kubernetes == 0 for c in steady),
    )
    moves = [c for c in ours if c.event.startswith(("+1 ingress", "-1 ingress"))]
    row(
        "+-1 ingress node rewrites no other node",
        "servers written: "
        + ", ".join(str(c.counts.nova_writes) for c in moves)
        + f" (renumbered: {sum(c.renumbered for c in moves)})",
        all(c.counts.nova_writes <= c.minimum.writes and c.renumbered == 0 for c in moves),
    )
    big = [c for c in ours if c.config.project >= 5000]
    worst = max(big, key=lambda c: c.calls["records"].nova_reads - _reads_target(c.config), default=None)
    if worst is not None:
        row(
            "Nova reads per Records <= ceil(cluster nodes / 50) + 1 (5,000-server project)",
            f"at most {worst.calls['records'].nova_reads} for {worst.config.cluster_nodes} nodes "
            f"(target {_reads_target(worst.config)})",
            all(c.calls["records"].nova_reads <= _reads_target(c.config) for c in big),
        )
    ratios = [(r, c) for c in ours if (r := _apply_ratio(c)) is not None]
    if ratios:
        ratio, cell = max(ratios, key=lambda item: item[0])
        row(
            f"ApplyChanges wall time <= {APPLY_SLACK} x latency bound",
            f"worst {ratio:.2f} x ({cell.config.title}, {cell.event}); median "
            f"{sorted(r for r, _ in ratios)[len(ratios) // 2]:.2f} x",
            ratio <= APPLY_SLACK,
        )
    largest = max((c.config for c in ours), key=lambda c: (c.ingress, c.aliases), default=None)
    if largest is not None:
        at_largest = [c for c in ours if c.config == largest]
        hungriest = max(at_largest, key=lambda c: c.read_cpu)
        steady_cpu = [c.read_cpu for c in at_largest if c.event == "steady state"]
        row(
            f"Records + AdjustEndpoints, {HEADLINE.ingress} ingress nodes x {HEADLINE.aliases} aliases: "
            "< 100 ms CPU",
            f"at {largest.title}: steady state {', '.join(_ms(c) for c in steady_cpu)} ms; at most "
            f"{_ms(hungriest.read_cpu)} ms of process CPU per loop ({hungriest.event})",
            hungriest.read_cpu < READ_CPU_TARGET,
        )
        if largest != HEADLINE:  # a smaller cluster meeting it says nothing of the target's size
            rows[-1] = rows[-1].rsplit("|", 2)[0] + "| not run at that size |"
    rss = max(c.peak_rss_mb for c in ours)
    row("peak RSS < 150 MB", f"{rss:.0f} MB", rss < RSS_TARGET_MB)
    for room in quota:
        row(
            f"quota headroom, aliases of {room.alias_length} characters",
            f"{room.bound} fit beside {room.foreign_keys} CERN keys; the provider places {room.bound} "
            f"{'and refuses one more' if room.refused_past_bound else 'but accepts more'}",
            room.fits_at_bound and room.refused_past_bound,
        )
    return rows


def _totals(cells: Sequence[Cell], strategy: str) -> tuple[int, int, int, float]:
    chosen = [c for c in cells if c.strategy == strategy]
    return (
        sum(c.counts.total for c in chosen),
        sum(c.counts.nova_writes for c in chosen),
        sum(c.keys for c in chosen),
        sum(c.loop_wall for c in chosen),
    )


def headline(cells: Sequence[Cell], config: Config) -> list[str]:
    chosen = [c for c in cells if c.config == config]
    if not chosen:
        return []
    ours = _totals(chosen, OURS)
    rows = [
        f"Over the {len(EVENTS)} events of **{config.title}**:",
        "",
        "| strategy | requests | metadata writes | keys rewritten | loop wall time (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for strategy in STRATEGIES:
        total = _totals(chosen, strategy)
        if strategy == OURS:
            rows.append(f"| {strategy} | {total[0]} | {total[1]} | {total[2]} | {total[3]:.1f} |")
        else:
            ratios = [t / max(o, 1e-9) for t, o in zip(total, ours, strict=True)]
            rows.append(
                f"| {strategy} | {total[0]} ({ratios[0]:.1f}x) | {total[1]} ({ratios[1]:.1f}x) | "
                f"{total[2]} ({ratios[2]:.1f}x) | {total[3]:.1f} ({ratios[3]:.1f}x) |"
            )
    return rows


def cell_table(cells: Sequence[Cell], config: Config) -> list[str]:
    rows = [
        f"### {config.title}",
        "",
        "| event | strategy | Nova reads | Nova writes (min) | Keystone | Kubernetes "
        "| keys rewritten (min) | renumbered | Records ms | Adjust ms | Apply ms (bound; CPU) "
        "| CPU ms R+A | peak RSS MB | end state |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for cell in (c for c in cells if c.config == config):
        counts = cell.counts
        bound = cell.apply_bound
        apply = (
            f"{_ms(cell.wall('apply'))} ({_ms(bound)}; {_ms(cell.timings['apply'].cpu)})"
            if bound is not None and "apply" in cell.timings
            else "-"
        )
        state = "correct" if cell.converged else "**stale aliases**"
        if cell.apply_error:
            state += f"; apply: {cell.apply_error[:60]}"
        rows.append(
            f"| {cell.event} | {cell.strategy} | {counts.nova_reads} | {counts.nova_writes} "
            f"({cell.minimum.writes}) | {counts.keystone} | {_kubernetes(cell)} | {cell.keys} "
            f"({cell.minimum.keys}) | {cell.renumbered} | {_ms(cell.wall('records'))} | "
            f"{_ms(cell.wall('adjust'))} | {apply} | {_ms(cell.read_cpu)} | {cell.peak_rss_mb:.0f} "
            f"| {state} |"
        )
    return rows


def _kubernetes(cell: Cell) -> str:
    """Requests (how many of them the loop's Kubernetes Events made), then what fell in the loop's window
    on a clock of its own: watch streams opened (each cache renews its watch every minute) and writer
    Lease requests (a renewal every 2 s)."""
    counts = cell.counts
    events = cell.calls["events"].kubernetes if "events" in cell.calls else 0
    extra = [f"{events} events"] if events else []
    extra += [f"+{n} {what}" for n, what in ((counts.watches, "watch"), (counts.leases, "lease")) if n]
    return f"{counts.kubernetes} ({', '.join(extra)})" if extra else str(counts.kubernetes)


def plot(cells: Sequence[Cell], configs: Sequence[Config], path: Path) -> bool:
    """Requests and loop wall time per event, the three strategies side by side; False without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415  (optional: the ``bench`` extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    figure, axes = plt.subplots(2, len(configs), figsize=(6 * len(configs), 8), squeeze=False)
    width = 0.27
    for column, config in enumerate(configs):
        chosen = [c for c in cells if c.config == config]
        events = list(dict.fromkeys(c.event for c in chosen))
        for offset, strategy in enumerate(STRATEGIES):
            by_event = {c.event: c for c in chosen if c.strategy == strategy}
            xs = [i + (offset - 1) * width for i in range(len(events))]
            requests = [by_event[e].counts.total if e in by_event else 0 for e in events]
            walls = [by_event[e].loop_wall if e in by_event else 0 for e in events]
            axes[0][column].bar(xs, requests, width, label=strategy)
            axes[1][column].bar(xs, walls, width, label=strategy)
        for row, ylabel in enumerate(("requests per loop (log)", "loop wall time, s (log)")):
            axis = axes[row][column]
            axis.set_yscale("log")
            axis.set_ylabel(ylabel)
            axis.set_xticks(range(len(events)), events, rotation=35, ha="right", fontsize=8)
            axis.set_title(config.title, fontsize=9)
        axes[0][column].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
