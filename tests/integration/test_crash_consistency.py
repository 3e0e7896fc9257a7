"""Crash consistency: ``landb-webhook serve`` killed with SIGKILL in the middle of an apply loses nothing.

A real ``serve`` process runs against a simulator whose Nova answers every metadata write slowly. An
external-dns loop moves the cluster from one state to another (a node leaves, one joins, names come and
go) and the process is killed when the simulator has received the k-th metadata write of that apply
(k seeded). A new process is started; its loops must converge to exactly the state an uninterrupted run
reaches - the same A records, the same TXT claims, the same aliases on every server - and while it
does, no alias carried before and after ever loses its last carrier and no other key changes.

Bounded: a few seeds; every wait is on a condition (the simulator's count of received writes, the
process answering), never a fixed sleep.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import HttpLoop, loop_over_http
from landb_simulator.state import SimulatorState
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import is_alias_key
from landb_webhook.webhook.wire import MEDIA_TYPE, decode_endpoints, encode_endpoints
from support.history import assert_never_without_carrier, carriers
from support.waiting import eventually

SEEDS = range(int(os.environ.get("LANDB_CRASH_SEEDS", "3")))
OWNER = "crash"
WANTED_BEFORE = {"app", "web", "api", "docs"}
WANTED_AFTER = {"web", "api", "grafana", "login"}
SLOW_WRITE = 0.15
"""Seconds the simulator holds every metadata write: the apply lasts long enough to be cut anywhere."""
METADATA_WRITE = r"/servers/[^/]+/metadata(/.*)?$"
READY_TIMEOUT = 120.0
"""Seconds for ``serve`` to be ready: ~5 s, mostly imports (20 s alone on a 2-core machine at load 15)."""
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    """``landb-webhook serve`` as a child process; ``kill()`` is SIGKILL: no drain, no cleanup."""

    def __init__(self, config: ClientConfig, log_path: Path) -> None:
        self.api_port, self.health_port = free_port(), free_port()
        self.log_path = log_path
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("LANDB_", "OS_", "KUBECONFIG"))}
        self.env = {
            **inherited,
            "OS_CLIENT_CONFIG_FILE": str(config.clouds_yaml),
            "LANDB_OS_CLOUD": config.cloud_name,
            "LANDB_KUBECONFIG": str(config.kubeconfig),
            "LANDB_OWNERSHIP_NAMESPACE": "default",
            "LANDB_API_HOST": "127.0.0.1",
            "LANDB_API_PORT": str(self.api_port),
            "LANDB_HEALTH_HOST": "127.0.0.1",
            "LANDB_HEALTH_PORT": str(self.health_port),
            "LANDB_WRITE_CONCURRENCY": "2",
            "LANDB_DNS_WATCH": "false",  # tests ask no resolver but a loopback one
            "LANDB_LEASE_IDENTITY": "crash-test",  # the restarted process is the same writer
            "LANDB_REQUEST_TIMEOUT": "14",
            "LANDB_LOG_LEVEL": "info",
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "landb_webhook", "serve"],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        process = self._process
        with httpx.Client(timeout=2) as probe:

            def ready() -> bool:
                assert process.poll() is None, f"serve exited early:\n{self.log()}"
                try:
                    return probe.get(f"http://127.0.0.1:{self.health_port}/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            eventually(ready, what="serve ready", timeout=READY_TIMEOUT, every=0.05, detail=self.log)

    def kill(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(10)
        self._process = None

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def wanted(labels: set[str]) -> list[Endpoint]:
    return [
        Endpoint(
            f"{label}.cern.ch", "CNAME", ("ingress.example",), labels=(("resource", f"ingress/ns/{label}"),)
        )
        for label in sorted(labels)
    ]


def loop(client: httpx.Client, labels: set[str]) -> HttpLoop:
    return loop_over_http(client, wanted(labels), owner=OWNER)


def converge(client: httpx.Client, labels: set[str]) -> int:
    """Loops until one has nothing to change; returns how many loops that took."""
    for count in range(1, 6):
        outcome = loop(client, labels)
        assert outcome.succeeded, outcome.statuses
        if outcome.changes is None:
            return count
    pytest.fail("no convergence within five loops")


@dataclass(frozen=True)
class Visible:
    """What an uninterrupted run ends with: A records, TXT claims, and every server's metadata."""

    records: frozenset[tuple[str, tuple[str, ...]]]
    claims: frozenset[str]
    metadata: dict[str, dict[str, str]]


def visible(client: httpx.Client, state: SimulatorState) -> Visible:
    reply = client.get("/records", headers={"Accept": MEDIA_TYPE})
    assert reply.status_code == 200
    endpoints = decode_endpoints(reply.content)
    return Visible(
        records=frozenset((e.dns_name, e.targets) for e in endpoints if e.record_type == "A"),
        claims=frozenset(e.dns_name for e in endpoints if e.record_type == "TXT"),
        metadata={server.name: dict(server.metadata) for server in state.servers()},
    )


