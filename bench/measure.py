"""Runs one strategy through every event of one configuration against a fresh simulator, and counts.

One event = one external-dns loop (Records -> AdjustEndpoints -> plan -> ApplyChanges if anything
changed), the plan made by the same planner emulation the loop tests use
(``landb_simulator.external_dns``). Requests are counted per call from the simulator's records.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import worker
from bench.counting import (
    ApplyWrites,
    CallCounts,
    Metadata,
    Minimum,
    apply_writes,
    converged,
    keys_rewritten,
    minimum_for,
    minimum_reads,
    phase_rounds,
    renumbered,
    request_rounds,
)
from bench.scenarios import CLUSTER, EVENTS, Config, alias_names, extra_alias
from bench.strategies import OURS, Endpoints
from bench.worker import Timing
from landb_simulator import Simulator, SimulatorState, seed_cluster
from landb_simulator.external_dns import plan
from landb_simulator.seed import cern_vm_metadata, node_ip, node_name, server_id
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.webhook import wire

OWNER = "paas-prod"
CALLS = ("records", "adjust", "apply")
"""An external-dns loop's calls; after them the benchmark waits for the loop's Kubernetes Events
(``events``: their requests count in the loop's, their time does not, as they are off the request path)."""
SYNC_TIMEOUT = 30.0


@dataclass(frozen=True)
class Cell:
    """One strategy's loop for one event of one configuration."""

    config: Config
    event: str
    strategy: str
    latency: float
    concurrency: int
    calls: Mapping[str, CallCounts]
    timings: Mapping[str, Timing]
    keys: int
    renumbered: int
    converged: bool
    minimum: Minimum
    minimum_reads: int
    writes: ApplyWrites
    apply_error: str | None = None
    apply_rounds: int = 0
    """Round trips of ApplyChanges' requests other than metadata writes (counting.request_rounds)."""
    apply_body_bytes: int = 0
    """The ApplyChanges body external-dns' plan sent (0: no apply); over LANDB_MAX_REQUEST_BODY the sidecar
    answers 503 (the benchmark calls the provider directly, so it is measured here, not refused)."""

    @property
    def counts(self) -> CallCounts:
        return sum(self.calls.values(), CallCounts())

    def wall(self, call: str) -> float:
        timing = self.timings.get(call)
        return timing.wall if timing else 0.0

    @property
    def loop_wall(self) -> float:
        return sum(self.wall(call) for call in CALLS)

    @property
    def read_cpu(self) -> float:
        """CPU seconds of Records + AdjustEndpoints."""
        return sum(self.timings[call].cpu for call in ("records", "adjust") if call in self.timings)

    @property
    def peak_rss_mb(self) -> float:
        return max(timing.peak_rss_mb for timing in self.timings.values())

    @property
    def apply_bound(self) -> float | None:
        """ApplyChanges' wall time if every request it made took exactly the injected latency and nothing
        else: its requests other than metadata writes in ``apply_rounds`` round trips (the reads of a phase
        together: counting.request_rounds), then its leave, make and break phases one after the other
        (counting.apply_writes), each ``concurrency`` requests at a time with a server's DELETEs after its
        POST."""
        if "apply" not in self.calls:
            return None
        rounds = sum(phase_rounds(phase, self.concurrency) for phase in self.writes.phases)
        return self.latency * (self.apply_rounds + rounds)


@dataclass
class _Worker:
    """A strategy in its own process (bench.worker), one request at a time."""

    kind: str
    where: Endpoints
    environment: dict[str, str]
    _conn: Any = field(init=False)
    _process: Any = field(init=False)

    def __post_init__(self) -> None:
        context = multiprocessing.get_context("forkserver")
        # Forked from a server that imported only the worker (bench.production first), not this
        # benchmark's main module: spawned, the worker re-imported it, and with it the simulator
        # (~14 MB of its peak RSS that the sidecar never has).
        context.set_forkserver_preload(["bench.production", "bench.worker"])
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=worker.serve, args=(child, self.kind, self.where, self.environment), daemon=True
        )
        self._process.start()
        self._receive()

    def _receive(self) -> Any:
        while not self._conn.poll(0.5):
            if not self._process.is_alive():
                raise RuntimeError(f"{self.kind}: the worker process exited ({self._process.exitcode})")
        ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"{self.kind} failed:\n{value}")
        return value

    def call(self, command: str, argument: Any = None) -> Any:
        self._conn.send((command, argument))
        return self._receive()

    def stop(self) -> None:
        try:
            self._conn.send(("stop", None))
        finally:
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()


def seed(state: SimulatorState, config: Config) -> None:
    """The cluster (ingress nodes first, then as many workers) and the rest of the project."""
    seed_cluster(state, cluster=CLUSTER, ingress_nodes=config.ingress, workers=config.ingress)
    for i in range(config.project - config.cluster_nodes):
        state.add_server(f"vm-{i:05d}", {"landb-mainuser": "someone", "landb-os": "LINUX"})


def add_ingress_node(state: SimulatorState, index: int) -> str:
    """A new Magnum node (the next number), its server first, as a scale-up creates them."""
    name = node_name(CLUSTER, index)
    ip = node_ip(CLUSTER, index)
    uuid_ = state.add_server(name, cern_vm_metadata(CLUSTER, name), server_id=server_id(CLUSTER, name), ip=ip)
    state.add_node(name, labels={"role": "ingress"}, provider_id=f"openstack:///{uuid_}", internal_ips=[ip])
    return name


