"""The removal guard: the removals of a namespace after which too many of its aliases would have gone
within the removal window (an hour by default) are held back; the rest of the apply lands.

Driven through the provider wired to the real clients against the simulator, with external-dns' own
loop (landb_simulator.external_dns), and once through the HTTP app for the 503 external-dns sees.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_simulator.external_dns import plan
from landb_webhook.provider import ApplyError, RemovalGuard
from landb_webhook.webhook.wire import encode_changes
from support.fake_time import FakeTime
from support.metrics import counted
from support.provider_cluster import OWNER, api_writes
from support.serving import serving

NAMES = tuple(f"app{i}.cern.ch" for i in range(10))
HELD_BACK = "removals held back: they would take too many of a namespace's aliases off the air at once"


def published(cluster: Any) -> set[str]:
    return {e.dns_name for e in cluster.provider.records() if e.record_type == "A"}


def refusals(cluster: Any) -> float:
    return counted(cluster.metrics, "refused_changes_total", reason="removal_guard")


def test_removing_more_than_the_share_is_held_back_and_the_addition_lands(make_cluster: Any) -> None:
    cluster = make_cluster()
    cluster.want(*NAMES)
    cluster.settle()
    claims_before = cluster.sim.state.configmap("default", "landb-webhook-ownership")["data"]

    cluster.want(*NAMES[:4], "new.cern.ch")  # 6 of 10 go (a namespace deleted), one arrives
    with capture_logs() as logs, pytest.raises(ApplyError, match=r"removal guard: .* remove 6 of 10"):
        cluster.loop()

    assert published(cluster) == {*NAMES, "new.cern.ch"}  # the addition landed, no removal did
    claims = cluster.sim.state.configmap("default", "landb-webhook-ownership")["data"]
    assert claims_before.items() <= claims.items()  # the held-back names keep their claims
    assert refusals(cluster) == 1
    [line] = [entry for entry in logs if entry["log_level"] == "error"]
    assert line["event"] == HELD_BACK
    assert (line["withdrawn"], line["published"], line["namespace"]) == (6, 10, "default")

    # The next loop sends the six deletions again: held back again, said once, nothing written.
    writes_before = len(api_writes(cluster.sim))
    with capture_logs() as logs, pytest.raises(ApplyError, match=r"remove 6 of 11"):
        cluster.loop()
    assert len(api_writes(cluster.sim)) == writes_before
    assert [entry for entry in logs if entry["log_level"] == "error"] == []
    assert counted(cluster.metrics, "removals_held_back_total", reason="removal_guard") == 12  # 6, twice


def test_names_a_frozen_copy_keeps_on_the_air_are_not_counted_as_removed(make_cluster: Any) -> None:
    """Ten names, six of them also in a hand-set ``landb-alias1`` (a key we never edit) on the worker:
    withdrawing those six takes none off the air, so the guard lets it through. Only names that lose
    their last carrier count."""
    cluster = make_cluster()
    cluster.want(*NAMES)
    cluster.settle()
    worker = cluster.server_id(cluster.nodes[-1])
    hand_set = ",".join(f"app{i}--load-7-" for i in range(6))
    cluster.sim.state.set_metadata_direct(
        worker, {**cluster.sim.state.metadata(worker), "landb-alias1": hand_set}
    )
    cluster.settle()

    cluster.want(*NAMES[6:])
    cluster.settle()

    assert published(cluster) == set(NAMES)  # the six through their frozen copy alone
    assert refusals(cluster) == 0
    for node in cluster.nodes[:-1]:
        assert set(cluster.aliases(node)) == {f"app{i}" for i in range(6, 10)}
    assert cluster.sim.state.metadata(worker)["landb-alias1"] == hand_set


def test_the_allow_switch_lets_the_same_removal_through(make_cluster: Any) -> None:
    cluster = make_cluster(allow_mass_removal=True)
    cluster.want(*NAMES)
    cluster.settle()
    cluster.want(*NAMES[:4])
    cluster.settle()
    assert published(cluster) == set(NAMES[:4])
    assert refusals(cluster) == 0


@pytest.mark.parametrize(
    ("total", "kept", "why"),
    [
        (10, 5, "exactly half is not more than half"),
        (4, 0, "fewer removals than the minimum count: a small cluster may remove everything"),
    ],
)
def test_removals_within_the_limits_go_through(make_cluster: Any, total: int, kept: int, why: str) -> None:
    cluster = make_cluster()
    cluster.want(*NAMES[:total])
    cluster.settle()
    cluster.want(*NAMES[:kept])
    cluster.settle()
    assert published(cluster) == set(NAMES[:kept]), why
    assert refusals(cluster) == 0


def test_the_refusal_reaches_external_dns_as_a_503_naming_the_reason(make_cluster: Any) -> None:
    cluster = make_cluster(max_removal_share=0.2, max_removal_min_count=2)
    cluster.want(*NAMES[:5])
    cluster.settle()
    cluster.want(*NAMES[:3])
    current, desired = cluster.provider.records(), cluster.provider.adjust_endpoints(cluster.desired)
    with serving(cluster.provider, metrics=cluster.metrics) as webhook:
        reply = webhook.api.post(
            "/records", content=encode_changes(plan(current, desired, owner=OWNER).changes)
        )
    assert reply.status_code == 503
    assert "removal guard" in json.loads(reply.content)["error"]
    assert published(cluster) == set(NAMES[:5])


HOUR = 3600.0


def established(make_cluster: Any, *names: str) -> tuple[Any, FakeTime]:
    """A cluster publishing ``names`` for longer than the removal window (an hour by default)."""
    fake = FakeTime()
    cluster = make_cluster(clock=fake.time)
    cluster.want(*names)
    cluster.settle()
    fake.sleep(HOUR + 1)
    return cluster, fake


def test_removing_in_slices_below_the_minimum_count_is_refused_once_the_window_adds_up(
    make_cluster: Any,
) -> None:
    cluster, fake = established(make_cluster, *NAMES)
    cluster.want(*NAMES[:6])
    cluster.settle()  # 4 of 10: under the minimum count
    fake.sleep(HOUR / 2)
    writes_before = len(api_writes(cluster.sim))

    cluster.want(*NAMES[:2])  # 4 more within the hour: 8 of the 10 published at its start
    with (
        capture_logs() as logs,
        pytest.raises(ApplyError, match=r"\(4 by earlier applies\) would remove 8 of 10"),
    ):
        cluster.loop()

    assert len(api_writes(cluster.sim)) == writes_before
    assert published(cluster) == set(NAMES[:6])
    assert refusals(cluster) == 1
    [line] = [entry for entry in logs if entry["log_level"] == "error"]
    assert line["event"] == HELD_BACK
    assert (line["withdrawn"], line["withdrawn_now"], line["withdrawn_earlier"], line["published"]) == (
        8,
        4,
        4,
        10,
    )

    fake.sleep(HOUR / 2 + 1)  # the first slice has left the window
    cluster.settle()
    assert published(cluster) == set(NAMES[:2])


def test_publishing_names_again_does_not_hide_their_withdrawal_from_the_window(make_cluster: Any) -> None:
    """The issue's history: four withdrawn, the same four published again, four others withdrawn. The
    first four were on the air at the window's start: 8 of its 10 went within the hour."""
    cluster, fake = established(make_cluster, *NAMES)
    cluster.want(*NAMES[4:])
    cluster.settle()  # 4 of 10: under the minimum count
    fake.sleep(60)
    cluster.want(*NAMES)
    cluster.settle()  # the same four back on the air
    fake.sleep(60)
    writes_before = len(api_writes(cluster.sim))

    cluster.want(*NAMES[:4], *NAMES[8:])
    with pytest.raises(ApplyError, match=r"\(4 by earlier applies\) would remove 8 of 10"):
        cluster.loop()

    assert len(api_writes(cluster.sim)) == writes_before
    assert published(cluster) == set(NAMES)
    assert refusals(cluster) == 1


