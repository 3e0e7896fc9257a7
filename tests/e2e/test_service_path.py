"""A LoadBalancer Service and an Ingress, end to end: the real external-dns with ``--source=service
--source=ingress`` on a real kube-apiserver, ``landb-webhook serve`` against the simulated Nova and Octavia.

At CERN a LoadBalancer Service is served by an Octavia load balancer: its name must be a
``landb-alias=<name>`` tag on that load balancer, never on the ingress nodes (which would send its traffic
to the ingress controller). The Service's address comes from its ``status.loadBalancer`` (written here
through the status subresource, as the cloud controller manager does).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Result
from ingress_world import ServicesWorld

from landb_simulator import Simulator
from support.homes import watching
from support.kube_apiserver import KubeApiServer

pytestmark = pytest.mark.e2e

VIP = "188.184.30.10"
OTHER_TAG = "kube_service_landb-e2e_apps_shop"


class ServiceWorld(ServicesWorld):
    """The ingress world plus LoadBalancer Services and the project's Octavia load balancer."""

    def __init__(
        self, server: KubeApiServer, simulator: Simulator, external_dns: Path, workdir: Path
    ) -> None:
        super().__init__(server, simulator, external_dns, workdir)
        # named as the cloud controller manager names it: for a Service of the applications' namespace
        name = f"kube_service_landb-e2e_{self.apps_namespace}_shop"
        self.lb = self.state.octavia.add_load_balancer(name, VIP, tags=[OTHER_TAG])

    def delete_service(self, name: str) -> None:
        self.core.delete_namespaced_service(name, self.apps_namespace)

    def run(self) -> Result:
        result = super().run()
        log = result.log_text
        assert result.returncode == 0, result.describe()
        assert "level=error" not in log and "level=fatal" not in log, result.describe()
        return result

    def tags(self) -> tuple[str, ...]:
        return self.state.octavia.load_balancer(self.lb).tags

    def diagnostics(self) -> list[tuple[str, str]]:
        return [*super().diagnostics(), ("load balancer tags", repr(self.tags()))]


@pytest.fixture
def world(kube_apiserver: KubeApiServer, external_dns_binary: Path, tmp_path: Path) -> Iterator[ServiceWorld]:
    with Simulator() as simulator:
        running = ServiceWorld(kube_apiserver, simulator, external_dns_binary, tmp_path)
        try:
            yield running
        finally:
            running.close()


def test_a_service_name_lands_as_a_tag_and_an_ingress_name_on_the_ingress_nodes_and_both_settle(
    world: ServiceWorld,
) -> None:
    world.add_service("shop", "shop.cern.ch", VIP)
    world.add_ingress("site", "site.cern.ch")
    world.publish_status("site", world.ingress_node_ips())

    first = world.run()

    assert first.desired_changes is not None, first.describe()
    assert {e["dnsName"] for e in first.desired_changes["create"]} == {
        "shop.cern.ch",
        "a-shop.cern.ch",
        "site.cern.ch",
        "a-site.cern.ch",
    }
    assert world.tags() == (OTHER_TAG, "landb-alias=shop")
    assert world.servers_carrying("shop") == set()
    assert world.servers_carrying("site") == world.ingress_server_ids()
    claims = world.ownership_claims()
    assert "external-dns/resource=service/" in claims["a-shop.cern.ch"]
    assert "external-dns/resource=ingress/" in claims["a-site.cern.ch"]

    history = len(world.state.octavia.tag_history(world.lb))
    writes = world.metadata_write_count()
    second = world.run()
    assert second.up_to_date, second.describe()
    assert len(world.state.octavia.tag_history(world.lb)) == history
    assert world.metadata_write_count() == writes


def test_a_name_moved_between_an_ingress_and_a_service_never_leaves_dns(world: ServiceWorld) -> None:
    world.add_ingress("moving", "moving.cern.ch")
    world.publish_status("moving", world.ingress_node_ips())
    world.run()
    assert world.servers_carrying("moving") == world.ingress_server_ids()
    with watching(world.state, "moving") as homes:
        world.delete_ingress("moving")
        world.add_service("moving", "moving.cern.ch", VIP)
        world.run()
        assert world.tags() == (OTHER_TAG, "landb-alias=moving")
        assert world.servers_carrying("moving") == set()
        assert world.run().up_to_date

        world.delete_service("moving")
        world.add_ingress("moving", "moving.cern.ch")
        world.publish_status("moving", world.ingress_node_ips())
        world.run()
        assert world.tags() == (OTHER_TAG,)
        assert world.servers_carrying("moving") == world.ingress_server_ids()
        assert world.run().up_to_date

    homes.assert_never_homeless()  # the union of tags and metadata always held it
    assert homes.tag_writes() == [(world.lb, True), (world.lb, False)]


def test_a_deleted_service_takes_its_tag_and_claim_with_it(world: ServiceWorld) -> None:
    world.add_service("shop", "shop.cern.ch", VIP)
    world.add_service("cart", "cart.cern.ch", VIP)
    world.run()
    assert world.tags() == (OTHER_TAG, "landb-alias=cart", "landb-alias=shop")

    world.delete_service("shop")
    removal = world.run()

    assert removal.desired_changes is not None and ("shop.cern.ch", "A") in {
        (e["dnsName"], e["recordType"]) for e in removal.desired_changes["delete"]
    }, removal.describe()
    assert world.tags() == (OTHER_TAG, "landb-alias=cart")
    assert set(world.ownership_claims()) == {"a-cart.cern.ch"}
    assert world.run().up_to_date
