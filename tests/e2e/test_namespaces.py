"""One team cannot hurt another (issue 36), for real: two namespaces of a real kube-apiserver, the real
external-dns (``--source=ingress``, the README's flags, the chart's account), ``landb-webhook serve`` with
its events on, Nova and Octavia simulated.

- team-b's Ingress of 10,001 names used to make every AdjustEndpoints a 503 (over
  LANDB_MAX_REQUEST_ENDPOINTS), and external-dns abandoned every loop: team-a's new name was never
  published. Now the request is cut, team-b's excess dropped, and team-b's Ingress says why.
- team-b's Ingress with team-a's host and the VIP of team-b's load balancer as its target: external-dns
  merges both Ingresses' targets into one endpoint (labelled with whichever it listed first), and the
  rule for mixed targets moved team-a's name onto that load balancer. Now the name stays on the ingress
  nodes, whichever object was created first, and team-b hears why.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from ingress_world import HOSTNAME_ANNOTATION, TARGET_ANNOTATION, IngressWorld
from kubernetes import client

from landb_simulator import Simulator
from support.kube_apiserver import KubeApiServer
from support.waiting import eventually

pytestmark = pytest.mark.e2e

VIP = "188.184.30.10"
CLUSTER = "landb-e2e"
EVENT_DEADLINE = 60.0
"""Seconds for an event to be written: the emitter writes at once, far below its burst."""


class TwoTeams(IngressWorld):
    """The ingress world with two team namespaces, and team-b's LoadBalancer Service with its Octavia load
    balancer, named as the cloud controller manager names it."""

    def __init__(
        self, server: KubeApiServer, simulator: Simulator, external_dns: Path, workdir: Path
    ) -> None:
        super().__init__(server, simulator, external_dns, workdir, {"LANDB_EVENTS": "true"})
        suffix = uuid.uuid4().hex[:8]
        self.team_a, self.team_b = f"team-a-{suffix}", f"team-b-{suffix}"
        for namespace in (self.team_a, self.team_b):
            server.create_namespace(namespace)
        self.core = client.CoreV1Api(server.admin)
        self.lb = self.state.octavia.add_load_balancer(f"kube_service_{CLUSTER}_{self.team_b}_shop", VIP)
        self.core.create_namespaced_service(
            self.team_b,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "shop"},
                "spec": {"type": "LoadBalancer", "selector": {"app": "shop"}, "ports": [{"port": 80}]},
            },
        )
        self.core.patch_namespaced_service_status(
            "shop", self.team_b, {"status": {"loadBalancer": {"ingress": [{"ip": VIP}]}}}
        )

    def close(self) -> None:
        for namespace in (self.team_a, self.team_b):
            self.networking.delete_collection_namespaced_ingress(namespace)
        self.core.delete_namespaced_service("shop", self.team_b)
        super().close()

    def ingress(
        self, namespace: str, name: str, host: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """An Ingress for the cluster's nginx class, its status published (the ingress nodes' addresses)."""
        self.add_ingress(name, host, annotations, namespace=namespace)
        status = {"status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in self.ingress_node_ips()]}}}
        self.networking.patch_namespaced_ingress_status(name, namespace, status)

    def refusals(self, namespace: str) -> dict[str, str]:
        """``Kind/name`` -> the note of the webhook's Refused event on it."""
        events = client.EventsV1Api(self.server.admin).list_namespaced_event(namespace).items
        return {
            f"{e.regarding.kind}/{e.regarding.name}": e.note
            for e in events
            if e.reason == "Refused" and e.reporting_controller == "landb-webhook"
        }

    def tags(self) -> tuple[str, ...]:
        return self.state.octavia.load_balancer(self.lb).tags

    def diagnostics(self) -> list[tuple[str, str]]:
        return [*super().diagnostics(), ("load balancer tags", repr(self.tags()))]


@pytest.fixture
def world(kube_apiserver: KubeApiServer, external_dns_binary: Path, tmp_path: Path) -> Iterator[TwoTeams]:
    with Simulator() as simulator:
        running = TwoTeams(kube_apiserver, simulator, external_dns_binary, tmp_path)
        try:
            yield running
        finally:
            running.close()


def test_an_ingress_of_10001_names_in_team_b_does_not_stop_team_a_s_new_name(world: TwoTeams) -> None:
    hosts = ",".join(f"b{index:05d}.cern.ch" for index in range(10_001))
    world.ingress(world.team_b, "grab", "grab.cern.ch", {HOSTNAME_ANNOTATION: hosts})
    world.ingress(world.team_a, "site", "new-a.cern.ch")

    run = world.run()

    assert run.returncode == 0, run.describe()
    assert world.servers_carrying("new-a") == world.ingress_server_ids()
    grabbed = {label for tokens in world.aliases().values() for label in tokens if label.startswith("b")}
    assert len(grabbed) == 200  # LANDB_MAX_NAMES_PER_RESOURCE, the first in name order (none owned yet)
    note = eventually(
        lambda: world.refusals(world.team_b).get("Ingress/grab"),
        what="the Refused event on team-b's Ingress",
        timeout=EVENT_DEADLINE,
        every=0.2,
    )
    # 10,002 names and team-a's one are over LANDB_MAX_REQUEST_ENDPOINTS: the request was cut by 3 (the
    # largest requester's), then team-b's Ingress capped
    assert f"ingress/{world.team_b}/grab asks for 9999 names, 9799 over the cap of 200 per resource" in note
    assert "(LANDB_MAX_NAMES_PER_RESOURCE)" in note
    assert world.refusals(world.team_a) == {}
    assert world.run().up_to_date


@pytest.mark.parametrize("team_b_first", [False, True])
def test_team_b_aiming_its_load_balancer_at_team_a_s_name_never_moves_it(
    world: TwoTeams, team_b_first: bool
) -> None:
    """team-a's name is published (and claimed) first; then team-b's Ingress asks for it with its own
    load balancer's VIP as target. Whichever object external-dns lists first (``team_b_first``: team-b's
    Ingress created before team-a's, in a namespace sorting after), the name stays on the ingress nodes."""
    grab = {TARGET_ANNOTATION: VIP}
    if team_b_first:  # team-b's object exists first; team-a's name is claimed by the first loop all the same
        world.ingress(world.team_a, "site", "site.cern.ch")
        world.run()
        world.networking.delete_namespaced_ingress("site", world.team_a)
        world.ingress(world.team_b, "grab", "site.cern.ch", grab)
        world.ingress(world.team_a, "site", "site.cern.ch")
    else:
        world.ingress(world.team_a, "site", "site.cern.ch")
        world.run()
        world.ingress(world.team_b, "grab", "site.cern.ch", grab)
    assert world.servers_carrying("site") == world.ingress_server_ids()

    for _ in range(3):  # external-dns lists the two Ingresses in an order of its own each run
        run = world.run()
        assert run.returncode == 0, run.describe()
        assert world.servers_carrying("site") == world.ingress_server_ids()
        assert world.tags() == ()

    assert f"external-dns/resource=ingress/{world.team_a}/site" in world.ownership_claims()["a-site.cern.ch"]
    notes = eventually(
        lambda: world.refusals(world.team_b),
        what="a Refused event on a team-b object",
        timeout=EVENT_DEADLINE,
        every=0.2,
    )
    assert any(f"the name is owned by ingress/{world.team_a}/site" in note for note in notes.values()), notes
    assert world.refusals(world.team_a) == {}  # told before team-b's objects, had it been told
    assert world.run().up_to_date