def test_a_restart_inside_the_window_forgets_no_removal(make_cluster: Any) -> None:
    """The window is stored in the state ConfigMap beside the ownership records."""
    cluster, _ = established(make_cluster, *NAMES)
    cluster.want(*NAMES[:6])
    cluster.settle()

    cluster.restart()
    cluster.want(*NAMES[:2])
    with pytest.raises(ApplyError, match=r"\(4 by earlier applies\) would remove 8 of 10"):
        cluster.loop()
    assert published(cluster) == set(NAMES[:6])


def test_junk_names_created_first_do_not_raise_what_the_guard_counts_against(make_cluster: Any) -> None:
    cluster, _ = established(make_cluster, *NAMES)
    junk = tuple(f"junk{i}.cern.ch" for i in range(12))
    cluster.want(*NAMES, *junk)
    cluster.settle()  # 22 published now, 10 at the window's start
    writes_before = len(api_writes(cluster.sim))

    cluster.want(*junk)
    with pytest.raises(ApplyError, match=r"would remove 10 of 10 aliases published at the window's start"):
        cluster.loop()

    assert len(api_writes(cluster.sim)) == writes_before
    assert published(cluster) == set(NAMES) | set(junk)


def test_the_allow_switch_starts_the_window_afresh(make_cluster: Any) -> None:
    """An intended mass removal is not held against the removals after the switch is turned off."""
    cluster = make_cluster(allow_mass_removal=True)
    cluster.want(*NAMES)
    cluster.settle()
    cluster.want(*NAMES[:4])
    cluster.settle()
    assert cluster.settings is not None
    cluster.settings = cluster.settings.model_copy(update={"allow_mass_removal": False})
    cluster.restart()  # the switch turned off: the window comes from the state store
    cluster.want(*NAMES[:2])  # 2 of 4: under the minimum count, and the 6 before do not count
    cluster.settle()
    assert published(cluster) == set(NAMES[:2])
    assert refusals(cluster) == 0


@pytest.mark.parametrize(
    ("withdrawn", "published_count", "trips"),
    [(0, 0, False), (4, 4, False), (5, 5, True), (5, 10, False), (6, 10, True), (60, 1000, False)],
)
def test_guard_thresholds(withdrawn: int, published_count: int, trips: bool) -> None:
    guard = RemovalGuard(max_share=0.5, min_count=5, allow=False, window_seconds=HOUR)
    assert guard.trips(withdrawn, published_count) is trips
    assert replace(guard, allow=True).trips(withdrawn, published_count) is False
