"""One team cannot hurt another (issue 36): the removal guard holds back only the removals of the namespace
it judges, and counts per namespace; room is kept for everyone (a reserve of metadata keys, a cap of names
per namespace); claims of another owner id grant nothing.

Driven through the provider wired to the real clients against the simulator, with external-dns' own loop
(landb_simulator.external_dns); the events are read back from the simulator's events.k8s.io API.
"""

from __future__ import annotations

from typing import Any

import pytest

from landb_webhook.provider import ApplyError
from support.fake_time import FakeTime
from support.metrics import counted
from support.provider_cluster import Cluster, api_writes

TEAM_A = tuple(f"a{i}.cern.ch" for i in range(5))
TEAM_B = tuple(f"b{i}.cern.ch" for i in range(30))
HOUR = 3600.0


def published(cluster: Cluster) -> set[str]:
    return {e.dns_name for e in cluster.provider.records() if e.record_type == "A"}


def claimed(cluster: Cluster) -> set[str]:
    data = (cluster.sim.state.configmap("default", "landb-webhook-ownership") or {}).get("data") or {}
    return {key.split("|")[0].removeprefix("a-") for key in data}


def refused_notes(cluster: Cluster, namespace: str, kind_in_note: str) -> dict[str, str]:
    """Object name -> the note of its latest Refused event saying ``kind_in_note``."""
    return {
        e["regarding"]["name"]: e["note"]
        for e in cluster.sim.state.events(namespace)
        if e["type"] == "Warning" and e["reason"] == "Refused" and kind_in_note in e["note"]
    }


def two_teams(make_cluster: Any, **settings: Any) -> tuple[Cluster, FakeTime]:
    """Team a publishes five names from its Ingress ``web``, team b thirty from ``bulk``; both settled,
    longer ago than the removal window."""
    fake = FakeTime()
    cluster: Cluster = make_cluster(clock=fake.time, events=True, **settings)
    cluster.sim.state.add_ingress("team-a", "web", TEAM_A)
    cluster.sim.state.add_ingress("team-b", "bulk", TEAM_B)
    cluster.want_in({"team-a": {"web": TEAM_A}, "team-b": {"bulk": TEAM_B}})
    cluster.settle()
    fake.sleep(HOUR + 1)
    return cluster, fake


# -- 1. one team's churn does not freeze the others -------------------------------------------------


def test_a_team_withdrawing_all_its_names_holds_back_only_its_removals_and_the_other_team_lands(
    make_cluster: Any,
) -> None:
    """Team b takes its thirty names back (30 of the 35 published: the guard trips on the whole cluster
    too); team a adds a name in the same change set. Team a's name lands; team b's removals are held
    back with their tokens and claims, a Refused Warning on its Ingress, and are sent again next loop."""
    cluster, _ = two_teams(make_cluster)
    claims_before = claimed(cluster)

    cluster.want_in({"team-a": {"web": (*TEAM_A, "a-new.cern.ch")}, "team-b": {"bulk": ()}})
    with pytest.raises(ApplyError, match=r"removal guard: namespace team-b: .* remove 30 of 30"):
        cluster.loop()

    assert published(cluster) == {*TEAM_A, "a-new.cern.ch", *TEAM_B}
    assert claims_before <= claimed(cluster)
    assert counted(cluster.metrics, "refused_changes_total", reason="removal_guard") == 1
    notes = cluster.eventually(
        lambda: refused_notes(cluster, "team-b", "removal guard"), what="team b's Refused event"
    )
    assert set(notes) == {"bulk"}
    assert "not removed (it stays published): removal guard" in notes["bulk"]
    assert "namespace team-b" in notes["bulk"]
    assert "LANDB_ALLOW_MASS_REMOVAL" in notes["bulk"]
    assert refused_notes(cluster, "team-a", "removal guard") == {}

    # Team a withdraws one of its names while team b's removals are still held back: it goes.
    cluster.want_in({"team-a": {"web": TEAM_A[1:]}, "team-b": {"bulk": ()}})
    with pytest.raises(ApplyError, match=r"namespace team-b"):
        cluster.loop()
    assert published(cluster) == {*TEAM_A[1:], *TEAM_B}


def test_a_namespaces_removals_are_judged_against_its_own_names(make_cluster: Any) -> None:
    """With a minimum count of three: team a removing three of its five names is more than half of its
    own and is held back (on the whole cluster, 9 of 35 would have passed); team b removing six of its
    thirty is under its share and goes."""
    cluster, _ = two_teams(make_cluster, max_removal_min_count=3)
    cluster.want_in({"team-a": {"web": TEAM_A[:2]}, "team-b": {"bulk": TEAM_B[6:]}})
    with pytest.raises(ApplyError, match=r"namespace team-a: the apply would remove 3 of 5"):
        cluster.loop()
    assert published(cluster) == {*TEAM_A, *TEAM_B[6:]}


def test_the_allow_switch_lets_the_held_back_removals_go(make_cluster: Any) -> None:
    cluster, _ = two_teams(make_cluster)
    cluster.want_in({"team-a": {"web": TEAM_A}, "team-b": {"bulk": ()}})
    with pytest.raises(ApplyError, match="namespace team-b"):
        cluster.loop()
    writes_before = len(api_writes(cluster.sim))

    cluster.settings = cluster.settings.model_copy(update={"allow_mass_removal": True})
    cluster.restart()
    cluster.settle()
    assert published(cluster) == set(TEAM_A)
    assert len(api_writes(cluster.sim)) > writes_before
    assert claimed(cluster) == set(TEAM_A)


