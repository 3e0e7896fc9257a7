"""The ownership gate (registry ``txt``): which claims make an alias ours, and which claims are stored.

A name is ours only through a claim stored before the apply, or one created in it together with the
alias itself, as external-dns' txt registry writes them. A claim sent beside an update or a deletion of an
alias that exists without one grants nothing and is not stored; nor is a claim of a name that can never be
an alias.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.provider import ApplyError
from landb_webhook.webhook.wire import decode_changes
from support.provider_cluster import Cluster

SMUGGLED_CLAIM = {
    "dnsName": "a-legacy.cern.ch",
    "recordType": "TXT",
    "targets": ['"heritage=external-dns,external-dns/owner=x"'],
    "labels": {"ownedRecord": "legacy.cern.ch"},
}


@pytest.fixture
def cluster(make_cluster: Any) -> Cluster:
    built: Cluster = make_cluster()
    return built


def hand_set_legacy(cluster: Cluster) -> dict[str, str]:
    """``legacy--load-0-`` on the first node, set by hand: no claim, so someone else's."""
    server = cluster.server_id(cluster.nodes[0])
    metadata = {**cluster.sim.state.metadata(server), "landb-alias": "legacy--load-0-"}
    cluster.sim.state.set_metadata_direct(server, metadata)
    return metadata


def claim_names(cluster: Cluster) -> set[str]:
    return {e.dns_name for e in cluster.adapters.ownership.records()}


def node_metadata(cluster: Cluster) -> dict[str, dict[str, str]]:
    return {node: dict(cluster.sim.state.metadata(cluster.server_id(node))) for node in cluster.nodes}


@pytest.mark.parametrize(
    "change",
    [
        {"delete": [{"dnsName": "legacy.cern.ch", "recordType": "A"}]},
        {
            "updateOld": [{"dnsName": "legacy.cern.ch", "recordType": "A", "targets": ["188.184.0.1"]}],
            "updateNew": [{"dnsName": "legacy.cern.ch", "recordType": "A", "targets": ["188.184.0.2"]}],
        },
    ],
    ids=["delete", "update"],
)
def test_a_claim_smuggled_beside_a_change_of_a_hand_set_alias_grants_nothing(
    cluster: Cluster, change: dict[str, Any]
) -> None:
    """The body of the report: a TXT create naming ``legacy`` beside its deletion (or update) used to
    remove the hand-set alias with a 204. The change is refused, the claim is not stored, nothing is
    written, and the line says which node holds the alias and how to hand it over."""
    hand_set_legacy(cluster)
    before = node_metadata(cluster)
    body = json.dumps({"create": [SMUGGLED_CLAIM], **change})
    with capture_logs() as logs, pytest.raises(ApplyError, match="legacy: no ownership record"):
        cluster.provider.apply_changes(decode_changes(body))

    assert node_metadata(cluster) == before
    assert "a-legacy.cern.ch" not in claim_names(cluster)
    (refusal,) = [e for e in logs if e["event"].startswith("change refused: alias held by someone else")]
    assert refusal["nodes"] == [cluster.nodes[0]]
    assert "landb-webhook adopt" in refusal["hint"] and "legacy.cern.ch" in refusal["hint"]
    # Not stored, so it grants nothing to a later deletion either.
    with pytest.raises(ApplyError, match="legacy: no ownership record"):
        cluster.provider.apply_changes(decode_changes(json.dumps(change)))
    assert node_metadata(cluster) == before


def test_a_claim_created_with_its_alias_makes_it_ours(cluster: Cluster) -> None:
    """What external-dns sends for a new name: the alias and its claim, together."""
    alias = Endpoint("fresh.cern.ch", "A", ("192.0.2.1",))
    claim = Endpoint(
        "a-fresh.cern.ch",
        "TXT",
        ('"heritage=external-dns,external-dns/owner=x"',),
        labels=(("ownedRecord", "fresh.cern.ch"),),
    )
    cluster.provider.apply_changes(Changes(create=(alias, claim)))
    assert "a-fresh.cern.ch" in claim_names(cluster)
    assert all("fresh" in cluster.aliases(node) for node in cluster.nodes[:3])
    cluster.provider.apply_changes(Changes(delete=(alias, claim)))
    assert "a-fresh.cern.ch" not in claim_names(cluster)
    assert not any("fresh" in cluster.aliases(node) for node in cluster.nodes)


def test_a_claim_alone_is_neither_stored_nor_deleted(cluster: Cluster) -> None:
    """A claim is written and dropped only with its alias: alone, a create would make a hand-set alias
    ours at the next apply, and a delete would make one of ours someone else's."""
    hand_set_legacy(cluster)
    cluster.want("app.cern.ch")
    cluster.settle()
    ours = next(e for e in cluster.adapters.ownership.records() if e.dns_name == "a-app.cern.ch")
    smuggled = decode_changes(json.dumps({"create": [SMUGGLED_CLAIM]})).create
    with capture_logs() as logs, pytest.raises(ApplyError, match="not stored without its alias"):
        cluster.provider.apply_changes(Changes(create=smuggled))
    with pytest.raises(ApplyError, match="not deleted without its alias"):
        cluster.provider.apply_changes(Changes(delete=(ours,)))
    assert claim_names(cluster) == {"a-app.cern.ch"}
    assert [e["record"] for e in logs if e["event"] == "change refused: ownership record not stored"] == [
        "a-legacy.cern.ch"
    ]
    assert cluster.loop() == Changes()


