"""The simulated Kubernetes API through the official Python client: nodes, configmaps, watches."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from landb_simulator import ClientConfig, Simulator, seed_cluster

NAMESPACE = "landb"


@pytest.fixture
def core(sim_clients: ClientConfig) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(config_file=str(sim_clients.kubeconfig))
    yield client.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def cluster(simulator: Simulator) -> list[str]:
    """Three ingress nodes and one worker."""
    return seed_cluster(simulator.state, cluster="kube-test", ingress_nodes=3, workers=1)


def names(items: list[Any]) -> list[str]:
    return [item.metadata.name for item in items]


def status_of(error: ApiException) -> dict[str, Any]:
    return dict(json.loads(error.body))


def collect(
    stream: Iterator[dict[str, Any]], count: int, on_event: Callable[[dict[str, Any]], None] | None = None
) -> list[tuple[str, str]]:
    """(type, node name) of the first ``count`` events; ``on_event`` may change the cluster meanwhile."""
    seen: list[tuple[str, str]] = []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if on_event is not None:
            on_event(event)
        if len(seen) == count:
            break
    return seen


# -- nodes -----------------------------------------------------------------------------------------


def test_label_selectors_select_like_the_api_server(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    ingress, worker = cluster[:3], cluster[3:]
    simulator.state.label_node(cluster[0], "tier", "gold")
    simulator.state.label_node(cluster[3], "tier", "silver")
    for rank, name in enumerate(cluster):
        simulator.state.label_node(name, "rank", str(rank * 5))  # 0, 5, 10, 15: "10" < "5" as text
    expectations = {
        "": cluster,
        "role=ingress": ingress,
        "role==ingress": ingress,
        "role!=ingress": worker,
        "role": ingress,
        "!role": worker,
        "tier in (gold, silver)": [cluster[0], cluster[3]],
        "tier notin (gold)": cluster[1:],
        "role=ingress,tier=gold": [cluster[0]],
        "role=ingress,!tier": cluster[1:3],
        "rank>5": cluster[2:],
        "rank<10,role=ingress": cluster[:2],
        "tier>1": [],  # "gold" and "silver" are not integers
    }
    for selector, expected in expectations.items():
        assert names(core.list_node(label_selector=selector).items) == expected, selector


@pytest.mark.parametrize(
    "selectors",
    [
        {"label_selector": "role in ingress"},
        {"label_selector": "rank>high"},
        {"field_selector": "metadata.name"},  # no operator
        {"field_selector": "status.phase=Running"},  # a field nodes cannot be selected by
    ],
)
def test_an_unparsable_selector_is_400(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api, selectors: dict[str, str]
) -> None:
    with pytest.raises(ApiException) as raised:
        core.list_node(**selectors)
    assert raised.value.status == 400
    assert status_of(raised.value)["reason"] == "BadRequest"


def test_field_selectors_select_like_the_api_server(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    core.patch_node(cluster[1], {"spec": {"unschedulable": True}})
    expectations = {
        f"metadata.name={cluster[2]}": [cluster[2]],
        f"metadata.name!={cluster[2]}": [cluster[0], cluster[1], cluster[3]],
        "spec.unschedulable=true": [cluster[1]],
        "spec.unschedulable==false": [cluster[0], *cluster[2:]],
        f"spec.unschedulable=false,metadata.name!={cluster[0]}": cluster[2:],
    }
    for selector, expected in expectations.items():
        assert names(core.list_node(field_selector=selector).items) == expected, selector
    both = core.list_node(label_selector="role=ingress", field_selector="spec.unschedulable=false")
    assert names(both.items) == [cluster[0], cluster[2]]


@pytest.mark.parametrize("labels", [{"n" * 64: "x"}, {"a..b/role": "x"}, {"role": "-x"}, {"role": "v" * 64}])
def test_a_node_with_an_invalid_label_is_refused(
    simulator: Simulator, core: client.CoreV1Api, labels: dict[str, str]
) -> None:
    body = client.V1Node(metadata=client.V1ObjectMeta(name="bad-labels", labels=labels))
    with pytest.raises(ApiException) as raised:
        core.create_node(body)
    assert (raised.value.status, status_of(raised.value)["reason"]) == (422, "Invalid")
    assert simulator.state.node("bad-labels") is None


def test_read_node_shows_provider_id_and_addresses(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    server_id = next(server.id for server in simulator.state.servers() if server.name == cluster[0])

    node = core.read_node(cluster[0])

    assert node.spec.provider_id == f"openstack:///{server_id}"
    addresses = {(address.type, address.address) for address in node.status.addresses}
    assert ("Hostname", cluster[0]) in addresses
    assert ("InternalIP", simulator.state.server(server_id).ip) in addresses
    assert node.metadata.uid and node.metadata.creation_timestamp and node.metadata.resource_version


def test_a_missing_node_is_a_404_status(simulator: Simulator, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as raised:
        core.read_node("absent")
    assert raised.value.status == 404
    status = status_of(raised.value)
    assert (status["kind"], status["reason"], status["details"]["name"]) == ("Status", "NotFound", "absent")


def test_create_conflict_and_delete_of_a_node(simulator: Simulator, core: client.CoreV1Api) -> None:
    body = client.V1Node(metadata=client.V1ObjectMeta(name="new-node", labels={"role": "ingress"}))

    created = core.create_node(body)
    assert created.metadata.labels == {"role": "ingress"}
    with pytest.raises(ApiException) as raised:
        core.create_node(body)
    assert (raised.value.status, status_of(raised.value)["reason"]) == (409, "AlreadyExists")

    core.delete_node("new-node")
    assert simulator.state.node("new-node") is None


def test_every_patch_flavour_changes_labels(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    name = cluster[3]

    strategic = core.patch_node(name, {"metadata": {"labels": {"role": "ingress"}}})
    assert strategic.metadata.labels["role"] == "ingress"
    merge = core.patch_node(
        name, {"metadata": {"labels": {"role": None}}}, _content_type="application/merge-patch+json"
    )
    assert "role" not in merge.metadata.labels
    json_patch = core.patch_node(name, [{"op": "add", "path": "/metadata/labels/tier", "value": "gold"}])
    assert json_patch.metadata.labels["tier"] == "gold"

    stored = simulator.state.node(name)
    assert stored is not None
    assert stored["metadata"]["labels"]["tier"] == "gold" and "role" not in stored["metadata"]["labels"]
    versions = [int(obj.metadata.resource_version) for obj in (strategic, merge, json_patch)]
    assert versions == sorted(set(versions))


def test_an_invalid_label_value_is_422(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    with pytest.raises(ApiException) as raised:
        core.patch_node(cluster[0], {"metadata": {"labels": {"role": "not a valid value!"}}})
    assert (raised.value.status, status_of(raised.value)["reason"]) == (422, "Invalid")


def test_resource_versions_are_one_counter_across_kinds(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    node_version = int(core.read_node(cluster[0]).metadata.resource_version)
    configmap = core.create_namespaced_config_map(
        NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"), data={"a": "b"})
    )
    patched = core.patch_node(cluster[0], {"metadata": {"labels": {"tier": "gold"}}})
    unchanged = core.patch_node(cluster[0], {"metadata": {"labels": {"tier": "gold"}}})

    assert node_version < int(configmap.metadata.resource_version) < int(patched.metadata.resource_version)
    assert unchanged.metadata.resource_version == patched.metadata.resource_version
    assert core.list_node().metadata.resource_version == patched.metadata.resource_version


def test_lists_page_with_limit_and_continue(simulator: Simulator, core: client.CoreV1Api) -> None:
    for index in range(5):
        simulator.state.add_node(f"node-{index}")

    first = core.list_node(limit=2)
    assert names(first.items) == ["node-0", "node-1"]
    assert first.metadata.remaining_item_count == 3
    listed = names(first.items)
    token = first.metadata._continue
    while token:
        page = core.list_node(limit=2, _continue=token)
        listed += names(page.items)
        token = page.metadata._continue
    assert listed == [f"node-{index}" for index in range(5)]


# -- watch -----------------------------------------------------------------------------------------


def test_a_watch_replays_the_changes_after_its_resource_version(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    since = core.list_node().metadata.resource_version
    simulator.state.label_node(cluster[0], "tier", "gold")
    simulator.state.add_node("late-node")
    simulator.state.delete_node(cluster[3])

    watcher = watch.Watch()
    events = collect(watcher.stream(core.list_node, resource_version=since, timeout_seconds=5), 3)
    watcher.stop()

    assert events == [("MODIFIED", cluster[0]), ("ADDED", "late-node"), ("DELETED", cluster[3])]


def test_a_watch_without_a_version_starts_with_the_current_nodes_then_follows_live_changes(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    def change_after_the_initial_state(event: dict[str, Any]) -> None:
        if event["object"].metadata.name == cluster[-1] and event["type"] == "ADDED":
            simulator.state.label_node(cluster[0], "tier", "gold")

    watcher = watch.Watch()
    events = collect(watcher.stream(core.list_node, timeout_seconds=5), 5, change_after_the_initial_state)
    watcher.stop()

    assert events == [("ADDED", name) for name in cluster] + [("MODIFIED", cluster[0])]


def test_a_selector_watch_sees_nodes_enter_and_leave_the_selection(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    since = core.list_node(label_selector="role=ingress").metadata.resource_version
    simulator.state.label_node(cluster[0], "role", None)  # leaves
    simulator.state.label_node(cluster[3], "unrelated", "x")  # never selected: no event
    simulator.state.label_node(cluster[3], "role", "ingress")  # enters
    simulator.state.label_node(cluster[1], "tier", "gold")  # stays

    watcher = watch.Watch()
    stream = watcher.stream(
        core.list_node, label_selector="role=ingress", resource_version=since, timeout_seconds=5
    )
    events = collect(stream, 3)
    watcher.stop()

    assert events == [("DELETED", cluster[0]), ("ADDED", cluster[3]), ("MODIFIED", cluster[1])]


def test_a_compacted_version_is_410_and_a_relist_recovers(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    stale = core.list_node().metadata.resource_version
    simulator.state.label_node(cluster[0], "tier", "gold")
    simulator.state.compact_watch_history()

    with pytest.raises(ApiException) as raised:
        collect(watch.Watch().stream(core.list_node, resource_version=stale, timeout_seconds=5), 1)
    assert raised.value.status == 410

    fresh = core.list_node().metadata.resource_version
    simulator.state.label_node(cluster[1], "tier", "gold")
    watcher = watch.Watch()
    events = collect(watcher.stream(core.list_node, resource_version=fresh, timeout_seconds=5), 1)
    watcher.stop()
    assert events == [("MODIFIED", cluster[1])]


def test_a_watch_ends_after_timeout_seconds(simulator: Simulator, core: client.CoreV1Api) -> None:
    since = core.list_node().metadata.resource_version
    started = time.monotonic()

    events = list(watch.Watch().stream(core.list_node, resource_version=since, timeout_seconds=1))

    assert events == []
    assert 1 <= time.monotonic() - started < 3


def test_stopping_the_simulator_ends_open_watches(sim_clients: ClientConfig, simulator: Simulator) -> None:
    simulator.state.add_node("only-node")
    api_client = config.new_client_from_config(config_file=str(sim_clients.kubeconfig))
    core = client.CoreV1Api(api_client)
    opened = threading.Event()
    ended = threading.Event()

    def follow() -> None:
        try:
            for _ in watch.Watch().stream(core.list_node, timeout_seconds=300):
                opened.set()  # the initial ADDED event: the watch is registered
        except Exception:  # the connection may be cut rather than ended; either is an end
            pass
        ended.set()

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert opened.wait(5)

    stopping = time.monotonic()
    simulator.stop()

    assert ended.wait(3)
    assert time.monotonic() - stopping < 3
    api_client.close()


# -- configmaps ------------------------------------------------------------------------------------


def test_configmap_lifecycle_with_optimistic_concurrency(
    simulator: Simulator, core: client.CoreV1Api
) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owners"), data={"a": "1"})

    created = core.create_namespaced_config_map(NAMESPACE, body)
    stored = simulator.state.configmap(NAMESPACE, "owners")
    assert stored is not None and stored["data"] == {"a": "1"}
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_config_map(NAMESPACE, body)
    assert (duplicate.value.status, status_of(duplicate.value)["reason"]) == (409, "AlreadyExists")

    created.data = {"a": "2"}
    replaced = core.replace_namespaced_config_map("owners", NAMESPACE, created)
    created.data = {"a": "lost update"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_config_map("owners", NAMESPACE, created)
    assert (stale.value.status, status_of(stale.value)["reason"]) == (409, "Conflict")

    patched = core.patch_namespaced_config_map("owners", NAMESPACE, {"data": {"b": "3"}})
    assert patched.data == {"a": "2", "b": "3"}
    assert int(patched.metadata.resource_version) > int(replaced.metadata.resource_version)
    assert names(core.list_namespaced_config_map(NAMESPACE).items) == ["owners"]
    assert core.list_namespaced_config_map("elsewhere").items == []

    core.delete_namespaced_config_map("owners", NAMESPACE)
    assert simulator.state.configmap(NAMESPACE, "owners") is None
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("owners", NAMESPACE)
    assert missing.value.status == 404


def test_a_configmap_over_one_mebibyte_is_refused(simulator: Simulator, core: client.CoreV1Api) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="huge"), data={"blob": "x" * (1024 * 1024)})
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_config_map(NAMESPACE, body)
    assert raised.value.status == 422
    assert simulator.state.configmap(NAMESPACE, "huge") is None


# -- access and faults -----------------------------------------------------------------------------


def test_the_api_wants_the_bearer_token(simulator: Simulator, http: httpx.Client) -> None:
    token = simulator.state.credentials.kubernetes_token

    assert http.get(f"{simulator.url}/api/v1/nodes").status_code == 401
    wrong = http.get(f"{simulator.url}/api/v1/nodes", headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.json()["reason"]) == (401, "Unauthorized")
    right = http.get(f"{simulator.url}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
    assert right.json()["kind"] == "NodeList"
    assert http.get(f"{simulator.url}/version").json()["major"] == "1"  # public, as on a real cluster


def test_an_injected_fault_is_a_status_the_client_understands(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    simulator.state.inject_fault(api="kubernetes", method="GET", path_pattern="^/api/v1/nodes$", status=503)

    with pytest.raises(ApiException) as raised:
        core.list_node()
    assert (raised.value.status, status_of(raised.value)["reason"]) == (503, "ServiceUnavailable")
    assert names(core.list_node().items) == cluster


# -- node health and pods --------------------------------------------------------------------------


def ready_condition(node: Any) -> Any:
    return next(c for c in node.status.conditions if c.type == "Ready")


def test_node_readiness_and_cordon_show_in_the_node_with_a_transition_time(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    before = ready_condition(core.read_node(cluster[0])).last_transition_time
    simulator.state.set_node_ready(cluster[0], False, status="Unknown")
    simulator.state.cordon_node(cluster[1])

    lost = ready_condition(core.read_node(cluster[0]))
    assert lost.status == "Unknown"
    assert lost.last_transition_time >= before
    assert core.read_node(cluster[1]).spec.unschedulable is True
    assert names(core.list_node(field_selector="spec.unschedulable=true").items) == [cluster[1]]

    unchanged = simulator.state.set_node_ready(cluster[0], False, status="Unknown")
    assert unchanged["metadata"]["resourceVersion"] == core.read_node(cluster[0]).metadata.resource_version


def test_a_node_with_finalizers_is_marked_deleted_and_goes_when_they_do(
    simulator: Simulator, core: client.CoreV1Api
) -> None:
    simulator.state.add_node("draining", labels={"role": "ingress"}, finalizers=["example.org/drain"])
    since = core.list_node().metadata.resource_version

    core.delete_node("draining")
    marked = core.read_node("draining")
    assert marked.metadata.deletion_timestamp is not None
    core.delete_node("draining")  # again: still there, still the same deletionTimestamp
    assert core.read_node("draining").metadata.deletion_timestamp == marked.metadata.deletion_timestamp

    simulator.state.remove_finalizers("draining")
    with pytest.raises(ApiException) as raised:
        core.read_node("draining")
    assert raised.value.status == 404

    watcher = watch.Watch()
    events = collect(watcher.stream(core.list_node, resource_version=since, timeout_seconds=5), 2)
    watcher.stop()
    assert events == [("MODIFIED", "draining"), ("DELETED", "draining")]


def test_pods_list_and_watch_by_namespace_labels_and_node(
    simulator: Simulator, cluster: list[str], core: client.CoreV1Api
) -> None:
    controller = {"app.kubernetes.io/name": "ingress-nginx"}
    simulator.state.add_pod("ingress", "controller-a", node=cluster[0], labels=controller)
    simulator.state.add_pod("ingress", "controller-b", node=cluster[1], labels=controller, ready=False)
    simulator.state.add_pod("other", "controller-c", node=cluster[2], labels=controller)
    simulator.state.add_pod("ingress", "sidecar", node=cluster[0], labels={"app": "sidecar"})

    selector = "app.kubernetes.io/name=ingress-nginx"
    in_namespace = core.list_namespaced_pod("ingress", label_selector=selector)
    assert names(in_namespace.items) == ["controller-a", "controller-b"]
    everywhere = core.list_pod_for_all_namespaces(label_selector=selector)
    assert names(everywhere.items) == ["controller-a", "controller-b", "controller-c"]
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={cluster[0]}")
    assert names(on_node.items) == ["controller-a", "sidecar"]
    ready = {p.metadata.name: ready_condition(p).status for p in in_namespace.items}
    assert ready == {"controller-a": "True", "controller-b": "False"}

    since = in_namespace.metadata.resource_version
    simulator.state.set_pod_ready("ingress", "controller-b", True)
    simulator.state.set_pod_ready("other", "controller-c", False)  # another namespace: not seen
    simulator.state.delete_pod("ingress", "controller-a")
    watcher = watch.Watch()
    stream = watcher.stream(
        core.list_namespaced_pod,
        "ingress",
        label_selector=selector,
        resource_version=since,
        timeout_seconds=5,
    )
    events = collect(stream, 2)
    watcher.stop()
    assert events == [("MODIFIED", "controller-b"), ("DELETED", "controller-a")]
