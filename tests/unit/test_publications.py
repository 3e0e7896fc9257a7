"""provider/watch/publications.py: what is published per name and when it was written, across restarts."""

from __future__ import annotations

import json
from unittest.mock import patch

from structlog.testing import capture_logs

from landb_webhook.landb.propagation import Published
from landb_webhook.provider.watch.publications import PublicationLog

T = 1_800_000_000.0
A, B, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"


def test_the_first_report_of_a_process_knows_no_write_time_a_later_new_name_is_written_then() -> None:
    log = PublicationLog()
    log.reported({"old.cern.ch": [A]}, T)
    log.reported({"old.cern.ch": [A], "new.cern.ch": [B]}, T + 60)

    assert log.published() == {
        "old.cern.ch": Published(frozenset({A})),
        "new.cern.ch": Published(frozenset({B}), written_at=T + 60),
    }


def test_a_write_counts_from_when_it_landed_and_remembers_the_carriers_before_it() -> None:
    log = PublicationLog()
    log.reported({"app.cern.ch": [A, B]}, T)
    log.written(["app.cern.ch"], T + 10)

    assert "app.cern.ch" not in log.published()  # what DNS should answer is known at the next Records
    log.reported({"app.cern.ch": [B, C]}, T + 60)
    assert log.published()["app.cern.ch"] == Published(frozenset({B, C}), frozenset({A}), T + 10)

    log.settled("app.cern.ch")
    assert log.published()["app.cern.ch"] == Published(frozenset({B, C}), frozenset(), T + 10)


def test_a_removed_name_is_kept_with_no_ips_until_dns_dropped_it_or_the_retention_passed() -> None:
    log = PublicationLog(retention=3600)
    log.reported({"gone.cern.ch": [A], "kept.cern.ch": [A]}, T)
    log.written(["gone.cern.ch"], T + 10)
    log.reported({"kept.cern.ch": [A]}, T + 60)
    assert log.published()["gone.cern.ch"] == Published(frozenset(), frozenset({A}), T + 10)

    log.reported({"kept.cern.ch": [A]}, T + 3600)
    assert "gone.cern.ch" in log.published()
    log.reported({"kept.cern.ch": [A]}, T + 3611)
    assert "gone.cern.ch" not in log.published()

    log.reported({}, T + 3700)  # kept.cern.ch removed without a write of ours: counted from this report
    log.forget("kept.cern.ch")
    assert log.published() == {}


def test_the_stored_write_times_survive_a_restart_and_the_newer_wins() -> None:
    before = PublicationLog()
    before.reported({"app.cern.ch": [A]}, T)
    before.written(["app.cern.ch", "web.cern.ch"], T + 10)
    before.reported({"app.cern.ch": [B], "web.cern.ch": [C]}, T + 60)
    stored = before.to_json()

    after = PublicationLog()
    after.merge_json(stored)
    after.reported({"app.cern.ch": [B], "web.cern.ch": [C]}, T + 120)

    assert after.published() == before.published()
    found = json.loads(stored)
    app = found["names"]["app.cern.ch"]
    assert (app["at"], found["sets"][app["ips"]], found["sets"][app["was"]]) == (T + 10, [B], [A])

    other = PublicationLog()
    other.merge_json(stored)
    other.written(["web.cern.ch"], T + 500)
    other.reported({"app.cern.ch": [B], "web.cern.ch": [A]}, T + 560)
    after.merge_json(other.to_json())
    assert after.written_at("web.cern.ch") == T + 500
    assert after.written_at("app.cern.ch") == T + 10


BAD_STATES = (
    "[]",
    '{"app.cern.ch": {"at": "soon", "ips": [], "was": []}}',
    "{",
    '{"x": 1}',
    '{"format": 3, "sets": [], "names": {}}',
    '{"format": 2, "sets": [["10.0.0.1"]], "names": {"app.cern.ch": {"at": 1, "ips": 1, "was": 0}}}',
    '{"format": 2, "sets": [["10.0.0.1"]], "names": {"app.cern.ch": {"at": 1, "ips": true, "was": 0}}}',
    '{"format": 2, "sets": [[1]], "names": {}}',
    '{"format": 2, "sets": [], "names": []}',
    # the format of no released version (an object by name, each with its lists): not read
    '{"app.cern.ch": {"at": 1, "ips": ["10.0.0.1"], "was": []}}',
)


