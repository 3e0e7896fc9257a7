"""Off ingress-nginx, for real: Gateway API routes on a real kube-apiserver with the Gateway API v1.6.1
standard CRDs, the real external-dns v0.22 with ``--source=ingress --source=service
--source=gateway-httproute --source=gateway-grpcroute``, ``landb-webhook serve`` with its events and DNS
watch on, the simulator's Nova, Octavia and LanDB DNS.

The test is the Gateway controller (Envoy Gateway, say): it writes what external-dns reads, each Gateway's
``status.addresses`` (the ingress nodes' for a data plane on them, a load balancer's VIP behind Octavia)
and each route's ``status.parents[]`` Accepted. An application team's user, bound to the ``view`` role of
its namespace and to reading routes, runs ``kubectl describe httproute``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from e2e_support import MEDIA_TYPE, http_get, server_id_of
from kubernetes import client
from test_external_dns_name_events import EVENTS_DEADLINE, VIP, EventsWorld

from landb_simulator import Simulator
from landb_simulator.kube_gateways import (
    API_VERSION,
    GROUP,
    GRPC_ROUTES,
    HTTP_ROUTES,
    accepted_parents,
    gateway_class_manifest,
    gateway_class_status,
    gateway_manifest,
    gateway_status,
    route_manifest,
)
from support.kube_apiserver import KubeApiServer
from support.waiting import eventually

pytestmark = pytest.mark.e2e

SOURCES = ("ingress", "service", "gateway-httproute", "gateway-grpcroute")
ROUTE_READER = {
    "apiGroups": [GROUP],
    "resources": [HTTP_ROUTES, GRPC_ROUTES],
    "verbs": ["get", "list", "watch"],
}
"""What an application team reads of its routes (Gateway API ships no aggregation to ``view``)."""
ENVOY_PROXY = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
    "gateway.envoyproxy.io/owning-gateway-name": "nodes",
}
"""The labels Envoy Gateway puts on its proxy pods (the data plane of a Gateway)."""
ENVOY_NAMESPACE = "envoy-gateway-system"


class RoutesWorld(EventsWorld):
    """The events world with the gateway sources, and the test as the Gateway controller."""

    def __init__(
        self,
        server: KubeApiServer,
        simulator: Simulator,
        external_dns: Path,
        workdir: Path,
        webhook_settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            server,
            simulator,
            external_dns,
            workdir,
            sources=SOURCES,
            viewer_rules=[ROUTE_READER],
            webhook_settings=webhook_settings,
        )
        self.custom = client.CustomObjectsApi(server.admin)
        self.gateway_class = f"envoy-{self.apps_namespace}"  # cluster-wide: one per test
        created = self.custom.create_cluster_custom_object(
            GROUP,
            "v1",
            "gatewayclasses",
            self._typed("GatewayClass", gateway_class_manifest(self.gateway_class)),
        )
        self.custom.patch_cluster_custom_object_status(
            GROUP, "v1", "gatewayclasses", self.gateway_class, {"status": gateway_class_status(created)}
        )

    def close(self) -> None:
        # Routes and Gateways are read cluster-wide by every external-dns with these sources: none stays.
        for plural in (HTTP_ROUTES, GRPC_ROUTES, "gateways"):
            for item in self.custom.list_namespaced_custom_object(GROUP, "v1", self.apps_namespace, plural)[
                "items"
            ]:
                self._delete(plural, item["metadata"]["name"])
        self.custom.delete_cluster_custom_object(GROUP, "v1", "gatewayclasses", self.gateway_class)
        super().close()

    @staticmethod
    def _typed(kind: str, manifest: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": kind, **manifest}

    # -- as the application team ---------------------------------------------------------------------

    def add_route(self, plural: str, name: str, host: str, gateway: str) -> dict[str, Any]:
        """An HTTPRoute or GRPCRoute for ``host`` on ``gateway``, then accepted by the controller."""
        kind = "HTTPRoute" if plural == HTTP_ROUTES else "GRPCRoute"
        created = self.custom.create_namespaced_custom_object(
            GROUP, "v1", self.apps_namespace, plural, self._typed(kind, route_manifest(name, [host], gateway))
        )
        self.custom.patch_namespaced_custom_object_status(
            GROUP, "v1", self.apps_namespace, plural, name, {"status": accepted_parents(created)}
        )
        return created

    def _delete(self, plural: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, "v1", self.apps_namespace, plural, name)

    # -- as the Gateway controller -------------------------------------------------------------------

    def add_gateway(self, name: str, addresses: list[str]) -> None:
        """A Gateway of this world's class, and the status the controller writes once it listens."""
        manifest = gateway_manifest(name, self.gateway_class)
        created = self.custom.create_namespaced_custom_object(
            GROUP, "v1", self.apps_namespace, "gateways", self._typed("Gateway", manifest)
        )
        self.custom.patch_namespaced_custom_object_status(
            GROUP, "v1", self.apps_namespace, "gateways", name, {"status": gateway_status(created, addresses)}
        )

    # -- observing -----------------------------------------------------------------------------------

    def load_balancer_tags(self) -> list[str]:
        return [tag for lb in self.state.octavia.load_balancers() for tag in lb.tags]

    def events_settled(self) -> None:
        eventually(
            lambda: self.events_waiting() == 0, what="the webhook's events written", timeout=EVENTS_DEADLINE
        )

    def events_on(self, kind: str, uid: str) -> list[str]:
        """The reasons of the webhook's events regarding the object with ``uid``, oldest first."""
        events = client.EventsV1Api(self.server.admin).list_namespaced_event(self.apps_namespace).items
        mine = [e for e in events if e.reporting_controller == "landb-webhook" and e.regarding.uid == uid]
        assert all(e.regarding.kind == kind for e in mine)
        return [e.reason for e in sorted(mine, key=lambda e: e.event_time)]


