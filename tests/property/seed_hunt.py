"""Run every property test of this directory under many distinct seeds: a claim failing one run in N shows.

    .venv/bin/python tests/property/seed_hunt.py --seeds 0:300 --examples 10 [--only plan,indices]

Each (test, seed) is one Hypothesis run of ``--examples`` examples with that seed and no example database,
in one process (no pytest start-up per seed), until ``--budget`` seconds have passed (the last line says
which seeds ran). A failing run prints the test, the seed and the falsifying example; the same command with
``--seeds N:N+1`` replays it. Keep it as an ``@example`` (or a named test) once the claim or the code is
fixed. Exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import importlib
import io
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from pathlib import Path

from hypothesis import HealthCheck, seed, settings

HERE = Path(__file__).resolve().parent


def property_tests(only: set[str]) -> Iterator[tuple[str, Callable[[], None]]]:
    sys.path.insert(0, str(HERE))
    for path in sorted(HERE.glob("test_*_properties.py")):
        topic = path.stem.removeprefix("test_").removesuffix("_properties")
        if only and topic not in only:
            continue
        module = importlib.import_module(path.stem)
        for name, test in vars(module).items():
            if name.startswith("test_") and getattr(test, "is_hypothesis_test", False):
                yield f"{path.name}::{name}", test


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", default="0:100", help="first:last (exclusive)")
    parser.add_argument("--examples", type=int, default=25, help="examples per test and seed")
    parser.add_argument("--only", default="", help="comma-separated topics: names,metadata,indices,...")
    parser.add_argument("--budget", type=float, default=540, help="seconds: stop after the seed in progress")
    args = parser.parse_args()
    first, last = (int(part) for part in args.seeds.split(":"))
    only = {topic for topic in args.only.split(",") if topic}
    budget = settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    tests = [(name, budget(test)) for name, test in property_tests(only)]
    started = time.monotonic()
    failures = 0
    done = first
    for number in range(first, last):
        if time.monotonic() - started > args.budget:
            break
        for name, test in tests:
            run = seed(number)(test)  # sets the seed in place: one settings object per test
            output = io.StringIO()
            try:
                with redirect_stdout(output):
                    run()
            except Exception:  # a failing property: report it, keep hunting
                failures += 1
                print(f"FAILED {name} seed={number}\n{output.getvalue()}{traceback.format_exc(limit=1)}")
        done = number + 1
    elapsed = time.monotonic() - started
    print(
        f"{len(tests)} tests x {done - first} seeds ({first}..{done - 1}) x {args.examples} examples: "
        f"{(done - first) * len(tests)} runs, {failures} failed, {elapsed:.0f}s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
