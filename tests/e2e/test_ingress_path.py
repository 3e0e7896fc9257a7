"""What a CERN cluster does with an Ingress, end to end, on a real Kubernetes API.

CERN clusters run ingress-nginx as a DaemonSet with hostNetwork on the ingress nodes. Whether external-dns
sees a name depends on the Ingress, not on the webhook: the ingress source makes an endpoint only from
the ``external-dns.kubernetes.io/target`` annotation (v0.22.0 ignores the older ``external-dns.alpha.``
name) or from ``status.loadBalancer`` (filled when the controller publishes its status). An Ingress with
neither produces no endpoint at all, so nothing is published for it. Whatever the targets, the webhook
places the name on every ingress node's server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ingress_world import LEGACY_TARGET_ANNOTATION, OWNER_ID, TARGET_ANNOTATION, IngressWorld

from landb_simulator import Simulator
from support.kube_apiserver import KubeApiServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def world(kube_apiserver: KubeApiServer, external_dns_binary: Path, tmp_path: Path) -> Iterator[IngressWorld]:
    with Simulator() as simulator:
        running = IngressWorld(kube_apiserver, simulator, external_dns_binary, tmp_path)
        try:
            yield running
        finally:
            running.close()


def assert_clean(world: IngressWorld) -> None:
    result = world.results[-1]
    assert result.returncode == 0, result.describe()
    assert "level=error" not in result.log_text and "level=fatal" not in result.log_text, result.describe()


def test_names_appear_from_published_status_or_the_target_annotation_and_then_settle(
    world: IngressWorld,
) -> None:
    world.add_ingress("quiet", "quiet.cern.ch")  # status never published (nginx --update-status=false)
    world.add_ingress("published", "published.cern.ch")
    world.publish_status("published", world.ingress_node_ips())
    world.add_ingress("annotated", "annotated.cern.ch", {TARGET_ANNOTATION: "192.0.2.80"})
    world.add_ingress("legacy", "legacy.cern.ch", {LEGACY_TARGET_ANNOTATION: "192.0.2.80"})

    first = world.run()
    assert_clean(world)
    assert first.desired_changes is not None, first.describe()
    created = {(e["dnsName"], e["recordType"]) for e in first.desired_changes["create"]}
    assert {name for name, _ in created} == {
        "published.cern.ch",
        "a-published.cern.ch",
        "annotated.cern.ch",
        "a-annotated.cern.ch",
    }
    ingress_servers = world.ingress_server_ids()
    assert len(ingress_servers) == 3
    assert world.servers_carrying("published") == ingress_servers
    assert world.servers_carrying("annotated") == ingress_servers
    assert world.servers_carrying("quiet") == world.servers_carrying("legacy") == set()
    indices = [index for server in ingress_servers for index in world.aliases()[server]["published"]]
    assert sorted(indices) == [0, 1, 2]  # one --load-N- per ingress node, each its own
    claims = world.ownership_claims()
    assert set(claims) == {"a-published.cern.ch", "a-annotated.cern.ch"}
    assert all(f"external-dns/owner={OWNER_ID}" in value for value in claims.values())

    writes = world.metadata_write_count()
    second = world.run()
    assert_clean(world)
    assert second.up_to_date, second.describe()
    assert world.metadata_write_count() == writes


def test_a_deleted_ingress_loses_its_alias_and_its_claim(world: IngressWorld) -> None:
    world.add_ingress("keep", "keep.cern.ch", {TARGET_ANNOTATION: "192.0.2.80"})
    world.add_ingress("drop", "drop.cern.ch", {TARGET_ANNOTATION: "192.0.2.80"})
    world.run()
    assert_clean(world)
    assert world.servers_carrying("drop") == world.ingress_server_ids()

    world.delete_ingress("drop")
    removal = world.run()
    assert_clean(world)
    assert removal.desired_changes is not None and ("drop.cern.ch", "A") in {
        (e["dnsName"], e["recordType"]) for e in removal.desired_changes["delete"]
    }, removal.describe()
    assert world.servers_carrying("drop") == set()
    assert world.servers_carrying("keep") == world.ingress_server_ids()
    assert set(world.ownership_claims()) == {"a-keep.cern.ch"}
    assert world.run().up_to_date
