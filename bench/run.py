"""The benchmark: this project's provider and two reference strategies, side by side, against the
simulator with injected per-call latency, counting every Nova, Keystone and Kubernetes request.

Run: make bench                      (the default grid, a few minutes on 2 cores)
     make bench ARGS="--quick"       (one small configuration: a smoke run)
     make bench ARGS="--full"        (every configuration of the grid)
     .venv/bin/python -m bench.run --help
Writes bench/results/latest.md (and latest.png with the ``bench`` extra installed).
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import os
import sys
import time
from pathlib import Path

import keystoneauth1
import kubernetes
import openstack

import landb_webhook
from bench.measure import Cell, environment_note, run_config
from bench.quota import headroom
from bench.report import cell_table, headline, plot, targets
from bench.scenarios import DEFAULT, EVENTS, FULL, HEADLINE, QUICK, Config, alias_names
from bench.strategies import STRATEGIES

RESULTS = Path(__file__).parent / "results"
BYTECODE_CACHE = Path.home() / ".cache" / "landb-webhook" / "bench-pycache"


def bytecode_like_a_deployment() -> None:
    """Let the strategy processes use compiled bytecode, as an installed image does.

    Without it (``PYTHONDONTWRITEBYTECODE``), every process compiles the kubernetes client's 4 MB
    modules at import, which alone adds ~70 MB to its resident memory.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(BYTECODE_CACHE)
    # A parent started without bytecode passes -B to its spawned children: compile for them here.
    sys.pycache_prefix = str(BYTECODE_CACHE)
    for package in (kubernetes, openstack, keystoneauth1, landb_webhook):
        for directory in package.__path__:
            compileall.compile_dir(directory, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="one small configuration (smoke run)")
    size.add_argument("--full", action="store_true", help="every configuration of the grid (long)")
    size.add_argument(
        "--config",
        action="append",
        metavar="INGRESS,PROJECT,ALIASES",
        help="run only this configuration (repeatable), e.g. 150,5000,300",
    )
    parser.add_argument("--latency-ms", type=float, default=50.0, help="added to every request (default 50)")
    parser.add_argument("--write-concurrency", type=int, default=4, help="the provider's (default 4)")
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.md")
    args = parser.parse_args(argv)

    configs = QUICK if args.quick else FULL if args.full else DEFAULT
    grid = "quick" if args.quick else "full" if args.full else "default"
    if args.config:
        configs = tuple(Config(*(int(n) for n in text.split(","))) for text in args.config)
        grid = "chosen"
    latency = args.latency_ms / 1000
    bytecode_like_a_deployment()
    started = time.monotonic()
    note = environment_note()
    cells: list[Cell] = []
    for config in configs:
        for strategy in STRATEGIES:
            cells += run_config(config, strategy, latency=latency, concurrency=args.write_concurrency)
    elapsed = time.monotonic() - started
    quota = [headroom(length) for length in (5, 15, 30)]

    command = " ".join(["make bench", *(['ARGS="' + " ".join(sys.argv[1:]) + '"'] if sys.argv[1:] else [])])
    lines = [
        "# Benchmark results",
        "",
        f"`{command}` on {datetime.date.today().isoformat()}: grid `{grid}`, {len(configs)} configuration(s) "
        f"x {len(EVENTS)} events x {len(STRATEGIES)} strategies, injected latency "
        f"{args.latency_ms:.0f} ms on "
        f"every request, write concurrency {args.write_concurrency}; {note}; took {elapsed / 60:.1f} min.",
        "Counts are exact and reproducible; times depend on the machine and its load (a shared machine "
        "makes them noisy, never smaller).",
        "",
        "Configurations run: " + "; ".join(c.title for c in configs) + ".",
        "Not run in this grid: " + ("; ".join(c.title for c in FULL if c not in configs) or "none") + ".",
        f"Aliases: CERN-like names of 5-30 characters (mean {_mean_length(configs)} characters).",
        "",
        "## Targets",
        "",
        *targets(cells, quota),
        "",
        "## Headline",
        "",
        *headline(cells, configs[-1]),
        *(
            []
            if HEADLINE in configs
            else ["", f"The issue's headline configuration ({HEADLINE.title}) did not run in this grid."]
        ),
        "",
        "## Every cell",
        "",
        "One row = one external-dns loop (Records, AdjustEndpoints, ApplyChanges if the plan is not empty) "
        "after the event. *(min)* is the physical minimum; *bound* is ApplyChanges' wall time if every "
        "request it made took exactly the injected latency and nothing else (reads and Kubernetes requests "
        "one after the other; then the make phase, then the break phase, each `concurrency` requests at a "
        "time, 4 for landb-webhook and 1 for the sequential references, a server's DELETEs after its "
        "POST); Apply *CPU* is the strategy process's CPU time during ApplyChanges; *CPU R+A* is its CPU "
        "time for Records + AdjustEndpoints (latency is not CPU); *end state* "
        "checks that every server carries exactly the aliases it should, with unique `N`.",
        "",
    ]
    for config in configs:
        lines += [*cell_table(cells, config), ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    image = args.output.with_suffix(".png")
    if plot(cells, configs, image):
        lines += ["## Plot", "", f"![requests and wall time per event]({image.name})", ""]
    else:
        lines += ["(no plot: install the `bench` extra for matplotlib)", ""]
    args.output.write_text("\n".join(lines))
    print(f"wrote {args.output}" + (f" and {image}" if image.exists() else ""))
    return 0


def _mean_length(configs: tuple[Config, ...]) -> str:
    names = alias_names(max(c.aliases for c in configs))
    return f"{sum(map(len, names)) / len(names):.1f}"


if __name__ == "__main__":
    sys.exit(main())