# -- 2. room kept for everyone ------------------------------------------------------------------------


def test_a_team_at_its_cap_leaves_room_for_the_other_team(make_cluster: Any) -> None:
    """Each server has room for two more keys, twelve names; no reserve, so only the cap keeps room. Team b
    asks for thirty names: eight land (its cap), the rest are refused with a Refused event on its Ingress.
    Team a's new name then lands."""
    fake = FakeTime()
    cluster: Cluster = make_cluster(
        clock=fake.time,
        events=True,
        max_value_length=80,
        reserved_metadata_keys=0,
        max_published_per_namespace=8,
    )
    keys = max(len(cluster.sim.state.metadata(cluster.server_id(node))) for node in cluster.nodes)
    cluster.sim.state.set_quota(keys + 2)
    cluster.sim.state.add_ingress("team-a", "web", ["a-new.cern.ch"])
    cluster.sim.state.add_ingress("team-b", "bulk", TEAM_B)

    cluster.want_in({"team-b": {"bulk": TEAM_B}})
    with pytest.raises(ApplyError, match=r"namespace team-b would publish more than 8 names"):
        cluster.loop()
    assert published(cluster) == set(sorted(TEAM_B)[:8])
    assert counted(cluster.metrics, "refused_changes_total", reason="namespace_cap") == 22
    notes = cluster.eventually(
        lambda: refused_notes(cluster, "team-b", "LANDB_MAX_PUBLISHED_PER_NAMESPACE"),
        what="team b's Refused event",
    )
    assert set(notes) == {"bulk"}

    cluster.want_in({"team-a": {"web": ("a-new.cern.ch",)}, "team-b": {"bulk": TEAM_B}})
    with pytest.raises(ApplyError, match="namespace team-b"):
        cluster.loop()
    assert published(cluster) == {"a-new.cern.ch", *sorted(TEAM_B)[:8]}
    assert "a-new.cern.ch" in claimed(cluster)
    assert not {name for name in claimed(cluster) if name.startswith("b")} - set(sorted(TEAM_B)[:8])


def test_the_reserved_keys_stay_free_for_other_writers(make_cluster: Any) -> None:
    """Default reserve (16 keys): with room for 17 more keys, the webhook opens one and refuses the rest as
    capacity, saying the reserve: sixteen keys stay free under Nova's quota."""
    cluster: Cluster = make_cluster(events=True, max_value_length=80)
    server = cluster.server_id(cluster.nodes[0])
    keys = max(len(cluster.sim.state.metadata(cluster.server_id(node))) for node in cluster.nodes)
    cluster.sim.state.set_quota(keys + 17)
    cluster.sim.state.add_ingress("team-a", "web", TEAM_B)

    cluster.want_in({"team-a": {"web": TEAM_B}})
    with pytest.raises(ApplyError, match="16 of them kept free for others"):
        cluster.loop()
    assert len(cluster.sim.state.metadata(server)) == keys + 1
    assert 0 < len(published(cluster)) < len(TEAM_B)
    notes = cluster.eventually(
        lambda: refused_notes(cluster, "team-a", "kept free for others"), what="the capacity event"
    )
    assert "out of metadata room" in notes["web"]
    assert keys + 17 - len(cluster.sim.state.metadata(server)) == 16


# -- 3. the name policy --------------------------------------------------------------------------------


def test_a_name_the_policy_does_not_allow_is_refused_on_its_object_and_the_rest_lands(
    make_cluster: Any,
) -> None:
    """Each namespace may publish names starting with its own name; ``login`` is reserved; an xn-- label
    is refused. Team b asking for team a's prefix, a reserved name and an IDN name gets three Refused
    events; its own name and team a's land. A name already published is never taken away."""
    cluster: Cluster = make_cluster(events=True, name_policy="*={namespace}-*", reserved_names="login")
    cluster.sim.state.add_ingress("team-a", "web", ["team-a-web.cern.ch"])
    cluster.sim.state.add_ingress("team-b", "grab", ["team-a-shop.cern.ch", "login.cern.ch"])
    cluster.sim.state.add_ingress("team-b", "idn", ["xn--team-b-9ya.cern.ch"])
    cluster.sim.state.add_ingress("team-b", "own", ["team-b-api.cern.ch"])
    cluster.want_in(
        {
            "team-a": {"web": ("team-a-web.cern.ch",)},
            "team-b": {
                "grab": ("team-a-shop.cern.ch", "login.cern.ch"),
                "idn": ("xn--team-b-9ya.cern.ch",),
                "own": ("team-b-api.cern.ch",),
            },
        }
    )
    with pytest.raises(ApplyError, match="may publish only team-b-"):
        cluster.loop()
    assert published(cluster) == {"team-a-web.cern.ch", "team-b-api.cern.ch"}
    assert claimed(cluster) == {"team-a-web.cern.ch", "team-b-api.cern.ch"}
    assert counted(cluster.metrics, "refused_changes_total", reason="name_policy") == 3
    notes = cluster.eventually(
        lambda: found if len(found := refused_notes(cluster, "team-b", "")) == 2 else None,
        what="team b's Refused events",
    )
    assert "reserved (LANDB_RESERVED_NAMES: login)" in notes["grab"] or "team-b-*" in notes["grab"]
    assert "xn--" in notes["idn"]
    assert refused_notes(cluster, "team-a", "") == {}