def ingress_nodes(state: SimulatorState) -> list[str]:
    return sorted(
        node["metadata"]["name"]
        for node in state.nodes()
        if node["metadata"].get("labels", {}).get("role") == "ingress"
    )


def _snapshot(state: SimulatorState) -> dict[str, Metadata]:
    return {s.id: s.metadata for s in state.servers() if s.name.startswith(CLUSTER)}


def _desired(aliases: list[str]) -> list[Endpoint]:
    """What external-dns' ingress source produces for each name (targets: the load balancer)."""
    return [
        Endpoint(f"{alias}.cern.ch", "A", ("192.0.2.10",), labels=(("resource", f"ingress/web/{alias}"),))
        for alias in aliases
    ]


def run_config(
    config: Config, kind: str, *, latency: float, concurrency: int, events: Sequence[str] = EVENTS
) -> list[Cell]:
    with Simulator() as sim, tempfile.TemporaryDirectory(prefix="landb-bench-") as tmp:
        state = sim.state
        seed(state, config)
        if latency > 0:
            for api in ("keystone", "nova", "kubernetes"):
                state.inject_fault(api=api, status=None, times=None, delay=latency)
        clients = sim.write_client_config(Path(tmp))
        where = Endpoints(clients.clouds_yaml, clients.kubeconfig, clients.cloud_name, concurrency)
        environment = {**clients.environment(), "KUBECACHEDIR": str(Path(tmp) / "kube-cache")}
        strategy = _Worker(kind, where, environment)
        try:
            return _run_events(state, strategy, config, latency, concurrency if kind == OURS else 1, events)
        finally:
            strategy.stop()


def _run_events(
    state: SimulatorState,
    strategy: _Worker,
    config: Config,
    latency: float,
    concurrency: int,
    events: Sequence[str],
) -> list[Cell]:
    aliases = alias_names(config.aliases)
    wanted_aliases = list(aliases)
    cells = []
    for event in events:
        if event == "+1 alias":
            wanted_aliases.append(extra_alias(aliases))
        elif event == "-1 alias":
            wanted_aliases.remove(aliases[len(aliases) // 3])
        elif event == "+1 ingress node":
            add_ingress_node(state, config.cluster_nodes)
        elif event == "-1 ingress node (middle)":
            names = ingress_nodes(state)
            leaving = names[len(names) // 2]
            state.delete_node(leaving)
            state.delete_server(server_id(CLUSTER, leaving))
        elif event == "node relabelled out":
            names = ingress_nodes(state)
            state.label_node(names[len(names) // 2], "role", None)
        if strategy.kind == OURS:
            _wait_for_watch(strategy, set(ingress_nodes(state)))
        started = time.monotonic()
        cells.append(_loop(state, strategy, config, event, wanted_aliases, latency, concurrency))
        _progress(f"{config.title} | {strategy.kind} | {event}: {time.monotonic() - started:.1f} s")
    return cells


def _wait_for_watch(strategy: _Worker, expected: set[str]) -> None:
    deadline = time.monotonic() + SYNC_TIMEOUT
    while strategy.call("ingress") != expected:
        if time.monotonic() > deadline:
            raise RuntimeError("the node watch did not catch up")
        time.sleep(0.02)


def _loop(
    state: SimulatorState,
    strategy: _Worker,
    config: Config,
    event: str,
    aliases: list[str],
    latency: float,
    concurrency: int,
) -> Cell:
    before = _snapshot(state)
    ingress = {server_id(CLUSTER, name) for name in ingress_nodes(state)}
    wanted = {sid: frozenset(aliases) for sid in ingress}
    state.clear_metadata_history()
    calls: dict[str, CallCounts] = {}
    timings: dict[str, Timing] = {}

    rounds: dict[str, int] = {}

    def call(name: str, body: bytes | None = None) -> Any:
        state.reset_api_calls()
        result, timings[name] = strategy.call(name, body)
        calls[name] = CallCounts.of(state.api_calls())
        rounds[name] = request_rounds(state.api_calls())
        return result

    current = wire.decode_endpoints(call("records"))
    adjusted = wire.decode_endpoints(call("adjust", wire.encode_endpoints(_desired(aliases))))
    changes = plan(current, adjusted, owner=OWNER).changes
    body = b"" if changes == Changes() else wire.encode_changes(changes)
    error = call("apply", body) if body else None
    call("events")  # the Kubernetes Events the loop told, written: their requests count here
    after = _snapshot(state)
    history = state.metadata_history()
    return Cell(
        config=config,
        event=event,
        strategy=strategy.kind,
        latency=latency,
        concurrency=concurrency,
        calls=calls,
        timings=timings,
        keys=keys_rewritten(before, history),
        renumbered=renumbered(before, after),
        converged=converged(after, wanted),
        minimum=minimum_for(before, wanted),
        minimum_reads=minimum_reads(config.cluster_nodes),
        writes=apply_writes(before, history),
        apply_error=error,
        apply_rounds=rounds.get("apply", 0),
        apply_body_bytes=len(body),
    )


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def environment_note() -> str:
    return f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start"
