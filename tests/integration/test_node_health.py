"""Node health (docs/architecture.md, invariant 8): the provider wired to the real clients, against the
simulator over HTTP, driven by the external-dns loop emulation (tests/support/external_dns.py).

Time is the provider's injected clock, moved past the grace period by the test: nothing here sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_webhook.app import Resources, build_provider
from landb_webhook.config import Settings
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.metrics import Metrics
from landb_webhook.ports import Node
from landb_webhook.provider import LandbProvider
from landb_webhook.simulator import ClientConfig, Simulator, seed_cluster
from support.external_dns import plan

Eventually = Callable[..., Any]

OWNER = "health-test"
GRACE = 300.0
CONTROLLER = {"app.kubernetes.io/name": "ingress-nginx"}
NAMESPACE = "ingress-nginx"


class Clock:
    """Wall-clock time, moved forward on demand (the grace period is compared with API timestamps)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def pass_grace(self) -> None:
        self.offset += GRACE + 1


@dataclass
class Cluster:
    sim: Simulator
    provider: LandbProvider
    resources: Resources
    metrics: Metrics
    nodes: list[str]
    clock: Clock
    eventually: Eventually
    desired: list[Endpoint] = field(default_factory=list)

    def want(self, *labels: str) -> None:
        self.desired = [
            Endpoint(
                f"{label}.cern.ch", "A", ("192.0.2.1",), labels=(("resource", f"ingress/default/{label}"),)
            )
            for label in labels
        ]

    def loop(self) -> Changes:
        changes = plan(
            self.provider.records(), self.provider.adjust_endpoints(self.desired), owner=OWNER
        ).changes
        if changes != Changes():
            self.provider.apply_changes(changes)
        return changes

    def settles_in_one_loop(self) -> Changes:
        """One loop that changes something, then one that changes (and writes) nothing."""
        changed = self.loop()
        self.sim.state.reset_api_calls()
        assert self.loop() == Changes()
        assert metadata_writes(self.sim) == 0
        return changed

    def server_id(self, node: str) -> str:
        return next(s.id for s in self.sim.state.servers() if s.name == node)

    def aliases(self, node: str) -> dict[str, int]:
        found = read_aliases(self.sim.state.metadata(self.server_id(node)))
        return {t.label: t.index for t in found.load_tokens()}

    def placement(self) -> dict[str, dict[str, int]]:
        return {node: self.aliases(node) for node in self.nodes}

    def cache_sees(self, node: str, check: Callable[[Node], bool], what: str) -> None:
        self.eventually(
            lambda: any(n.name == node and check(n) for n in self.resources.nodes.nodes()), what=what
        )

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(f"landb_webhook_{name}", labels)


def metadata_writes(sim: Simulator) -> int:
    return sum(
        1
        for c in sim.state.api_calls("nova")
        if c.method in {"POST", "PUT", "DELETE"} and "/metadata" in c.path
    )


@pytest.fixture
def make_cluster(simulator: Simulator, sim_clients: ClientConfig, eventually: Eventually) -> Iterator[Any]:
    built: list[Resources] = []

    def make(
        ingress_nodes: int = 3,
        workers: int = 1,
        seed: Callable[[list[str]], None] | None = None,
        **overrides: Any,
    ) -> Cluster:
        """``seed(nodes)`` adds to the cluster before the provider starts."""
        nodes = seed_cluster(simulator.state, ingress_nodes=ingress_nodes, workers=workers)
        if seed is not None:
            seed(nodes)
        settings = Settings(
            os_cloud=sim_clients.cloud_name,
            kubeconfig=sim_clients.kubeconfig,
            ownership_store="configmap",
            ownership_namespace="default",
            inventory_max_age=0,
            node_grace_period=GRACE,
            **overrides,
        )
        metrics = Metrics.create(process_metrics=False)
        clock = Clock()
        provider, resources = build_provider(settings, metrics, clock=clock)
        built.append(resources)
        assert resources.nodes.wait_synced(5)
        return Cluster(simulator, provider, resources, metrics, nodes, clock, eventually)

    yield make
    for resources in built:
        resources.close()


def test_a_node_going_not_ready_loses_its_aliases_only_after_the_grace_period(make_cluster: Any) -> None:
    cluster = make_cluster()
    ingress = cluster.nodes[:3]
    cluster.want("app", "web")
    cluster.settles_in_one_loop()
    before = cluster.placement()
    sick = ingress[1]

    cluster.sim.state.set_node_ready(sick, False, status="Unknown")
    cluster.cache_sees(sick, lambda n: not n.ready, "the node NotReady")
    cluster.sim.state.reset_api_calls()
    assert cluster.loop() == Changes(), "within the grace period nothing changes"
    assert metadata_writes(cluster.sim) == 0
    assert cluster.gauge("ingress_nodes_unhealthy", state="grace") == 1

    cluster.clock.pass_grace()
    cluster.settles_in_one_loop()
    assert cluster.aliases(sick) == {}
    assert {n: cluster.aliases(n) for n in ingress if n != sick} == {
        n: before[n] for n in ingress if n != sick
    }, "the other carriers keep their indices"
    assert cluster.gauge("ingress_nodes_unhealthy", state="out") == 1
    assert cluster.gauge("unhealthy_nodes_kept") == 0


