"""Names the webhook can see but never write: plain (CNAME) aliases and aliases in frozen forms.

Each loop runs like external-dns v0.22 (landb_simulator.external_dns): registry ``txt`` (owner
``test-cluster``) or ``noop`` (owner None). What matters is that the loop settles -- a loop that asks for a
change the webhook must refuse would 503 forever -- and that nothing is written over what is not ours.
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_simulator.external_dns import plan
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.provider import ApplyError
from support.metrics import counted
from support.provider_cluster import OWNER, Cluster, api_writes

REGISTRIES = {"txt": OWNER, "noop": None}


@pytest.fixture
def new_cluster(make_cluster: Any) -> Any:
    return make_cluster


def loop(cluster: Cluster, registry: str) -> Changes:
    current = cluster.provider.records()
    adjusted = cluster.provider.adjust_endpoints(cluster.desired)
    changes = plan(current, adjusted, owner=REGISTRIES[registry]).changes
    if changes != Changes():
        cluster.provider.apply_changes(changes)
    return changes


def settle(cluster: Cluster, registry: str) -> int:
    """Loops until one changes nothing; how many changed something (at most two)."""
    for changed in range(3):
        if loop(cluster, registry) == Changes():
            return changed
    pytest.fail("the loop did not settle in three rounds")


def set_by_hand(cluster: Cluster, node: str, **keys: str) -> dict[str, str]:
    server = cluster.server_id(node)
    metadata = {**cluster.sim.state.metadata(server), **{k.replace("_", "-"): v for k, v in keys.items()}}
    cluster.sim.state.set_metadata_direct(server, metadata)
    return metadata


def record(cluster: Cluster, name: str, record_type: str) -> Endpoint | None:
    found = [e for e in cluster.provider.records() if e.dns_name == name and e.record_type == record_type]
    assert len(found) <= 1
    return found[0] if found else None


def warnings(logs: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["log_level"] == "warning" and text in e["event"]]


# -- an alias in a frozen form on a node that is not an ingress node -------------------------------


@pytest.mark.parametrize("registry", ["txt", "noop"])
def test_an_alias_frozen_on_a_worker_settles_and_is_said_once(new_cluster: Any, registry: str) -> None:
    """Someone puts app, which we publish, into a worker's landb-alias1: the worker publishes it too and
    nothing we write can change that. external-dns is told so (the worker counts as a carrier): no
    change is asked for, where every loop used to ask to remove it and get a 503."""
    cluster = new_cluster(registry=registry)
    worker = cluster.nodes[3]
    cluster.want("app.cern.ch")
    settle(cluster, registry)
    set_by_hand(cluster, worker, landb_alias1="app--load-7-")
    with capture_logs() as logs:
        for _ in range(3):
            assert loop(cluster, registry) == Changes()

    assert [cluster.aliases(n)["app"] for n in cluster.nodes[:3]] == [0, 1, 2]
    assert cluster.aliases(worker) == {"app": 7}, "a frozen form is never rewritten"
    published = record(cluster, "app.cern.ch", "A")
    assert published is not None and len(published.targets) == 4, "the worker still publishes it"
    said = warnings(logs, "on a non-ingress node")
    assert len(said) == 1 and said[0]["nodes"] == [worker]


def test_withdrawing_a_name_a_worker_holds_frozen_removes_ours_and_leaves_it_to_its_owner(
    new_cluster: Any,
) -> None:
    """With txt the claim goes with our tokens: the worker's alias is someone else's, and left to them."""
    cluster = new_cluster()
    worker = cluster.nodes[3]
    cluster.want("app.cern.ch")
    settle(cluster, "txt")
    set_by_hand(cluster, worker, landb_alias1="app--load-7-")
    cluster.want()
    assert settle(cluster, "txt") == 1
    assert [cluster.aliases(n) for n in cluster.nodes[:3]] == [{}, {}, {}]
    assert cluster.aliases(worker) == {"app": 7}
    assert record(cluster, "a-app.cern.ch", "TXT") is None
    assert plan(cluster.provider.records(), [], owner=OWNER).unowned == ("app.cern.ch",)


# -- plain (CNAME) aliases -----------------------------------------------------------------------------


def test_a_plain_alias_is_reported_as_an_unowned_cname_to_its_host(new_cluster: Any) -> None:
    cluster = new_cluster()
    node = cluster.nodes[0]
    set_by_hand(cluster, node, landb_alias="app")
    set_by_hand(cluster, cluster.nodes[1], landb_alias2=f"{cluster.nodes[1]}-eth1.cern.ch:web")
    assert record(cluster, "app.cern.ch", "CNAME") == Endpoint("app.cern.ch", "CNAME", (f"{node}.cern.ch",))
    assert record(cluster, "web.cern.ch", "CNAME") == Endpoint(
        "web.cern.ch", "CNAME", (f"{cluster.nodes[1]}-eth1.cern.ch",)
    )
    assert record(cluster, "app.cern.ch", "A") is None


@pytest.mark.parametrize("registry", ["txt", "noop"])
@pytest.mark.parametrize("wanted", [True, False])
def test_a_plain_alias_is_left_alone_and_the_loop_settles_at_once(
    new_cluster: Any, registry: str, wanted: bool
) -> None:
    """An Ingress asking for the name changes nothing: it is somebody else's CNAME, and never gains an A
    record beside it. With noop it is not reported (sync would delete it every loop); the wish is dropped."""
    cluster = new_cluster(registry=registry)
    node = cluster.nodes[0]
    before = set_by_hand(cluster, node, landb_alias="app")
    cluster.want(*(["app.cern.ch"] if wanted else []), "web.cern.ch")
    assert settle(cluster, registry) == 1  # web only
    for _ in range(2):
        assert loop(cluster, registry) == Changes()

    assert cluster.sim.state.metadata(cluster.server_id(node))["landb-alias"].split(",")[0] == "app"
    assert set(before.items()) - {("landb-alias", "app")} <= set(
        cluster.sim.state.metadata(cluster.server_id(node)).items()
    )
    assert all("app" not in cluster.aliases(n) for n in cluster.nodes)
    assert record(cluster, "a-app.cern.ch", "TXT") is None, "no claim for a name we do not publish"
    dropped = counted(cluster.metrics, "dropped_endpoints_total", reason="plain_alias")
    assert (dropped > 0) == wanted


def test_a_plain_alias_beside_our_tokens_freezes_that_name_until_a_human_picks_one(new_cluster: Any) -> None:
    """A hand edit left app both as our A records and as a CNAME: a new ingress node gets web but not app,
    and external-dns is told app is already what it will be, so the loop still settles."""
    cluster = new_cluster(ingress_nodes=3, workers=1)
    cluster.want("app.cern.ch", "web.cern.ch")
    settle(cluster, "txt")
    set_by_hand(cluster, cluster.nodes[3], landb_alias="app")
    cluster.relabel(cluster.nodes[3], True)
    assert settle(cluster, "txt") == 1
    assert cluster.aliases(cluster.nodes[3]) == {"web": 3}
    assert [cluster.aliases(n)["app"] for n in cluster.nodes[:3]] == [0, 1, 2]
    assert cluster.sim.state.metadata(cluster.server_id(cluster.nodes[3]))["landb-alias"].startswith("app,")


def test_changes_that_would_write_beside_or_over_a_plain_alias_are_refused(new_cluster: Any) -> None:
    cluster = new_cluster()
    metadata = set_by_hand(cluster, cluster.nodes[0], landb_alias="app")
    cname = record(cluster, "app.cern.ch", "CNAME")
    assert cname is not None
    wanted = Endpoint("app.cern.ch", "A", ("192.0.2.1",))
    claim = Endpoint("a-app.cern.ch", "TXT", (f'"heritage=external-dns,external-dns/owner={OWNER}"',))
    cluster.sim.state.clear_metadata_history()
    for changes in (
        Changes(delete=(cname,)),
        Changes(update_old=(cname,), update_new=(Endpoint("app.cern.ch", "CNAME", ("x.cern.ch",)),)),
        Changes(create=(wanted, claim)),
    ):
        with pytest.raises(ApplyError, match="plain"):
            cluster.provider.apply_changes(changes)
    assert cluster.sim.state.metadata(cluster.server_id(cluster.nodes[0])) == metadata
    assert api_writes(cluster.sim) == []
    assert record(cluster, "a-app.cern.ch", "TXT") is None
    assert counted(cluster.metrics, "refused_changes_total", reason="plain_alias") >= 3


# -- registry noop and an alias held only in a frozen form -------------------------------------------


def kubernetes_writes(cluster: Cluster) -> list[Any]:
    return [c for c in cluster.sim.state.api_calls("kubernetes") if c.method not in ("GET", "HEAD")]


def test_noop_an_unwanted_alias_held_only_frozen_is_not_reported_and_nothing_is_asked(
    new_cluster: Any,
) -> None:
    """One ingress node holds ``mine--load-0-`` in landb-alias1 and no Ingress wants ``mine``: noop has no
    owners, so a reported ``mine`` would be a DELETE every loop that changes nothing. Like a plain alias it
    is not reported; every loop writes and asks nothing."""
    # The writer Lease is renewed on a clock of its own (a Kubernetes write every 2 s): not the loops'.
    cluster = new_cluster(registry="noop", ingress_nodes=1, workers=0, leader_election=False)
    set_by_hand(cluster, cluster.nodes[0], landb_alias1="mine--load-0-")
    assert record(cluster, "mine.cern.ch", "A") is None
    cluster.sim.state.reset_api_calls()
    for _ in range(2):
        assert loop(cluster, "noop") == Changes()
    assert api_writes(cluster.sim) == [] and kubernetes_writes(cluster) == []
    assert cluster.aliases(cluster.nodes[0]) == {"mine": 0}


def test_noop_an_alias_held_frozen_and_in_a_slot_is_reported_whole_and_its_deletion_settles(
    new_cluster: Any,
) -> None:
    """Held both ways, the alias is reported with every carrier, the frozen one included; its deletion
    removes our token, what is left is frozen only and no longer reported: the second loop is empty."""
    cluster = new_cluster(registry="noop", ingress_nodes=2, workers=0)
    first, second = cluster.nodes
    cluster.want("mine.cern.ch")
    settle(cluster, "noop")
    set_by_hand(cluster, second, landb_alias1="mine--load-7-")
    reported = record(cluster, "mine.cern.ch", "A")
    assert reported is not None and len(reported.targets) == 2
    assert loop(cluster, "noop") == Changes(), "wanted: Records and AdjustEndpoints agree"

    cluster.want()
    assert loop(cluster, "noop").delete
    assert "mine" not in cluster.aliases(first) and cluster.aliases(second) == {"mine": 7}
    writes_before = len(api_writes(cluster.sim))
    assert loop(cluster, "noop") == Changes()
    assert len(api_writes(cluster.sim)) == writes_before


@pytest.mark.parametrize("ingress_nodes", [1, 2])
def test_noop_a_wanted_alias_held_only_frozen_settles_whether_or_not_we_write(
    new_cluster: Any, ingress_nodes: int
) -> None:
    """Wanted, and frozen on the only node that would carry it: nothing of ours would be written, so
    AdjustEndpoints drops it as Records leaves it out. With a second ingress node our token goes there
    once, and from then on the alias is reported and desired alike."""
    cluster = new_cluster(registry="noop", ingress_nodes=ingress_nodes, workers=0)
    set_by_hand(cluster, cluster.nodes[0], landb_alias1="mine--load-0-")
    cluster.want("mine.cern.ch")
    assert settle(cluster, "noop") == ingress_nodes - 1
    assert [cluster.aliases(node) for node in cluster.nodes] == [{"mine": 0}, {"mine": 1}][:ingress_nodes]
    assert len(api_writes(cluster.sim)) == ingress_nodes - 1
