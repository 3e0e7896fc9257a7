"""The Gateway API in the simulated Kubernetes API, through the official Python client and kubectl: routes and
Gateways keep their status apart from their spec as on a real API server with the v1.6.1 CRDs, and the
status the simulator's helpers write is what a Gateway controller writes and external-dns reads (a route's
``status.parents[]`` Accepted on its own parentRef, the Gateway's ``status.addresses``)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from landb_simulator import ClientConfig, Simulator
from landb_simulator.kube_gateways import GROUP, HTTP_ROUTES, VERSION, accepted_parents, route_manifest

KUBECTL = shutil.which("kubectl")
REAL_API = pytest.param("kube-apiserver", marks=pytest.mark.needs_tools("kube-tools"))


@pytest.fixture
def custom(sim_clients: ClientConfig) -> Iterator[client.CustomObjectsApi]:
    api_client = config.new_client_from_config(config_file=str(sim_clients.kubeconfig))
    yield client.CustomObjectsApi(api_client)
    api_client.close()


@pytest.fixture(params=["simulator", REAL_API])
def any_custom(request: pytest.FixtureRequest) -> tuple[client.CustomObjectsApi, str]:
    """The simulator's API or a real kube-apiserver's with the Gateway API CRDs, and a namespace."""
    if request.param == "simulator":
        return request.getfixturevalue("custom"), "web"
    server = request.getfixturevalue("gateway_api")
    namespace = f"gw-{uuid.uuid4().hex[:8]}"
    server.create_namespace(namespace)
    return client.CustomObjectsApi(server.admin), namespace


def route_body(name: str, host: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HTTPRoute", **route_manifest(name, [host], "nodes")}


def test_a_route_keeps_its_status_apart_from_its_spec_as_the_api_server_does(
    any_custom: tuple[client.CustomObjectsApi, str],
) -> None:
    routes, namespace = any_custom
    args = (GROUP, VERSION, namespace, HTTP_ROUTES)
    body = route_body("myapp", "myapp.cern.ch")
    created = routes.create_namespaced_custom_object(*args, {**body, "status": accepted_parents(body)})
    assert created["metadata"]["generation"] == 1
    assert not (created.get("status") or {}).get("parents")  # a status sent on create is dropped

    status = accepted_parents(created)
    written = routes.patch_namespaced_custom_object_status(*args, "myapp", {"status": status})
    assert written["status"]["parents"][0]["conditions"][0]["type"] == "Accepted"
    changed = routes.patch_namespaced_custom_object(
        *args, "myapp", {"spec": {"hostnames": ["other.cern.ch"]}, "status": {"parents": []}}
    )
    assert changed["spec"]["hostnames"] == ["other.cern.ch"]
    assert changed["status"]["parents"] == written["status"]["parents"]  # the object's write keeps it


def test_the_helpers_write_what_a_controller_writes_and_external_dns_reads(simulator: Simulator) -> None:
    state = simulator.state
    state.add_gateway_class("envoy")
    state.add_gateway("infra", "nodes", "envoy", ["188.184.1.1", "188.184.1.2"])
    state.add_route("web", "myapp", ["myapp.cern.ch"], ("infra", "nodes"))
    state.add_route("web", "pending", ["pending.cern.ch"], ("infra", "nodes"), accepted=False)

    [gateway] = state.kube.select("gateways", "infra")[0]
    assert [a["value"] for a in gateway["status"]["addresses"]] == ["188.184.1.1", "188.184.1.2"]
    assert {c["type"]: c["status"] for c in gateway["status"]["conditions"]} == {
        "Accepted": "True",
        "Programmed": "True",
    }
    myapp, pending = sorted(state.routes("web"), key=lambda route: route["metadata"]["name"])
    [parent] = myapp["status"]["parents"]
    assert (
        parent["parentRef"]
        == myapp["spec"]["parentRefs"][0]
        == {
            "group": GROUP,
            "kind": "Gateway",
            "name": "nodes",
            "namespace": "infra",
        }
    )
    assert parent["conditions"][0] == {**parent["conditions"][0], "type": "Accepted", "status": "True"}
    assert pending["status"] == {}


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
def test_kubectl_gets_gateways_and_routes(simulator: Simulator, sim_clients: ClientConfig) -> None:
    assert KUBECTL is not None
    simulator.state.add_gateway_class("envoy")
    simulator.state.add_gateway("web", "nodes", "envoy", ["188.184.1.1"])
    simulator.state.add_route("web", "myapp", ["myapp.cern.ch"], ("web", "nodes"))

    def kubectl(*args: str) -> list[list[str]]:
        done = subprocess.run([KUBECTL, *args], capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        return [line.split() for line in done.stdout.splitlines()]

    assert [row[:2] for row in kubectl("get", "httproutes", "-n", "web")] == [
        ["NAME", "HOSTNAMES"],
        ["myapp", "myapp.cern.ch"],
    ]
    assert [row[:4] for row in kubectl("get", "gateways", "-n", "web")][1] == [
        "nodes",
        "envoy",
        "188.184.1.1",
        "True",
    ]
