"""kubectl and the openstack CLI, unmodified, against the simulator (what a human does with ``demo``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from landb_simulator import ClientConfig, Simulator, seed_cluster

KUBECTL = shutil.which("kubectl")
OPENSTACK = Path(sys.executable).with_name("openstack")

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest.fixture
def cluster(simulator: Simulator) -> list[str]:
    return seed_cluster(simulator.state, cluster="cli-test", ingress_nodes=2, workers=1)


def kubectl(*args: str) -> str:
    """Run kubectl with the KUBECONFIG and KUBECACHEDIR that ``sim_clients`` exported."""
    assert KUBECTL is not None
    done = subprocess.run([KUBECTL, *args], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_kubectl
def test_kubectl_get_nodes(sim_clients: ClientConfig, cluster: list[str]) -> None:
    rows = [line.split() for line in kubectl("get", "nodes").splitlines()]

    assert rows[0][:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [row[0] for row in rows[1:]] == cluster
    assert {row[1] for row in rows[1:]} == {"Ready"}
    ingress = kubectl("get", "nodes", "-l", "role=ingress", "-o", "name").split()
    assert ingress == [f"node/{name}" for name in cluster[:2]]


@needs_kubectl
def test_kubectl_get_node_as_yaml(
    simulator: Simulator, sim_clients: ClientConfig, cluster: list[str]
) -> None:
    node = yaml.safe_load(kubectl("get", "node", cluster[0], "-o", "yaml"))

    server_id = next(server.id for server in simulator.state.servers() if server.name == cluster[0])
    assert node["kind"] == "Node"
    assert node["spec"]["providerID"] == f"openstack:///{server_id}"


@needs_kubectl
def test_kubectl_label_node(simulator: Simulator, sim_clients: ClientConfig, cluster: list[str]) -> None:
    kubectl("label", "node", cluster[2], "role=ingress")
    node = simulator.state.node(cluster[2])
    assert node is not None and node["metadata"]["labels"]["role"] == "ingress"

    kubectl("label", "node", cluster[0], "role-")
    node = simulator.state.node(cluster[0])
    assert node is not None and "role" not in node["metadata"]["labels"]


@needs_kubectl
def test_kubectl_get_configmap(simulator: Simulator, sim_clients: ClientConfig) -> None:
    simulator.state.put_configmap(
        "landb", "landb-webhook-ownership", {"a-app.cern.ch": "x", "b-app.cern.ch": "y"}
    )

    rows = [line.split() for line in kubectl("get", "configmap", "-n", "landb").splitlines()]
    assert rows[0] == ["NAME", "DATA", "AGE"]
    assert rows[1][:2] == ["landb-webhook-ownership", "2"]
    data = json.loads(kubectl("get", "configmap", "landb-webhook-ownership", "-n", "landb", "-o", "json"))[
        "data"
    ]
    assert data == {"a-app.cern.ch": "x", "b-app.cern.ch": "y"}


needs_openstack = pytest.mark.skipif(
    not OPENSTACK.exists(), reason="the openstack CLI is not installed next to this Python"
)


def openstack_cli(cloud: str, *args: str) -> str:
    done = subprocess.run(
        [str(OPENSTACK), "--os-cloud", cloud, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_openstack
def test_openstack_server_list(simulator: Simulator, sim_clients: ClientConfig, cluster: list[str]) -> None:
    listed_json = openstack_cli(sim_clients.cloud_name, "server", "list", "--long", "-f", "json")

    servers = {server["Name"]: server for server in json.loads(listed_json)}
    assert set(servers) == set(cluster)
    listed = servers[cluster[0]]
    assert listed["Status"] == "ACTIVE"
    assert listed["Image Name"] == "ALMA9 - x86_64"
    assert listed["Properties"]["landb-mainuser"] == "kubernetes-admins"


@needs_kubectl
def test_kubectl_cordon_get_pods_and_describe_node(
    simulator: Simulator, sim_clients: ClientConfig, cluster: list[str]
) -> None:
    simulator.state.add_pod("ingress", "controller-0", node=cluster[0], labels={"app": "nginx"})
    simulator.state.add_pod("ingress", "controller-1", node=cluster[1], labels={"app": "nginx"}, ready=False)

    kubectl("cordon", cluster[0])
    node = simulator.state.node(cluster[0])
    assert node is not None and node["spec"]["unschedulable"] is True
    assert kubectl("get", "node", cluster[0]).splitlines()[1].split()[1] == "Ready,SchedulingDisabled"

    rows = [line.split() for line in kubectl("get", "pods", "-n", "ingress", "-o", "wide").splitlines()]
    assert rows[0][:3] == ["NAME", "READY", "STATUS"]
    assert [(row[0], row[1], row[-1]) for row in rows[1:]] == [
        ("controller-0", "1/1", cluster[0]),
        ("controller-1", "0/1", cluster[1]),
    ]
    assert "controller-0" in kubectl("describe", "node", cluster[0])


@needs_openstack
def test_openstack_server_lock_and_unlock(
    simulator: Simulator, sim_clients: ClientConfig, cluster: list[str]
) -> None:
    """What an operator types before maintenance: the lock shows in ``server show`` and stops writes."""
    server_id = next(server.id for server in simulator.state.servers() if server.name == cluster[0])
    cloud = sim_clients.cloud_name
    openstack_cli(cloud, "server", "lock", "--reason", "kernel upgrade", cluster[0])
    shown = json.loads(openstack_cli(cloud, "server", "show", cluster[0], "-f", "json"))
    assert (shown["locked"], shown["locked_reason"]) == (True, "kernel upgrade")
    info = simulator.state.server(server_id)
    assert (info.locked, info.locked_reason) == (True, "kernel upgrade")

    openstack_cli(cloud, "server", "unlock", cluster[0])
    assert simulator.state.server(server_id).locked is False


@needs_openstack
def test_openstack_loadbalancer_list_show_set_and_unset_tags(
    simulator: Simulator, sim_clients: ClientConfig
) -> None:
    """CERN's documented way to name a load balancer, typed as an operator does (python-octaviaclient)."""
    octavia = simulator.state.octavia
    lb_id = octavia.add_load_balancer("kube-ingress-svc", "188.184.40.1", tags=["owner=team-a"])
    cloud = sim_clients.cloud_name

    listed = json.loads(openstack_cli(cloud, "loadbalancer", "list", "-f", "json"))
    assert [(lb["id"], lb["vip_address"], lb["provisioning_status"]) for lb in listed] == [
        (lb_id, "188.184.40.1", "ACTIVE")
    ]
    openstack_cli(cloud, "loadbalancer", "set", "--tag", "landb-alias=myapp", "kube-ingress-svc")
    shown = json.loads(openstack_cli(cloud, "loadbalancer", "show", "kube-ingress-svc", "-f", "json"))
    assert shown["tags"] == ["landb-alias=myapp", "owner=team-a"]
    assert shown["vip_port_id"] == octavia.load_balancer(lb_id).vip_port_id
    tagged = json.loads(
        openstack_cli(cloud, "loadbalancer", "list", "--tags", "landb-alias=myapp", "-f", "json")
    )
    assert [lb["id"] for lb in tagged] == [lb_id]

    openstack_cli(cloud, "loadbalancer", "unset", "--tag", "landb-alias=myapp", lb_id)
    assert octavia.load_balancer(lb_id).tags == ("owner=team-a",)
    assert [change.tags for change in octavia.tag_history(lb_id)] == [
        ("owner=team-a",),
        ("landb-alias=myapp", "owner=team-a"),
        ("owner=team-a",),
    ]