def test_a_node_coming_back_regains_its_aliases_with_the_same_index(make_cluster: Any) -> None:
    cluster = make_cluster()
    cluster.want("app", "web")
    cluster.settles_in_one_loop()
    before = cluster.placement()
    sick = cluster.nodes[1]
    cluster.sim.state.set_node_ready(sick, False)
    cluster.cache_sees(sick, lambda n: not n.ready, "the node NotReady")
    cluster.clock.pass_grace()
    cluster.settles_in_one_loop()
    assert cluster.aliases(sick) == {}

    cluster.sim.state.set_node_ready(sick, True)
    cluster.cache_sees(sick, lambda n: n.ready, "the node Ready again")
    cluster.settles_in_one_loop()
    assert cluster.placement() == before


def test_nodes_coming_back_in_another_order_each_regain_their_own_index(make_cluster: Any) -> None:
    """The smallest free N would swap them; the provider remembers the Ns it removed."""
    cluster = make_cluster(ingress_nodes=4, workers=0)
    cluster.want("app")
    cluster.settles_in_one_loop()
    before = cluster.placement()
    first_out, second_out = cluster.nodes[3], cluster.nodes[1]
    for node in (first_out, second_out):
        cluster.sim.state.set_node_ready(node, False)
        cluster.cache_sees(node, lambda n: not n.ready, f"{node} NotReady")
        cluster.clock.pass_grace()
        cluster.settles_in_one_loop()
        assert cluster.aliases(node) == {}

    for node in (first_out, second_out):  # the one whose N is larger comes back first
        cluster.sim.state.set_node_ready(node, True)
        cluster.cache_sees(node, lambda n: n.ready, f"{node} Ready")
        cluster.settles_in_one_loop()
        assert cluster.aliases(node) == before[node]
    assert cluster.placement() == before


def test_the_last_carriers_are_never_removed_however_long_they_are_unhealthy(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=2)
    first, second = cluster.nodes[:2]
    cluster.want("app")
    cluster.settles_in_one_loop()
    before = cluster.placement()

    for node in (first, second):
        cluster.sim.state.set_node_ready(node, False, status="Unknown")
        cluster.cache_sees(node, lambda n: not n.ready, f"{node} NotReady")
    cluster.clock.pass_grace()
    cluster.sim.state.reset_api_calls()
    with capture_logs() as logs:
        assert cluster.loop() == Changes()
    assert metadata_writes(cluster.sim) == 0
    assert cluster.placement() == before
    assert cluster.gauge("unhealthy_nodes_kept") == 2
    assert any(
        entry["log_level"] == "error" and entry["event"].startswith("no ingress node is healthy")
        for entry in logs
    )

    # A new name while nothing is healthy still gets carriers: the ingress nodes, as without health.
    cluster.want("app", "web")
    cluster.settles_in_one_loop()
    assert {cluster.aliases(n).keys() == {"app", "web"} for n in (first, second)} == {True}

    # One node recovers: the other, long past its grace, now hands its aliases over.
    cluster.sim.state.set_node_ready(second, True)
    cluster.cache_sees(second, lambda n: n.ready, f"{second} Ready")
    cluster.settles_in_one_loop()
    assert cluster.aliases(first) == {}
    assert cluster.aliases(second) == {"app": before[second]["app"], "web": 1}
    assert cluster.gauge("unhealthy_nodes_kept") == 0


def test_a_node_being_deleted_loses_its_aliases_after_the_grace_period(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=2, workers=0)
    cluster.want("app")
    cluster.settles_in_one_loop()
    # A node held by a finalizer while it drains: Ready still, but on its way out.
    leaving = cluster.nodes[0]
    cluster.sim.state.kube.mutate(
        "nodes", None, leaving, lambda node: node["metadata"].update(finalizers=["example.org/drain"])
    )
    cluster.sim.state.delete_node(leaving)
    cluster.cache_sees(leaving, lambda n: n.deleting, "the deletionTimestamp")
    assert cluster.loop() == Changes()
    cluster.clock.pass_grace()
    cluster.settles_in_one_loop()
    assert cluster.aliases(leaving) == {}
    assert cluster.aliases(cluster.nodes[1]) == {"app": 1}