def test_a_stored_value_it_did_not_write_is_said_and_ignored() -> None:
    log = PublicationLog()
    log.reported({"app.cern.ch": [A]}, T)

    with capture_logs() as logs:
        for bad in BAD_STATES:
            log.merge_json(bad)

    assert [entry["event"] for entry in logs] == len(BAD_STATES) * [
        "webhook state: the DNS write times are unreadable and ignored"
    ]
    assert log.published() == {"app.cern.ch": Published(frozenset({A}))}


def test_a_removed_name_forgotten_is_not_brought_back_by_the_state_stored_before() -> None:
    """The next apply reads the state (which still holds the name) before it stores it without."""
    log = PublicationLog(retention=3600)
    log.reported({"gone.cern.ch": [A], "aged.cern.ch": [B]}, T)
    log.written(["gone.cern.ch", "aged.cern.ch"], T + 10)
    log.reported({}, T + 60)
    stored = log.to_json()
    log.forget("gone.cern.ch")
    log.reported({}, T + 3700)  # aged.cern.ch: past the retention

    log.merge_json(stored)
    assert log.published() == {}
    assert json.loads(log.to_json())["names"] == {}

    log.merge_json("{}")  # stored without them: nothing left to remember
    log.written(["gone.cern.ch"], T + 4000)  # written again: a new life
    log.reported({"gone.cern.ch": [C]}, T + 4060)
    assert log.published()["gone.cern.ch"].written_at == T + 4000


def _cluster_log(nodes: int, names: int) -> PublicationLog:
    """Every name on every ingress node, then one node more: each name has its addresses and former ones."""
    log = PublicationLog()
    ips = [f"10.{i // 250}.{i % 250}.7" for i in range(nodes)]
    log.reported({f"app{i:04d}.cern.ch": ips for i in range(names)}, T)
    log.written([f"app{i:04d}.cern.ch" for i in range(names)], T + 10)
    log.reported({f"app{i:04d}.cern.ch": [*ips, "10.9.9.9"] for i in range(names)}, T + 60)
    return log


def test_the_state_of_a_large_cluster_fits_a_configmap_many_times_over() -> None:
    """One list of addresses per name made the state of 300 nodes x 1,000 names 3.7 MiB, over a ConfigMap's
    1 MiB: it was never stored. The carrier rule puts every name on the same nodes: two sets here."""
    log = _cluster_log(500, 1000)
    stored = log.to_json()

    assert len(stored) < 64 * 1024
    again = PublicationLog()
    again.merge_json(stored)
    assert again.published() == log.published()
    assert again.written_at("app0999.cern.ch") == T + 10


def test_past_its_budget_the_state_keeps_every_write_time_and_says_it_left_the_addresses_out() -> None:
    log = PublicationLog()
    log.reported({f"app{i:04d}.cern.ch": [f"10.0.{i // 250}.{i % 250}"] for i in range(50)}, T)
    log.written([f"app{i:04d}.cern.ch" for i in range(50)], T + 10)
    log.reported({f"app{i:04d}.cern.ch": [f"10.0.{i // 250}.{i % 250}"] for i in range(50)}, T + 60)

    with patch("landb_webhook.provider.watch.publications.BUDGET", 1000), capture_logs() as logs:
        stored = log.to_json()

    assert json.loads(stored)["sets"] == []
    assert [entry["event"] for entry in logs] == [
        "webhook state: the DNS names' addresses are too many to store; their write times are stored alone"
    ]
    after = PublicationLog()
    after.merge_json(stored)
    after.reported({f"app{i:04d}.cern.ch": [f"10.0.{i // 250}.{i % 250}"] for i in range(50)}, T + 120)
    assert after.written_at("app0049.cern.ch") == T + 10
    assert after.published() == log.published()
