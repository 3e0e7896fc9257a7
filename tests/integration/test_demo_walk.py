"""The demo, as ``make demo`` runs it, walks one name through the simulated LanDB's syncs and the webhook's
DNS watcher: written -> pending -> published, removed -> stale -> gone, each step in what it prints."""

from __future__ import annotations

import io
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

import pytest

from landb_simulator.landb_dns import LandbDnsServer
from landb_simulator.walk import Walk, walk_one_name

DEMO = [sys.executable, "-m", "landb_simulator", "demo"]
SYNC_PERIOD = 10
DEADLINE = 240.0
"""Seconds for the webhook to start and the walk's two halves, each a few sync periods at most."""


class RunningDemo:
    """``make demo`` as a process, its output read line by line as it comes."""

    def __init__(self, state_dir: Path) -> None:
        self.process = subprocess.Popen(
            [
                *DEMO,
                "--api-port=0",
                "--health-port=0",
                f"--dns-sync-period={SYNC_PERIOD}",
                f"--state-dir={state_dir}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_until(self, last: Callable[[str], bool], deadline: float = DEADLINE) -> list[str]:
        """The lines up to the first for which ``last`` is true (included), the end of the output, or the
        deadline, whichever comes first."""
        read: list[str] = []
        ends = time.monotonic() + deadline
        while (remaining := ends - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                break
            read.append(line)
            self.lines.append(line)
            if last(line):
                break
        return read

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)


def walk_ended(line: str) -> bool:
    return line.startswith("walk") and re.search(r" (done:|did not|gives up|stopped)", line) is not None


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The demo's lines up to the walk's last one (``done`` or why not); the demo is stopped after."""
    demo = RunningDemo(tmp_path_factory.mktemp("demo"))
    try:
        yield demo.read_until(walk_ended)
    finally:
        demo.stop()


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


def test_the_walk_shows_the_events_the_webhook_writes_on_the_httproute(demo_output: list[str]) -> None:
    events = [
        m[1] for line in demo_output if (m := re.search(r"event on HTTPRoute default/myapp: (.*)$", line))
    ]
    transcript = "\n".join(demo_output)
    assert [event.split(":")[0] for event in events] == [
        "Normal Written",
        "Normal OnTheAir",
        "Normal Removed",
        "Normal DnsGone",
    ], transcript
    assert "myapp.cern.ch written on 3 ingress nodes" in events[0], transcript


def test_the_walks_records_polls_are_not_logged_at_info_but_its_writes_are(demo_output: list[str]) -> None:
    records = [line for line in demo_output if "path=/records" in line]
    transcript = "\n".join(demo_output)
    assert not [line for line in records if "method=GET" in line], transcript
    assert len([line for line in records if "method=POST" in line]) == 2, transcript  # publish, remove


@pytest.mark.parametrize(
    ("stop", "after"),
    [(signal.SIGTERM, "external-dns removes myapp"), (signal.SIGINT, "external-dns publishes myapp")],
    ids=["SIGTERM after the removal", "SIGINT after the publication"],
)
def test_a_walk_stopped_by_a_signal_ends_without_a_word_of_timing_out(
    tmp_path: Path, stop: signal.Signals, after: str
) -> None:
    """``timeout 100 make demo`` or ``kill``: the demo stops as it does on Ctrl+C; the walk, stopped in
    the middle of a step, does not claim the step timed out."""
    demo = RunningDemo(tmp_path)
    try:
        demo.read_until(lambda line: line.startswith("walk") and after in line)
        assert any(after in line for line in demo.lines), "\n".join(demo.lines)
        demo.process.send_signal(stop)
        rest = demo.read_until(lambda line: False, deadline=60.0)  # to the end of the output
        assert demo.process.wait(timeout=30) == 0, "\n".join(demo.lines)
    finally:
        demo.stop()
    assert [line for line in rest if walk_ended(line)] == [], "\n".join(demo.lines)


class ScriptedWebhook(BaseHTTPRequestHandler):
    """The demo webhook's answers the walk needs, on loopback: ready, no names, every write taken."""

    records_after_write = -1
    """GET /records answered since the last POST /records, -1 before any (class-wide: one test uses it)."""

    def do_GET(self) -> None:
        if self.path == "/records":
            if type(self).records_after_write >= 0:
                type(self).records_after_write += 1
            self._reply(200, b"[]")
        elif self.path == "/metrics":
            self._reply(200, b"# TYPE landb_webhook_dns_names gauge\n")
        else:
            self._reply(200, b"ok")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).records_after_write = 0
        self._reply(204, b"")

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class ScriptedLanDB:
    """A LanDB DNS side that syncs whenever asked to wait for a sync, and publishes nothing."""

    host, port, sync_period, syncs = "127.0.0.1", 53, 10.0, 0

    def __init__(self) -> None:
        self.published = self

    def wait_for_syncs(self, count: int, timeout: float) -> bool:
        self.syncs = count
        return True

    def describe(self, name: str) -> None:
        return None


def test_a_walk_stopped_in_the_middle_of_a_step_does_not_say_the_step_timed_out() -> None:
    """The stop comes while the walk follows its write (as SIGTERM after the removal sets it): the walk ends
    there, without ``did not become ... within 300s``, which nothing measured."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedWebhook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        walk = Walk(url, url, cast(LandbDnsServer, ScriptedLanDB()))
        out = io.StringIO()
        stopped_after_one_loop = lambda: ScriptedWebhook.records_after_write >= 1  # noqa: E731
        assert walk_one_name(walk, out, stopped_after_one_loop) is False
    finally:
        server.shutdown()
        server.server_close()
    said = out.getvalue().splitlines()
    assert len(said) == 1 and "external-dns publishes myapp.cern.ch" in said[0], said
