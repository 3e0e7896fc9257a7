"""KubernetesNodeSource against the simulated Kubernetes API, through the kubernetes client over HTTP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml
from kubernetes import client
from kubernetes.config import kube_config
from structlog.testing import capture_logs

from landb_webhook.adapters.kubernetes import KubernetesNodeSource, api_client_for
from landb_webhook.backends import Node, UpstreamError
from landb_webhook.selector import InvalidSelector
from support.clusters import KubeCluster
from support.default_options import watch_options
from support.kube_requests import is_watch

MakeSource = Callable[..., KubernetesNodeSource]
Eventually = Callable[..., Any]
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


def by_name(source: KubernetesNodeSource) -> dict[str, Node]:
    return {node.name: node for node in source.nodes()}


def node_requests(state: Any) -> list[Any]:
    return [call for call in state.api_calls("kubernetes") if call.path == "/api/v1/nodes"]


def test_the_first_list_fills_the_cache_with_every_node(
    kube_cluster: KubeCluster, make_node_source: MakeSource
) -> None:
    server_id = str(uuid.uuid4())
    kube_cluster.add_node(
        "cluster-node-0",
        labels={"role": "ingress"},
        provider_id=f"openstack:///{server_id}",
        internal_ips=["188.184.2.10", "2001:1458:d00:1::10", "188.184.2.9"],
    )
    kube_cluster.add_node("cluster-node-1", labels={"role": "worker"}, internal_ips=["188.184.2.11"])
    kube_cluster.add_node(
        "cluster-node-2", labels={"role": "ingress", EXCLUDE_LABEL: ""}, internal_ips=["188.184.2.12"]
    )
    with make_node_source() as source:
        assert source.wait_synced(5)
        nodes = list(source.nodes())
        # Registered Ready just now; when exactly is the simulator's clock, not this test's concern.
        assert all(node.ready and node.ready_changed_at is not None for node in nodes)
        assert [replace(node, ready_changed_at=None) for node in nodes] == [
            Node("cluster-node-0", server_id, ("188.184.2.9", "188.184.2.10"), is_ingress=True),
            Node("cluster-node-1", None, ("188.184.2.11",), is_ingress=False),
            Node("cluster-node-2", None, ("188.184.2.12",), is_ingress=False),
        ]


def test_nodes_are_an_upstream_error_until_the_first_list_succeeds(
    simulator: Any, make_node_source: MakeSource, eventually: Eventually
) -> None:
    state = simulator.state
    state.add_node("cluster-node-0", labels={"role": "ingress"})
    fault = state.inject_fault(
        api="kubernetes", method="GET", path_pattern="^/api/v1/nodes$", status=503, times=None
    )
    source = make_node_source()
    with pytest.raises(UpstreamError) as raised:
        source.nodes()
    assert raised.value.upstream == "kubernetes"
    source.start()
    eventually(lambda: fault.hits >= 3, what="the source to retry its list")
    assert not source.synced
    with pytest.raises(UpstreamError):
        source.nodes()
    fault.cancel()
    assert source.wait_synced(5)
    assert [node.name for node in source.nodes()] == ["cluster-node-0"]


def test_label_changes_reach_the_cache(
    kube_cluster: KubeCluster, make_node_source: MakeSource, eventually: Eventually
) -> None:
    kube_cluster.add_node("cluster-node-0", labels={"role": "worker"})
    with make_node_source() as source, capture_logs() as logs:
        assert source.wait_synced(5)
        assert not by_name(source)["cluster-node-0"].is_ingress
        kube_cluster.label_node("cluster-node-0", "role", "ingress")
        eventually(lambda: by_name(source)["cluster-node-0"].is_ingress, what="the node to become ingress")
        kube_cluster.label_node("cluster-node-0", EXCLUDE_LABEL, "true")
        eventually(lambda: not by_name(source)["cluster-node-0"].is_ingress, what="the exclusion")
    changes = [entry["ingress"] for entry in logs if entry["event"] == "node ingress changed"]
    assert changes == [True, False]


def test_added_and_deleted_nodes_reach_the_cache(
    kube_cluster: KubeCluster, make_node_source: MakeSource, eventually: Eventually
) -> None:
    kube_cluster.add_node("cluster-node-0", labels={"role": "ingress"})
    with make_node_source() as source:
        assert source.wait_synced(5)
        kube_cluster.add_node("cluster-node-1", labels={"role": "ingress"}, internal_ips=["188.184.2.11"])
        eventually(lambda: "cluster-node-1" in by_name(source), what="the new node")
        assert by_name(source)["cluster-node-1"].internal_ips == ("188.184.2.11",)
        kube_cluster.delete_node("cluster-node-0")
        eventually(lambda: list(by_name(source)) == ["cluster-node-1"], what="the deleted node to go")


def test_a_large_cluster_is_listed_in_pages(simulator: Any, make_node_source: MakeSource) -> None:
    state = simulator.state
    for i in range(25):
        state.add_node(f"cluster-node-{i:02d}", labels={"role": "ingress" if i < 3 else "worker"})
    state.reset_api_calls()
    with make_node_source(list_page_size=10) as source:
        assert source.wait_synced(5)
        assert len(source.nodes()) == 25
        assert sum(node.is_ingress for node in source.nodes()) == 3
    lists = [call for call in node_requests(state) if not is_watch(call)]
    assert len(lists) == 3
    assert all(parse_qs(call.query).get("limit") == ["10"] for call in lists)


def test_an_expired_watch_is_followed_by_a_relist(
    simulator: Any, make_node_source: MakeSource, eventually: Eventually
) -> None:
    state = simulator.state
    state.add_node("cluster-node-0", labels={"role": "ingress"})
    with make_node_source(watch_timeout=1) as source, capture_logs() as logs:
        assert source.wait_synced(5)
        state.reset_api_calls()
        # Move the cluster's resourceVersion past the one the node watch resumes from, then
        # compact: the next watch (after at most watch_timeout) starts from a forgotten version.
        state.put_configmap("default", "unrelated", {"k": "v"})
        state.compact_watch_history()
        eventually(
            lambda: any(not is_watch(call) for call in node_requests(state)), timeout=10, what="a relist"
        )
        state.add_node("cluster-node-1", labels={"role": "ingress"})
        eventually(lambda: "cluster-node-1" in by_name(source), what="changes after the relist")
    relists = [entry for entry in logs if entry["event"] == "relisting nodes"]
    assert relists and relists[0]["log_level"] == "warning" and "410" in relists[0]["reason"]


def test_stop_ends_a_quiet_watch_promptly(
    simulator: Any, make_node_source: MakeSource, eventually: Eventually
) -> None:
    simulator.state.add_node("cluster-node-0")
    source = make_node_source(watch_timeout=300)
    source.start()
    assert source.wait_synced(5)
    eventually(lambda: simulator.state.kube.subscriber_count() == 1, what="the watch to be open")
    started = time.monotonic()
    source.stop(timeout=5)
    assert time.monotonic() - started < 2
    assert source.synced and not source.running


def test_a_malformed_selector_fails_at_start_up(kube_api_client: client.ApiClient) -> None:
    with pytest.raises(InvalidSelector, match="role in"):
        KubernetesNodeSource(
            kube_api_client,
            ingress_selector="role in (ingress",
            exclude_label=EXCLUDE_LABEL,
            watch=watch_options(),
        )


def test_the_default_kubeconfig_is_used_without_touching_the_global_configuration(
    simulator: Any, client_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: no in-cluster config
    # The client reads $KUBECONFIG once, at import; this is what it would have read.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(client_config.kubeconfig))
    simulator.state.add_node("cluster-node-0")
    global_host = client.Configuration.get_default_copy().host
    api_client = api_client_for(None)
    try:
        kubeconfig = yaml.safe_load(client_config.kubeconfig.read_text())
        assert api_client.configuration.host == kubeconfig["clusters"][0]["cluster"]["server"]
        assert [node.metadata.name for node in client.CoreV1Api(api_client).list_node().items] == [
            "cluster-node-0"
        ]
    finally:
        api_client.close()
    assert client.Configuration.get_default_copy().host == global_host


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_cache_no_list_or_watch_has_refreshed_for_too_long_is_refused_until_one_does(
    simulator: Any, make_node_source: MakeSource, eventually: Eventually
) -> None:
    """While the API server is unreachable the cache ages; past the bound, nodes() is an UpstreamError."""
    simulator.state.add_node("cluster-node-0", labels={"role": "ingress"})
    clock = ManualClock()
    with make_node_source(watch_timeout=1, max_staleness=300, clock=clock) as source:
        assert source.wait_synced(5)
        outage = simulator.state.inject_fault(api="kubernetes", status=503, times=None)
        # The watch open before the outage may still end well and refresh the cache: age it only once
        # a request has met the outage, i.e. that watch is over.
        eventually(lambda: outage.hits >= 1, timeout=10, what="a list or watch to meet the outage")
        clock.now += 301
        with pytest.raises(UpstreamError, match="stale"):
            source.nodes()
        outage.cancel()
        eventually(lambda: _answers(source), timeout=10, what="a watch to end well and refresh the cache")
        assert [node.name for node in source.nodes()] == ["cluster-node-0"]


def _answers(source: KubernetesNodeSource) -> bool:
    try:
        source.nodes()
    except UpstreamError:
        return False
    return True


CONTROLLER = {"app.kubernetes.io/name": "ingress-nginx"}
CONTROLLER_SELECTOR = "app.kubernetes.io/name=ingress-nginx"


def test_node_health_reaches_the_cache(
    kube_cluster: KubeCluster, make_node_source: MakeSource, eventually: Eventually
) -> None:
    kube_cluster.add_node("cluster-node-0", labels={"role": "ingress"}, finalizers=["example.org/drain"])
    kube_cluster.add_node("cluster-node-1", labels={"role": "ingress"})
    with make_node_source() as source:
        assert source.wait_synced(5)
        assert all(node.controller_ready is None for node in source.nodes())  # no pod selector
        kube_cluster.set_node_ready("cluster-node-1", False, status="Unknown")
        kube_cluster.cordon_node("cluster-node-1")
        kube_cluster.delete_node("cluster-node-0")
        eventually(lambda: by_name(source)["cluster-node-0"].deleting, what="the deletionTimestamp")
        eventually(lambda: by_name(source)["cluster-node-1"].unschedulable, what="the cordon")
        lost = by_name(source)["cluster-node-1"]
        assert not lost.ready and lost.ready_changed_at is not None
        assert by_name(source)["cluster-node-0"].deleting_since is not None
        kube_cluster.remove_finalizers("cluster-node-0")
        eventually(lambda: list(by_name(source)) == ["cluster-node-1"], what="the node to go")


def test_with_a_pod_selector_each_node_says_whether_a_ready_controller_runs_on_it(
    kube_cluster: KubeCluster, make_node_source: MakeSource, eventually: Eventually
) -> None:
    for i in range(4):
        kube_cluster.add_node(f"cluster-node-{i}", labels={"role": "ingress"})
    kube_cluster.add_pod("ingress", "controller-0", node="cluster-node-0", labels=CONTROLLER)
    kube_cluster.add_pod("ingress", "controller-1", node="cluster-node-1", labels=CONTROLLER, ready=False)
    kube_cluster.add_pod(
        "elsewhere", "controller-2", node="cluster-node-2", labels=CONTROLLER
    )  # other namespace
    kube_cluster.add_pod(
        "ingress", "sidecar-3", node="cluster-node-3", labels={"app": "sidecar"}
    )  # not selected

    def controllers(source: KubernetesNodeSource) -> dict[str, bool | None]:
        return {node.name: node.controller_ready for node in source.nodes()}

    with make_node_source(
        ingress_pod_selector=CONTROLLER_SELECTOR, ingress_pod_namespace="ingress"
    ) as source:
        assert source.wait_synced(5)
        assert controllers(source) == {
            "cluster-node-0": True,
            "cluster-node-1": False,
            "cluster-node-2": False,
            "cluster-node-3": False,
        }
        assert by_name(source)["cluster-node-1"].controller_changed_at is not None
        assert by_name(source)["cluster-node-2"].controller_changed_at is None  # never seen one

        kube_cluster.set_pod_ready("ingress", "controller-1", True)
        eventually(lambda: controllers(source)["cluster-node-1"], what="controller-1 Ready")
        before = time.time()
        kube_cluster.delete_pod("ingress", "controller-0")
        eventually(lambda: controllers(source)["cluster-node-0"] is False, what="controller-0 gone")
        gone = by_name(source)["cluster-node-0"].controller_changed_at
        # A replacement pod has the grace period to come up. A real API server first shows the pod
        # terminating: its deletionTimestamp, in whole seconds, is then the moment.
        assert gone is not None and gone >= int(before)


def test_without_a_namespace_the_pod_selector_looks_everywhere(
    kube_cluster: KubeCluster, make_node_source: MakeSource
) -> None:
    kube_cluster.add_node("cluster-node-0", labels={"role": "ingress"})
    kube_cluster.add_pod("elsewhere", "controller-0", node="cluster-node-0", labels=CONTROLLER)
    with make_node_source(ingress_pod_selector=CONTROLLER_SELECTOR) as source:
        assert source.wait_synced(5)
        assert [node.controller_ready for node in source.nodes()] == [True]