@dataclass
class Scenario:
    sim: Simulator
    config: ClientConfig
    nodes: list[str]
    workdir: Path

    @property
    def state(self) -> SimulatorState:
        return self.sim.state

    def prepare(self) -> ServeProcess:
        """A process, the cluster converged to the "before" state, hand-set alias included."""
        first = next(s for s in self.state.servers() if s.name == self.nodes[0])
        self.state.set_metadata_direct(first.id, {**first.metadata, "landb-alias2": "legacy--load-9-"})
        serve = ServeProcess(self.config, self.workdir / "serve.log")
        serve.start()
        with httpx.Client(base_url=serve.url, timeout=20) as client:
            converge(client, WANTED_BEFORE)
        return serve

    def move(self, client: httpx.Client) -> None:
        """node 0 leaves the ingress set, node 3 joins; returns once the webhook has seen it."""
        self.state.label_node(self.nodes[0], "role", None)
        self.state.label_node(self.nodes[3], "role", "ingress")
        ips = sorted(
            (ip for name in self.nodes[1:4] for ip in node_ips(self.state, name)),
            key=lambda ip: tuple(int(part) for part in ip.split(".")),
        )
        wait_for_ingress(client, tuple(ips))


def node_ips(state: SimulatorState, name: str) -> list[str]:
    node = state.node(name)
    assert node is not None
    return [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]


def new_scenario(sim: Simulator, workdir: Path) -> Scenario:
    nodes = seed_cluster(sim.state, ingress_nodes=3, workers=2)
    return Scenario(sim, sim.write_client_config(workdir / "clients"), nodes, workdir)


def wait_for_ingress(client: httpx.Client, expected: tuple[str, ...]) -> None:
    """Until the process' node cache shows the ``expected`` ingress nodes (AdjustEndpoints' targets)."""

    def seen() -> bool:
        client.get("/records", headers={"Accept": MEDIA_TYPE})  # AdjustEndpoints reuses its inventory
        reply = client.post(
            "/adjustendpoints",
            content=encode_endpoints(wanted({"probe"})),
            headers={"Accept": MEDIA_TYPE, "Content-Type": MEDIA_TYPE},
        )
        return reply.status_code == 200 and decode_endpoints(reply.content)[0].targets == expected

    eventually(seen, what="the webhook's node cache to see the new ingress set", timeout=10, every=0.02)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Visible, int]]:
    """The reference: the same move, never interrupted. Also how many metadata writes the move takes."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    with Simulator() as sim:
        scenario = new_scenario(sim, workdir)
        serve = scenario.prepare()
        try:
            with httpx.Client(base_url=serve.url, timeout=20) as client:
                scenario.move(client)
                before = len(sim.state.metadata_history())
                converge(client, WANTED_AFTER)
                writes = len(sim.state.metadata_history()) - before
                yield visible(client, sim.state), writes
        finally:
            serve.stop()


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_an_apply_loses_nothing_and_the_next_process_converges_to_the_same_state(
    simulator: Simulator, tmp_path: Path, uninterrupted: tuple[Visible, int], seed: int
) -> None:
    reference, move_writes = uninterrupted
    rng = random.Random(seed)
    kill_at = rng.randint(1, move_writes)
    scenario = new_scenario(simulator, tmp_path)
    state = simulator.state
    serve = scenario.prepare()
    try:
        servers = {s.id: s.name for s in state.servers()}
        before = {s.name: dict(s.metadata) for s in state.servers()}
        foreign = {name: {k: v for k, v in m.items() if not is_alias_key(k)} for name, m in before.items()}
        history_start = len(state.metadata_history())

        with httpx.Client(base_url=serve.url, timeout=20) as client:
            scenario.move(client)
            slow = state.inject_fault(
                api="nova", path_pattern=METADATA_WRITE, status=None, delay=SLOW_WRITE, times=None
            )
            outcome: list[Any] = []
            applying = threading.Thread(target=lambda: outcome.append(_loop_until_cut(client)))
            applying.start()

            def reached() -> bool:
                if slow.hits >= kill_at:
                    return True
                assert applying.is_alive(), f"the apply ended first: {outcome}"
                return False

            eventually(reached, what=f"the simulator to receive write {kill_at}", timeout=30, every=0.005)
            serve.kill()
            applying.join(30)
            slow.cancel()
        # A write in flight when the process died may still land: let the simulator finish it first.
        eventually(
            lambda: not state.in_flight("nova"),
            what="the simulator to finish the writes in flight",
            timeout=10,
        )
        serve.start()
        with httpx.Client(base_url=serve.url, timeout=20) as client:
            converge(client, WANTED_AFTER)
            after = visible(client, state)
    finally:
        serve.stop()

    context = f"seed {seed}: killed at write {kill_at} of {move_writes}"
    assert after.records == reference.records, context
    assert after.claims == reference.claims, context
    assert carriers(after.metadata) == carriers(reference.metadata), context
    for name, metadata in after.metadata.items():
        assert {k: v for k, v in metadata.items() if not is_alias_key(k)} == foreign[name], context

    by_id = {server_id: before[name] for server_id, name in servers.items()}
    kept = carriers(before).keys() & carriers(after.metadata).keys()
    assert_never_without_carrier(by_id, state.metadata_history()[history_start:], kept, context)
    print(f"\n{context} ({outcome[0] if outcome else 'no outcome'}): converged to the uninterrupted state")


def _loop_until_cut(client: httpx.Client) -> str:
    try:
        return repr(loop(client, WANTED_AFTER).statuses)
    except httpx.TransportError as error:
        return f"cut: {type(error).__name__}"
