"""One team cannot hurt another (issue 36): two namespaces of one cluster against the simulated Nova,
Octavia and Kubernetes, through the real clients and external-dns' planner (provider/ownership/tenancy.py,
provider/records/screening.py, provider/apply/foreign.py).

- a name keeps the resource its claim names, whatever the order two resources ask in; the other hears who
  owns it;
- a target of another namespace's load balancer never moves an owned name, however external-dns merged
  the two objects' targets; ApplyChanges writes no tag on it either;
- past the caps, a resource loses its excess with one event, and the other namespace's name still lands.
"""

from __future__ import annotations

from typing import Any

import pytest

from landb_simulator import Simulator
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.provider import ApplyError
from support.metrics import counted
from support.provider_cluster import Cluster

NODE_IPS = ("192.0.2.80",)
VIP_B = "188.184.30.10"
A_SITE = "ingress/team-a/site"
B_GRAB = "ingress/team-b/grab"


def asking(resource: str, name: str, *targets: str) -> Endpoint:
    return Endpoint(name, "A", targets=targets or NODE_IPS, labels=(("resource", resource),))


def carrying(cluster: Cluster, label: str) -> set[str]:
    return {node for node in cluster.nodes if label in cluster.aliases(node)}


def claim_of(cluster: Cluster, name: str) -> str:
    [claim] = [e.targets[0] for e in cluster.provider.records() if e.dns_name == f"a-{name}"]
    return claim


def refusals(sim: Simulator, namespace: str) -> dict[str, str]:
    """Object (``Kind/name``) -> the note of its Refused event."""
    return {
        f"{e['regarding']['kind']}/{e['regarding']['name']}": e["note"]
        for e in sim.state.events(namespace)
        if e["reason"] == "Refused"
    }


@pytest.fixture
def cluster(make_cluster: Any, simulator: Simulator) -> Cluster:
    simulator.state.add_ingress("team-a", "site", ["site.cern.ch"])
    simulator.state.add_ingress("team-b", "grab", ["site.cern.ch"])
    simulator.state.add_service("team-b", "shop")
    simulator.state.octavia.add_load_balancer("kube_service_cluster_team-b_shop", VIP_B)
    made: Cluster = make_cluster(events=True, max_names_per_resource=20, max_names_per_namespace=30)
    made.desired = [asking(A_SITE, "site.cern.ch")]
    made.settle()
    assert carrying(made, "site") == set(made.nodes[:3])
    return made


@pytest.mark.parametrize("b_first", [False, True])
def test_a_name_keeps_the_resource_that_owns_it_whatever_the_order_and_the_other_hears_who(
    cluster: Cluster, b_first: bool
) -> None:
    askers = [asking(A_SITE, "site.cern.ch"), asking(B_GRAB, "site.cern.ch", VIP_B)]
    cluster.desired = askers[::-1] if b_first else askers

    assert cluster.loop() == Changes()

    assert carrying(cluster, "site") == set(cluster.nodes[:3])
    assert f"external-dns/resource={A_SITE}" in claim_of(cluster, "site.cern.ch")
    note = cluster.eventually(lambda: refusals(cluster.sim, "team-b").get("Ingress/grab"), what="Refused")
    assert note.startswith(f"site.cern.ch not published: {A_SITE} owns it")
    assert counted(cluster.metrics, "dropped_endpoints_total", reason="owned_elsewhere") == 1


