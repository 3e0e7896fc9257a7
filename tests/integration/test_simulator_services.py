"""Services in the simulated Kubernetes API, through the official Python client and kubectl: what the API
server allocates, the status subresource the cloud controller manager writes, and what external-dns' service
source reads (``status.loadBalancer.ingress[].ip``)."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import openstack
import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from landb_simulator import ClientConfig, Simulator, seed_cluster, seed_load_balancer_service

KUBECTL = shutil.which("kubectl")


@pytest.fixture
def core(sim_clients: ClientConfig) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(config_file=str(sim_clients.kubeconfig))
    yield client.CoreV1Api(api_client)
    api_client.close()


REAL_API = pytest.param("kube-apiserver", marks=pytest.mark.needs_tools("kube-tools"))


@pytest.fixture(params=["simulator", REAL_API])
def any_core(request: pytest.FixtureRequest) -> tuple[client.CoreV1Api, str]:
    """The simulator's API or a real kube-apiserver's (skipped until it is built), and a namespace: the
    simulator must answer as the real API server does."""
    if request.param == "simulator":
        return request.getfixturevalue("core"), "web"
    server = request.getfixturevalue("kube_apiserver")
    namespace = f"svc-{uuid.uuid4().hex[:8]}"
    server.create_namespace(namespace)
    return client.CoreV1Api(server.admin), namespace


def load_balancer_service(name: str) -> client.V1Service:
    return client.V1Service(
        metadata=client.V1ObjectMeta(
            name=name, annotations={"external-dns.kubernetes.io/hostname": f"{name}.cern.ch"}
        ),
        spec=client.V1ServiceSpec(
            type="LoadBalancer", selector={"app": name}, ports=[client.V1ServicePort(port=443)]
        ),
        # What a client sends in status on create is dropped, as by the API server.
        status=client.V1ServiceStatus(
            load_balancer=client.V1LoadBalancerStatus(ingress=[client.V1LoadBalancerIngress(ip="192.0.2.1")])
        ),
    )


def ingress_ips(service: client.V1Service) -> list[str]:
    return [entry.ip for entry in (service.status.load_balancer.ingress or [])]


def test_a_created_load_balancer_service_gets_a_cluster_ip_node_ports_and_no_address(
    any_core: tuple[client.CoreV1Api, str],
) -> None:
    core, namespace = any_core
    created = core.create_namespaced_service(namespace, load_balancer_service("myapp"))
    second = core.create_namespaced_service(namespace, load_balancer_service("other"))

    assert created.spec.cluster_ip != second.spec.cluster_ip
    assert 30000 <= created.spec.ports[0].node_port <= 32767
    assert created.spec.ports[0].node_port != second.spec.ports[0].node_port
    assert ingress_ips(created) == []


def test_the_simulator_allocates_cluster_ips_in_magnums_service_network(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_service("web", load_balancer_service("myapp"))

    assert ipaddress.ip_address(created.spec.cluster_ip) in ipaddress.ip_network("10.254.0.0/16")


def test_a_service_without_ports_is_invalid(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_service(
            "web", client.V1Service(metadata=client.V1ObjectMeta(name="x"), spec=client.V1ServiceSpec())
        )

    assert refused.value.status == 422
    assert "spec.ports: Required value" in refused.value.body


def test_the_status_subresource_alone_writes_the_load_balancer_address(
    any_core: tuple[client.CoreV1Api, str],
) -> None:
    core, namespace = any_core
    core.create_namespaced_service(namespace, load_balancer_service("myapp"))

    sneaked = core.read_namespaced_service("myapp", namespace)
    sneaked.status.load_balancer.ingress = [client.V1LoadBalancerIngress(ip="192.0.2.9")]
    sneaked.spec.ports[0].port = 8443
    replaced = core.replace_namespaced_service("myapp", namespace, sneaked)
    assert (ingress_ips(replaced), replaced.spec.ports[0].port) == ([], 8443)

    address = {"ip": "188.184.50.1", "ipMode": "VIP"}
    patched = core.patch_namespaced_service_status(
        "myapp",
        namespace,
        {"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {"ingress": [address]}}},
    )
    assert (ingress_ips(patched), patched.spec.type) == (["188.184.50.1"], "LoadBalancer")
    assert ingress_ips(core.read_namespaced_service_status("myapp", namespace)) == ["188.184.50.1"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {"ip": "188.184.50.1", "ipMode": "Direct"},
            'status.loadBalancer.ingress[0].ipMode: Unsupported value: "Direct"',
        ),
        (
            {"ip": "not-an-ip", "ipMode": "VIP"},
            'status.loadBalancer.ingress[0].ip: Invalid value: "not-an-ip"',
        ),
    ],
)
def test_an_invalid_load_balancer_status_is_422_and_changes_nothing(
    any_core: tuple[client.CoreV1Api, str], entry: dict[str, str], problem: str
) -> None:
    core, namespace = any_core
    core.create_namespaced_service(namespace, load_balancer_service("myapp"))

    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_service_status(
            "myapp", namespace, {"status": {"loadBalancer": {"ingress": [entry]}}}
        )

    assert refused.value.status == 422
    assert problem in json.loads(refused.value.body)["message"]
    assert ingress_ips(core.read_namespaced_service_status("myapp", namespace)) == []


def test_an_ip_mode_defaults_to_vip_only_when_the_written_object_is_a_load_balancer(
    any_core: tuple[client.CoreV1Api, str],
) -> None:
    core, namespace = any_core
    core.create_namespaced_service(namespace, load_balancer_service("myapp"))
    without_mode = {"loadBalancer": {"ingress": [{"ip": "188.184.50.1"}]}}

    patched = core.patch_namespaced_service_status("myapp", namespace, {"status": without_mode})
    assert [entry.ip_mode for entry in patched.status.load_balancer.ingress] == ["VIP"]

    # A body that says another type is not defaulted (the type itself is not written through /status).
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_service_status(
            "myapp", namespace, {"spec": {"type": "NodePort"}, "status": without_mode}
        )
    assert refused.value.status == 422
    assert (
        "ipMode: Required value: must be specified when `ip` is set"
        in json.loads(refused.value.body)["message"]
    )


def test_a_watch_on_services_sees_the_address_arrive_and_the_service_go(
    simulator: Simulator, core: client.CoreV1Api
) -> None:
    simulator.state.add_service("web", "myapp", ports=[443])
    since = core.list_service_for_all_namespaces().metadata.resource_version

    simulator.state.set_load_balancer_ingress("web", "myapp", ["188.184.50.2"])
    simulator.state.kube.delete("services", "web", "myapp")
    watcher = watch.Watch()
    events = []
    for event in watcher.stream(
        core.list_namespaced_service, "web", resource_version=since, timeout_seconds=5
    ):
        events.append((event["type"], ingress_ips(event["object"])))
        if len(events) == 2:
            break
    watcher.stop()

    assert events == [("MODIFIED", ["188.184.50.2"]), ("DELETED", ["188.184.50.2"])]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
def test_kubectl_get_services_shows_the_external_ip(simulator: Simulator, sim_clients: ClientConfig) -> None:
    assert KUBECTL is not None
    simulator.state.add_service("web", "myapp", ports=[443])
    simulator.state.add_service("web", "pending", ports=[80])
    simulator.state.set_load_balancer_ingress("web", "myapp", ["188.184.50.3"])

    done = subprocess.run(
        [KUBECTL, "get", "services", "-n", "web"], capture_output=True, text=True, timeout=30, check=False
    )

    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0] == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert [row[:2] + row[3:4] for row in rows[1:]] == [
        ["myapp", "LoadBalancer", "188.184.50.3"],
        ["pending", "LoadBalancer", "<pending>"],
    ]
    assert rows[1][4].startswith("443:") and rows[1][4].endswith("/TCP")


def test_the_seeded_service_leads_to_its_load_balancer_by_the_vip_in_its_status(
    simulator: Simulator, sim_clients: ClientConfig, core: client.CoreV1Api
) -> None:
    """The demo's LoadBalancer Service, followed the way the webhook follows a target: the address in
    the Service's status is the VIP of exactly one load balancer of the project."""
    nodes = seed_cluster(simulator.state, cluster="svc-test", ingress_nodes=2, workers=0)
    lb_id, vip = seed_load_balancer_service(simulator.state, cluster="svc-test")

    (service,) = core.list_service_for_all_namespaces().items
    annotations = service.metadata.annotations
    with openstack.connect(cloud=sim_clients.cloud_name) as conn:
        found = [lb.id for lb in conn.load_balancer.load_balancers(vip_address=ingress_ips(service)[0])]

    assert (service.metadata.namespace, service.metadata.name) == ("default", "myservice")
    assert annotations["external-dns.kubernetes.io/hostname"] == "myservice.cern.ch"
    assert ingress_ips(service) == [vip]
    assert found == [lb_id]
    assert simulator.state.octavia.load_balancer(lb_id).tags == ("kube_service_svc-test_default_myservice",)
    assert vip not in {simulator.state.node(name)["status"]["addresses"][0]["address"] for name in nodes}
