"""The demo, as ``make demo`` runs it, walks one name through the simulated LanDB's syncs and the webhook's
DNS watcher: written -> pending -> published, removed -> stale -> gone, each step in what it prints."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DEMO = [sys.executable, "-m", "landb_simulator", "demo"]
SYNC_PERIOD = 10
DEADLINE = 240.0
"""Seconds for the webhook to start and the walk's two halves, each a few sync periods at most."""


@pytest.fixture
def demo_output(tmp_path: Path) -> Iterator[list[str]]:
    """The demo's lines up to the walk's last one (``done`` or why not); the demo is stopped after."""
    process = subprocess.Popen(
        [
            *DEMO,
            "--api-port=0",
            "--health-port=0",
            f"--dns-sync-period={SYNC_PERIOD}",
            f"--state-dir={tmp_path}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if line.startswith("walk") and re.search(r" (done:|did not|gives up|stopped)", line):
                break
        yield seen
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_demo_walks_a_name_to_published_and_back_to_gone(demo_output: list[str]) -> None:
    walk = [line for line in demo_output if line.startswith("walk")]
    transcript = "\n".join(demo_output)

    states = [m[1] for line in walk if (m := re.search(r"DNS watch: myapp\.cern\.ch is (\w+)", line))]
    assert states == ["pending", "published", "stale", "gone"], transcript
    landb = [m[1] for line in walk if (m := re.search(r"LanDB sync \d+: myapp\.cern\.ch (.*)$", line))]
    assert len(landb) == 2, transcript
    assert re.fullmatch(r"answers (188\.184\.\d+\.\d+, ){2}188\.184\.\d+\.\d+", landb[0]), transcript
    assert landb[1] == "no longer answers it", transcript
    order = [
        next(i for i, line in enumerate(walk) if needle in line)
        for needle in (
            "publishes myapp",
            "is pending",
            "LanDB sync",
            "is published",
            "removes myapp",
            "is stale",
        )
    ]
    assert order == sorted(order), transcript
    assert "done: myapp.cern.ch went pending -> published -> stale -> gone" in walk[-1]