@pytest.fixture
def make_world(
    gateway_api: KubeApiServer, external_dns_binary: Path, tmp_path: Path
) -> Iterator[Callable[..., RoutesWorld]]:
    """``make_world(webhook_settings)``: a fresh world (LanDB's 15-minute period: nothing is published unless
    the test syncs), closed after the test."""
    with contextlib.ExitStack() as stack:

        def make(webhook_settings: Mapping[str, str] | None = None) -> RoutesWorld:
            simulator = stack.enter_context(Simulator())
            running = RoutesWorld(gateway_api, simulator, external_dns_binary, tmp_path, webhook_settings)
            stack.callback(running.close)
            return running

        yield make


@pytest.fixture
def world(make_world: Callable[..., RoutesWorld]) -> RoutesWorld:
    return make_world()


def test_routes_are_published_like_ingresses_and_their_owners_read_what_happened(world: RoutesWorld) -> None:
    world.add_gateway("nodes", world.ingress_node_ips())  # a data plane on the ingress nodes
    world.add_gateway("lb", [VIP])  # a data plane behind an Octavia load balancer
    myapp = world.add_route(HTTP_ROUTES, "myapp", "myapp.cern.ch", "nodes")
    world.add_route(GRPC_ROUTES, "api", "api.cern.ch", "nodes")
    world.add_route(HTTP_ROUTES, "shop", "shop.cern.ch", "lb")
    world.add_route(HTTP_ROUTES, "outside", "myapp.example.org", "nodes")

    first = world.run()
    assert first.returncode == 0, first.describe()
    nodes = world.ingress_server_ids()
    assert world.servers_carrying("myapp") == world.servers_carrying("api") == nodes
    assert world.servers_carrying("shop") == set()  # the load balancer's name: its tag only
    assert "landb-alias=shop" in world.load_balancer_tags()
    claims = world.ownership_claims()
    assert "external-dns/resource=httproute/" in claims["a-myapp.cern.ch"]
    assert "external-dns/resource=grpcroute/" in claims["a-api.cern.ch"]

    world.describe_shows("httproute", "myapp", "Written", "myapp.cern.ch written on 3 ingress nodes")
    world.describe_shows("grpcroute", "api", "Written", "api.cern.ch written on 3 ingress nodes")
    world.describe_shows("httproute", "shop", "Written", "shop.cern.ch written on its load balancer")
    outside = world.describe_shows("httproute", "outside", "Refused", "change the host")
    assert "Warning" in outside

    assert world.run().up_to_date, world.results[-1].describe()  # its Records shows the watch the names
    world.watcher_says("myapp.cern.ch", "pending")
    world.sim.dns.sync()  # LanDB publishes
    on_air = world.describe_shows(
        "httproute", "myapp", "OnTheAir", "myapp.cern.ch resolves to its 3 ingress nodes"
    )
    assert world.events_on("HTTPRoute", myapp["metadata"]["uid"])[:2] == ["Written", "OnTheAir"]

    world.events_settled()
    before, writes = world.event_names(), world.metadata_write_count()
    again = world.run()
    assert again.up_to_date, again.describe()
    world.events_settled()
    assert world.metadata_write_count() == writes
    assert {n for n in world.event_names() if n.startswith("landb-webhook/")} == {
        n for n in before if n.startswith("landb-webhook/")
    }
    print(f"\n$ kubectl describe httproute myapp\n{on_air}\n$ kubectl describe httproute outside\n{outside}")


