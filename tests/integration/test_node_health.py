"""Node health (docs/architecture.md, invariant 8): the provider wired to the real clients, against the
simulator over HTTP, driven by the external-dns loop emulation (landb_simulator.external_dns).

Time is the provider's injected clock, moved past the grace period by the test: nothing here sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_simulator import Simulator
from landb_webhook.endpoint import Changes
from support.provider_cluster import Cluster, metadata_writes

MakeCluster = Callable[..., Cluster]

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


@pytest.fixture
def make_cluster(make_cluster: MakeCluster) -> MakeCluster:
    """The shared cluster with a grace period of GRACE, on a clock the test moves past it."""

    def make(**options: Any) -> Cluster:
        return make_cluster(clock=Clock(), node_grace_period=GRACE, **options)

    return make


def test_a_node_going_not_ready_loses_its_aliases_only_after_the_grace_period(make_cluster: Any) -> None:
    cluster = make_cluster()
    ingress = cluster.nodes[:3]
    cluster.want("app.cern.ch", "web.cern.ch")
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
    cluster.want("app.cern.ch", "web.cern.ch")
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
    cluster.want("app.cern.ch")
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
    cluster.want("app.cern.ch")
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
    cluster.want("app.cern.ch", "web.cern.ch")
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
    cluster.want("app.cern.ch")
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
    cluster.want("app.cern.ch")
    cluster.settles_in_one_loop()
    cordoned = cluster.nodes[0]
    cluster.sim.state.cordon_node(cordoned)
    cluster.cache_sees(cordoned, lambda n: n.unschedulable, "the cordon")
    cluster.clock.pass_grace()
    assert cluster.loop() == Changes()
    assert cluster.aliases(cordoned) == {"app": 0}


def test_cordoned_nodes_lose_their_aliases_at_once_when_they_must_not_carry(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=2, workers=0, cordoned_nodes_carry=False)
    cluster.want("app.cern.ch")
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
    cluster.want("app.cern.ch")
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
    cluster.want("app.cern.ch")
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
    cluster.want("app.cern.ch")
    cluster.settles_in_one_loop()
    assert [cluster.aliases(n) for n in cluster.nodes] == [{"app": 0}, {"app": 1}, {"app": 2}]