def test_cordoned_nodes_keep_their_aliases_unless_told_otherwise(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=2, workers=0)
    cluster.want("app")
    cluster.settles_in_one_loop()
    cordoned = cluster.nodes[0]
    cluster.sim.state.cordon_node(cordoned)
    cluster.cache_sees(cordoned, lambda n: n.unschedulable, "the cordon")
    cluster.clock.pass_grace()
    assert cluster.loop() == Changes()
    assert cluster.aliases(cordoned) == {"app": 0}


def test_cordoned_nodes_lose_their_aliases_at_once_when_they_must_not_carry(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=2, workers=0, cordoned_nodes_carry=False)
    cluster.want("app")
    cluster.settles_in_one_loop()
    cordoned = cluster.nodes[0]
    cluster.sim.state.cordon_node(cordoned)
    cluster.cache_sees(cordoned, lambda n: n.unschedulable, "the cordon")
    cluster.settles_in_one_loop()  # no grace: a cordon is deliberate
    assert cluster.aliases(cordoned) == {}


def test_with_the_pod_selector_a_node_whose_controller_is_not_ready_carries_nothing(
    make_cluster: Any, simulator: Simulator
) -> None:
    def controllers(nodes: list[str]) -> None:
        state = simulator.state
        for i, node in enumerate(nodes[:3]):
            state.add_pod(NAMESPACE, f"controller-{i}", node=node, labels=CONTROLLER, ready=i != 1)
        state.add_pod("default", "impostor", node=nodes[3], labels=CONTROLLER)  # another namespace

    cluster = make_cluster(
        seed=controllers,
        ingress_pod_selector="app.kubernetes.io/name=ingress-nginx",
        ingress_pod_namespace=NAMESPACE,
    )
    nodes = cluster.nodes
    cluster.want("app")
    cluster.loop()  # controller-1 is within its grace period: node 1 carries for now
    assert cluster.aliases(nodes[1]) == {"app": 1}

    cluster.clock.pass_grace()
    cluster.settles_in_one_loop()
    assert [cluster.aliases(n) for n in nodes] == [{"app": 0}, {}, {"app": 2}, {}]

    cluster.sim.state.set_pod_ready(NAMESPACE, "controller-1", True)
    cluster.cache_sees(nodes[1], lambda n: bool(n.controller_ready), "controller-1 Ready")
    cluster.settles_in_one_loop()
    assert [cluster.aliases(n) for n in nodes] == [{"app": 0}, {"app": 1}, {"app": 2}, {}]


def test_a_controller_rollout_within_the_grace_period_moves_nothing(
    make_cluster: Any, simulator: Simulator
) -> None:
    def controllers(nodes: list[str]) -> None:
        for i, node in enumerate(nodes[:3]):
            simulator.state.add_pod(NAMESPACE, f"controller-{i}", node=node, labels=CONTROLLER)

    cluster = make_cluster(seed=controllers, ingress_pod_selector="app.kubernetes.io/name=ingress-nginx")
    nodes = cluster.nodes
    cluster.want("app")
    cluster.settles_in_one_loop()
    before = cluster.placement()

    # The old pod goes, its replacement is not Ready yet: the gap is counted from when the old one went.
    simulator.state.delete_pod(NAMESPACE, "controller-0")
    cluster.cache_sees(nodes[0], lambda n: n.controller_ready is False, "the old pod gone")
    simulator.state.add_pod(NAMESPACE, "controller-0-new", node=nodes[0], labels=CONTROLLER, ready=False)
    cluster.sim.state.reset_api_calls()
    assert cluster.loop() == Changes()
    assert metadata_writes(cluster.sim) == 0

    # A replacement that never becomes Ready: past the grace period the node hands its aliases over.
    cluster.clock.pass_grace()
    cluster.settles_in_one_loop()
    assert cluster.aliases(nodes[0]) == {}

    simulator.state.set_pod_ready(NAMESPACE, "controller-0-new", True)
    cluster.cache_sees(nodes[0], lambda n: bool(n.controller_ready), "the new pod Ready")
    cluster.settles_in_one_loop()
    assert cluster.placement() == before


def test_nodes_match_when_any_of_several_selectors_does(make_cluster: Any) -> None:
    cluster = make_cluster(
        ingress_nodes=2, workers=1, ingress_selector="role=ingress;node-role.kubernetes.io/ingress"
    )
    labelled_otherwise = cluster.nodes[2]
    cluster.sim.state.label_node(labelled_otherwise, "node-role.kubernetes.io/ingress", "")
    cluster.cache_sees(labelled_otherwise, lambda n: n.is_ingress, "the role label")
    cluster.want("app")
    cluster.settles_in_one_loop()
    assert [cluster.aliases(n) for n in cluster.nodes] == [{"app": 0}, {"app": 1}, {"app": 2}]