def test_a_name_moved_from_its_ingress_to_an_httproute_never_leaves_the_air(world: RoutesWorld) -> None:
    """The runbook's order: both sources on; the route created beside the Ingress; the Ingress deleted.
    No write touches the name's tokens, and its later events go on the route, none on the Ingress."""
    world.add_gateway("nodes", world.ingress_node_ips())
    world.add_ingress("moved", "moved.cern.ch")
    world.publish_status("moved", world.ingress_node_ips())
    ingress = world.networking.read_namespaced_ingress("moved", world.apps_namespace)
    assert world.run().returncode == 0, world.results[-1].describe()
    world.describe_shows("ingress", "moved", "Written", "moved.cern.ch written on 3 ingress nodes")
    tokens = world.aliases()
    writes = world.metadata_write_count()

    route = world.add_route(HTTP_ROUTES, "moved", "moved.cern.ch", "nodes")
    beside = world.run()
    assert beside.up_to_date, beside.describe()  # external-dns keeps the Ingress's endpoint
    assert "external-dns/resource=ingress/" in world.ownership_claims()["a-moved.cern.ch"]
    world.delete_ingress("moved")
    after = world.run()
    assert after.up_to_date, after.describe()  # the route's endpoint is the same: nothing to change
    assert world.metadata_write_count() == writes and world.aliases() == tokens
    assert "external-dns/resource=ingress/" in world.ownership_claims()["a-moved.cern.ch"]  # not rewritten

    world.watcher_says("moved.cern.ch", "pending")
    world.sim.dns.sync()  # LanDB publishes the name: the event of that goes to the object asking now
    described = world.describe_shows(
        "httproute", "moved", "OnTheAir", "moved.cern.ch resolves to its 3 ingress"
    )
    world.events_settled()
    assert world.events_on("HTTPRoute", route["metadata"]["uid"]) == ["OnTheAir"]
    assert world.events_on("Ingress", ingress.metadata.uid) == ["Written"]
    migration_writes = [c for c in world.state.metadata_history() if c.method != "direct"][writes:]
    runs = [
        r.desired_changes if not r.up_to_date else "All records are already up to date" for r in world.results
    ]
    print(
        f"\nmetadata writes from the route's creation to the OnTheAir event: {migration_writes}"
        f"\nexternal-dns runs, in order: {runs}\n$ kubectl describe httproute moved\n{described}"
    )


@pytest.fixture
def envoy_world(make_world: Callable[..., RoutesWorld]) -> RoutesWorld:
    selector = ",".join(f"{key}={value}" for key, value in ENVOY_PROXY.items())
    return make_world(
        {"LANDB_INGRESS_POD_SELECTOR": selector, "LANDB_INGRESS_POD_NAMESPACE": ENVOY_NAMESPACE}
    )


def out_of_carrying(world: RoutesWorld, count: int) -> bool:
    """The webhook, asked for its records, counts ``count`` ingress nodes out of carrying."""
    http_get(world.webhook.api_port, "/records", {"Accept": MEDIA_TYPE})
    _, _, body = http_get(world.webhook.health_port, "/metrics")
    return f'landb_webhook_ingress_nodes_unhealthy{{state="out"}} {float(count)}' in body.decode()


def test_only_ingress_nodes_running_a_ready_gateway_proxy_carry_the_names(envoy_world: RoutesWorld) -> None:
    """LANDB_INGRESS_POD_SELECTOR with Envoy Gateway's proxy pods: a node whose proxy is missing carries
    nothing (an ingress-nginx pod left there does not count), and carries once its proxy is Ready."""
    world = envoy_world
    nodes = client.CoreV1Api(world.server.admin).list_node(label_selector="role=ingress").items
    ids = {n.metadata.name: server_id_of({"spec": {"providerID": n.spec.provider_id}}) for n in nodes}
    first, second, third = sorted(ids)
    for index, node in enumerate((first, second)):
        world.cluster.add_pod(ENVOY_NAMESPACE, f"envoy-nodes-{index}", node=node, labels=ENVOY_PROXY)
    nginx = {"app.kubernetes.io/name": "ingress-nginx"}
    world.cluster.add_pod(ENVOY_NAMESPACE, "ingress-nginx-controller", node=third, labels=nginx)
    world.add_gateway("nodes", world.ingress_node_ips())
    world.add_route(HTTP_ROUTES, "myapp", "myapp.cern.ch", "nodes")
    eventually(
        lambda: out_of_carrying(world, 1), what="the webhook to see the proxies", timeout=30, every=0.2
    )
    assert world.run().returncode == 0, world.results[-1].describe()
    assert world.servers_carrying("myapp") == {ids[first], ids[second]}

    world.cluster.add_pod(ENVOY_NAMESPACE, "envoy-nodes-2", node=third, labels=ENVOY_PROXY)
    eventually(lambda: out_of_carrying(world, 0), what="the third proxy seen", timeout=30, every=0.2)
    assert world.run().returncode == 0, world.results[-1].describe()
    assert world.servers_carrying("myapp") == set(ids.values())
    assert world.run().up_to_date, world.results[-1].describe()
