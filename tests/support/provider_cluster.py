"""The provider wired by the composition root (wiring.build_provider) to the real clients, against the
simulator over HTTP, driven through the loop external-dns runs (landb_simulator/external_dns.py).

Built by the ``make_cluster`` fixture of tests/integration/conftest.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from landb_simulator import ClientConfig, Simulator
from landb_simulator.external_dns import plan
from landb_webhook.backends import Node
from landb_webhook.config import Settings
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.metrics import Metrics
from landb_webhook.provider import LandbProvider
from landb_webhook.wiring import Adapters, build_provider
from support import waiting

Eventually = Callable[..., Any]

OWNER = "test-cluster"
"""external-dns' --txt-owner-id in the loops these clusters run."""


@dataclass
class Cluster:
    sim: Simulator
    provider: LandbProvider
    adapters: Adapters
    metrics: Metrics
    nodes: list[str]
    eventually: Eventually
    lock_server: Callable[..., None]
    settings: Settings
    clock: Callable[[], float] = time.time
    desired: list[Endpoint] = field(default_factory=list)

    def restart(self) -> None:
        """A new process: nothing in memory; the same settings, clock, Nova and ConfigMaps."""
        self.adapters.close()
        self.metrics = Metrics.create(process_metrics=False)
        self.provider, self.adapters = build_provider(self.settings, self.metrics, clock=self.clock)
        started(self.adapters)

    def server_id(self, node: str) -> str:
        return next(s.id for s in self.sim.state.servers() if s.name == node)

    def want(self, *names: str) -> None:
        """Desired endpoints as sources produce them: any type external-dns manages, any targets."""
        kinds = ("A", "CNAME", "AAAA")
        self.desired = [
            Endpoint(
                name,
                kinds[i % 3],
                targets=(f"192.0.2.{i}",),
                record_ttl=300,
                labels=(("resource", f"ingress/default/{name}"),),
            )
            for i, name in enumerate(names)
        ]

    def want_in(self, teams: dict[str, dict[str, tuple[str, ...]]]) -> None:
        """Desired A endpoints of several teams: namespace -> Ingress -> its names."""
        self.desired = [
            Endpoint(
                name,
                "A",
                targets=("192.0.2.1",),
                record_ttl=300,
                labels=(("resource", f"ingress/{namespace}/{ingress}"),),
            )
            for namespace, ingresses in teams.items()
            for ingress, names in ingresses.items()
            for name in names
        ]

    def loop(self, policy: str = "sync") -> Changes:
        current = self.provider.records()
        adjusted = self.provider.adjust_endpoints(self.desired)
        changes = plan(current, adjusted, owner=OWNER, policy=policy).changes
        if changes != Changes():
            self.provider.apply_changes(changes)
        return changes

    def settle(self) -> None:
        """Loop until nothing changes; fail if that takes more than three loops."""
        for _ in range(3):
            if self.loop() == Changes():
                return
        pytest.fail("the loop did not settle in three rounds")

    def settles_in_one_loop(self) -> Changes:
        """One loop that changes something, then one that changes (and writes) nothing."""
        changed = self.loop()
        self.sim.state.reset_api_calls()
        assert self.loop() == Changes()
        assert metadata_writes(self.sim) == 0
        return changed

    def lock(self, node: str, locked: bool = True) -> None:
        """Lock (or unlock) the node's server as an operator does: Nova's lock action, as the owner."""
        self.lock_server(self.server_id(node), locked)

    def aliases(self, node: str) -> dict[str, int]:
        found = read_aliases(self.sim.state.metadata(self.server_id(node)))
        return {t.label: t.index for t in found.load_tokens()}

    def placement(self) -> dict[str, dict[str, int]]:
        return {node: self.aliases(node) for node in self.nodes}

    def cache_sees(self, node: str, check: Callable[[Node], bool], what: str) -> None:
        """Wait until the watch-fed node cache holds ``node`` and ``check`` holds for it."""
        self.eventually(
            lambda: any(n.name == node and check(n) for n in self.adapters.nodes.nodes()), what=what
        )

    def relabel(self, node: str, is_ingress: bool) -> None:
        """Change the node's role label and wait until the watch-fed cache has seen it."""
        self.sim.state.label_node(node, "role", "ingress" if is_ingress else None)
        self.cache_sees(
            node, lambda n: n.is_ingress == is_ingress, f"{node} is_ingress={is_ingress} in the node cache"
        )

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(f"landb_webhook_{name}", labels)


LEASE_DEADLINE = 30.0
"""Seconds for the elector's first round, which takes one request (a Lease created or taken)."""


def started(adapters: Adapters) -> None:
    """Wait until the background threads' first work is done: the node cache synced and, with leader
    election, the writer Lease held. Its creation is a Kubernetes write of the elector thread: sent late on a
    loaded machine, it landed after a test had reset the call record it then counted."""
    assert adapters.nodes.wait_synced(5)
    lease = adapters.lease
    if lease is not None:
        waiting.eventually(lease.held, what="the writer Lease held", timeout=LEASE_DEADLINE)


def settings_for(config: ClientConfig, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "os_cloud": config.cloud_name,
        "kubeconfig": config.kubeconfig,
        "ownership_store": "configmap",
        "ownership_namespace": "default",
        "inventory_max_age": 0,
        "events": False,  # tests/integration/test_name_events.py turns them on; the others count requests
        "dns_watch": False,  # no resolver but a loopback one: tests/integration/test_dns_first.py asks Knot
        **overrides,
    }
    return Settings(**values)


def api_writes(sim: Simulator) -> list[Any]:
    """Metadata changes made through the API (the seeding of the simulator is not one)."""
    return [change for change in sim.state.metadata_history() if change.method != "direct"]


def metadata_writes(sim: Simulator) -> int:
    """Nova metadata requests (POST, PUT, DELETE) since the simulator's call record was last reset."""
    return sum(
        1
        for c in sim.state.api_calls("nova")
        if c.method in {"POST", "PUT", "DELETE"} and "/metadata" in c.path
    )