@pytest.mark.parametrize("merged_as", [A_SITE, B_GRAB])
def test_another_namespaces_load_balancer_merged_into_an_owned_name_never_moves_it(
    cluster: Cluster, merged_as: str
) -> None:
    """external-dns' ingress source merges the targets of two Ingresses of one host into one endpoint
    labelled with whichever came first: either way the VIP of team-b's load balancer is refused."""
    cluster.desired = [asking(merged_as, "site.cern.ch", *NODE_IPS, VIP_B)]

    for _ in range(2):
        assert cluster.loop() == Changes()

    assert carrying(cluster, "site") == set(cluster.nodes[:3])
    [lb] = cluster.sim.state.octavia.load_balancers()
    assert lb.tags == ()
    told = "Ingress/grab" if merged_as == B_GRAB else "Service/shop"
    note = cluster.eventually(lambda: refusals(cluster.sim, "team-b").get(told), what="Refused on team-b")
    assert (
        f"load balancer kube_service_cluster_team-b_shop, namespace team-b's: the name is owned by {A_SITE}"
        in note
    )
    assert counted(cluster.metrics, "dropped_endpoints_total", reason="foreign_load_balancer") >= 1
    events = cluster.adapters.events
    assert events is not None
    cluster.eventually(events.idle, what="every event written")
    assert refusals(cluster.sim, "team-a") == {}  # its name stayed as it was: nothing to tell its owner


def test_a_name_of_nobody_goes_to_a_load_balancer_of_its_own_namespace_only(cluster: Cluster) -> None:
    cluster.desired = [
        asking(A_SITE, "site.cern.ch"),
        asking(B_GRAB, "grab.cern.ch", VIP_B),
        asking(A_SITE, "sneak.cern.ch", VIP_B),
    ]

    cluster.settle()

    [lb] = cluster.sim.state.octavia.load_balancers()
    assert lb.tags == ("landb-alias=grab",)
    assert carrying(cluster, "sneak") == set()  # its only target refused: nothing published
    note = cluster.eventually(lambda: refusals(cluster.sim, "team-a").get("Ingress/site"), what="Refused")
    assert note.startswith("sneak.cern.ch not published: target 188.184.30.10 is load balancer")


def test_apply_changes_writes_no_tag_on_another_namespaces_load_balancer(cluster: Cluster) -> None:
    sneak = asking(A_SITE, "sneak.cern.ch", VIP_B)
    claim = Endpoint(
        "a-sneak.cern.ch",
        "TXT",
        (f'"heritage=external-dns,external-dns/owner=test-cluster,external-dns/resource={A_SITE}"',),
        labels=(("ownedRecord", "sneak.cern.ch"),),
    )

    with pytest.raises(ApplyError, match="another namespace's"):
        cluster.provider.apply_changes(Changes(create=(sneak, claim)))

    [lb] = cluster.sim.state.octavia.load_balancers()
    assert lb.tags == ()
    assert not [c for c in cluster.sim.state.api_calls("octavia") if c.method == "PUT"]
    assert counted(cluster.metrics, "refused_changes_total", reason="foreign_load_balancer") == 1


def test_past_the_caps_the_largest_requester_loses_its_excess_with_one_event_and_others_still_land(
    cluster: Cluster,
) -> None:
    many = [asking(B_GRAB, f"b{i:03d}.cern.ch") for i in range(300)]
    other = [asking("ingress/team-b/other", f"o{i:03d}.cern.ch") for i in range(15)]
    cluster.desired = [*many, *other, asking(A_SITE, "site.cern.ch"), asking(A_SITE, "new.cern.ch")]

    cluster.settle()

    assert carrying(cluster, "new") == set(cluster.nodes[:3])
    published = {e.dns_name for e in cluster.provider.records() if e.record_type == "A"}
    assert len({n for n in published if n.startswith("b")}) == 15  # 20 per resource, then 30 per namespace
    assert len({n for n in published if n.startswith("o")}) == 15
    assert counted(cluster.metrics, "dropped_endpoints_total", reason="namespace_cap") > 0
    note = cluster.eventually(lambda: refusals(cluster.sim, "team-b").get("Ingress/grab"), what="Refused")
    assert "asks for 300 names, 285 over the cap of 30 per namespace (LANDB_MAX_NAMES_PER_NAMESPACE)" in note
    assert len([e for e in cluster.sim.state.events("team-b") if e["reason"] == "Refused"]) == 1