@pytest.mark.parametrize("name", ["bad_name.cern.ch", "a.b.cern.ch", "x--load-7.cern.ch", "app.example.org"])
def test_a_name_that_can_never_be_an_alias_gets_no_claim_and_no_token(cluster: Cluster, name: str) -> None:
    """AdjustEndpoints drops it with the reason; a change naming it anyway writes neither a claim nor
    metadata (``x--load-7`` would have been written as ``x--load-7--load-0-``)."""
    with capture_logs() as logs:
        assert cluster.provider.adjust_endpoints([Endpoint(name, "A", ("192.0.2.1",))]) == []
    assert any(e["event"].startswith("endpoint dropped") for e in logs)
    before = node_metadata(cluster)
    claim = Endpoint(
        f"a-{name}", "TXT", ('"heritage=external-dns,external-dns/owner=x"',), labels=(("ownedRecord", name),)
    )
    with pytest.raises(ApplyError, match="not stored without its alias"):
        cluster.provider.apply_changes(Changes(create=(Endpoint(name, "A", ("192.0.2.1",)), claim)))
    assert claim_names(cluster) == set()
    assert node_metadata(cluster) == before


def test_an_alias_held_by_someone_else_is_said_once_with_its_nodes_and_the_adopt_command(
    cluster: Cluster,
) -> None:
    hand_set_legacy(cluster)
    with capture_logs() as logs:
        for _ in range(2):
            cluster.provider.records()
    said = [
        e for e in logs if e["event"].startswith("alias held by someone else") and e["log_level"] == "warning"
    ]
    assert len(said) == 1
    assert said[0]["nodes"] == [cluster.nodes[0]]
    assert "landb-webhook adopt" in said[0]["hint"] and "--names legacy.cern.ch" in said[0]["hint"]


# -- claims checked against the configured owner id (LANDB_TXT_OWNER_ID) ---------------------------------


def other_owners_claim(name: str, owner: str = "someone-else") -> Endpoint:
    return Endpoint(
        f"a-{name}",
        "TXT",
        (f'"heritage=external-dns,external-dns/owner={owner},external-dns/resource=ingress/team-b/x"',),
        labels=(("ownedRecord", name),),
    )


@pytest.mark.parametrize(("owner_id", "ours"), [("test-cluster", False), (None, True)])
def test_a_stored_claim_of_another_owner_makes_no_alias_ours(
    make_cluster: Any, owner_id: str | None, ours: bool
) -> None:
    """A claim in the ownership ConfigMap naming another owner (written by hand, or by external-dns with
    another --txt-owner-id) beside a hand-set alias: with LANDB_TXT_OWNER_ID a deletion of that alias is
    refused as someone else's, the claim stays, and it is said once; unset (as before), the claim is
    trusted on its label and the alias goes."""
    cluster: Cluster = make_cluster(txt_owner_id=owner_id)
    hand_set_legacy(cluster)
    claim = other_owners_claim("legacy.cern.ch")
    cluster.adapters.ownership.apply([claim], [])
    before = node_metadata(cluster)
    deletion = Changes(delete=(Endpoint("legacy.cern.ch", "A", ("188.184.0.1",)), claim))

    if ours:
        cluster.provider.apply_changes(deletion)
        assert node_metadata(cluster) != before
        return
    with capture_logs() as logs, pytest.raises(ApplyError, match="no ownership record"):
        cluster.provider.apply_changes(deletion)
    with capture_logs() as again, pytest.raises(ApplyError):
        cluster.provider.apply_changes(deletion)
    assert node_metadata(cluster) == before
    assert "a-legacy.cern.ch" in claim_names(cluster)
    said = [e for e in logs if e["event"].startswith("ownership record of another owner ignored")]
    assert [(e["record_owner"], e["owner_id"], e["owned_record"]) for e in said] == [
        ("someone-else", "test-cluster", "legacy.cern.ch")
    ]
    assert not [e for e in again if e["event"].startswith("ownership record of another owner ignored")]


def test_a_create_carrying_a_claim_of_another_owner_is_not_stored_nor_published(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster(txt_owner_id="test-cluster")
    create = Changes(
        create=(Endpoint("fresh.cern.ch", "A", ("188.184.0.1",)), other_owners_claim("fresh.cern.ch"))
    )
    with pytest.raises(ApplyError, match="no ownership record"):
        cluster.provider.apply_changes(create)
    assert "a-fresh.cern.ch" not in claim_names(cluster)
    assert all("fresh" not in "".join(m.values()) for m in node_metadata(cluster).values())


def test_a_claim_of_our_owner_id_still_makes_its_alias_ours(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster(txt_owner_id="test-cluster")
    cluster.want("app.cern.ch")
    cluster.settle()
    cluster.want()
    cluster.settle()
    assert all("app" not in "".join(m.values()) for m in node_metadata(cluster).values())
