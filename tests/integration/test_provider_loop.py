"""The provider wired by the composition root to the real clients, against the simulator over HTTP.

Each test names the invariant (docs/architecture.md) it guards. Desired state goes through the same
Records -> AdjustEndpoints -> plan -> ApplyChanges loop external-dns runs (landb_simulator.external_dns).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_simulator import ClientConfig, Simulator
from landb_simulator.external_dns import ownership_record
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore, decode_record
from landb_webhook.backends import Ports, UpstreamError
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.metadata import PARSED_VALUES, read_aliases
from landb_webhook.metrics import Metrics
from landb_webhook.provider import ApplyError, LandbProvider
from landb_webhook.wiring import ask_openstack_once, build_provider, provider_options
from support.kube_requests import is_watch
from support.metrics import counted
from support.provider_cluster import OWNER, Cluster, api_writes, metadata_writes, settings_for

FOREIGN_KEYS = ("landb-mainuser", "landb-responsible", "landb-os", "cern-services")


def test_second_loop_changes_nothing(make_cluster: Any) -> None:
    """Invariant 1: after convergence Records == AdjustEndpoints(desired) and apply writes nothing."""
    cluster = make_cluster()
    cluster.want("app.cern.ch", "web.cern.ch", "api.cern.ch")
    first = cluster.loop()
    assert len(first.create) == 6  # three aliases and their TXT claims
    ingress = cluster.nodes[:3]
    for node in ingress:
        assert set(cluster.aliases(node)) == {"app", "web", "api"}
    assert cluster.aliases(cluster.nodes[3]) == {}

    cluster.sim.state.reset_api_calls()
    second = cluster.loop()
    assert second == Changes()
    assert metadata_writes(cluster.sim) == 0
    # Labels are not compared by the planner (and Records has none to give); everything else must match.
    records = {replace(e, labels=()) for e in cluster.provider.records() if e.record_type == "A"}
    adjusted = {replace(e, labels=()) for e in cluster.provider.adjust_endpoints(cluster.desired)}
    assert records == adjusted


def test_a_settled_loop_makes_no_kubernetes_request(make_cluster: Any) -> None:
    """Nodes and ownership claims are both watch-fed: once settled, a loop reads neither afresh."""
    cluster = make_cluster(leader_election=False)  # the writer Lease is renewed on a clock of its own
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()
    assert isinstance(cluster.adapters.ownership, ConfigMapOwnershipStore)
    assert cluster.adapters.ownership.wait_synced(5)
    cluster.sim.state.reset_api_calls()
    for _ in range(5):
        assert cluster.loop() == Changes()
    assert [c for c in cluster.sim.state.api_calls("kubernetes") if not is_watch(c)] == []


def test_indices_are_distinct_per_alias_and_start_at_the_floor(make_cluster: Any) -> None:
    cluster = make_cluster(index_floor=5)
    cluster.want("app.cern.ch")
    cluster.settle()
    assert sorted(cluster.aliases(n)["app"] for n in cluster.nodes[:3]) == [5, 6, 7]


def test_new_ingress_node_takes_the_smallest_free_index_and_nothing_else_is_written(
    make_cluster: Any,
) -> None:
    """Invariant 2 (sticky indices) and 5 (minimal writes)."""
    cluster = make_cluster(ingress_nodes=3, workers=1)
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()
    before = {n: cluster.aliases(n) for n in cluster.nodes[:3]}
    newcomer = cluster.nodes[3]
    cluster.sim.state.clear_metadata_history()

    cluster.relabel(newcomer, True)
    cluster.settle()

    assert {n: cluster.aliases(n) for n in cluster.nodes[:3]} == before
    assert cluster.aliases(newcomer) == {"app": 3, "web": 3}
    written = {c.server_id for c in cluster.sim.state.metadata_history()}
    assert written == {cluster.server_id(newcomer)}


def test_node_losing_its_label_loses_its_aliases_and_no_other_node_is_rewritten(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=3)
    cluster.want("app.cern.ch")
    cluster.settle()
    leaving, staying = cluster.nodes[1], [cluster.nodes[0], cluster.nodes[2]]
    before = {n: cluster.aliases(n) for n in staying}
    cluster.sim.state.clear_metadata_history()

    cluster.relabel(leaving, False)
    cluster.settle()

    assert cluster.aliases(leaving) == {}
    assert {n: cluster.aliases(n) for n in staying} == before
    assert {c.server_id for c in cluster.sim.state.metadata_history()} == {cluster.server_id(leaving)}
    # The freed index is reused by the next newcomer, never by a renumbering of the others.
    cluster.relabel(leaving, True)
    cluster.settle()
    assert cluster.aliases(leaving) == {"app": before[staying[0]]["app"] + 1}


def test_every_addition_lands_before_any_removal(make_cluster: Any) -> None:
    """Invariant 3: while one node leaves and another joins, every alias keeps a carrier at every write."""
    cluster = make_cluster(ingress_nodes=1, workers=1)
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()
    old, new = cluster.nodes[0], cluster.nodes[1]
    cluster.sim.state.clear_metadata_history()

    cluster.relabel(new, True)
    cluster.relabel(old, False)
    cluster.settle()

    current = {cluster.server_id(old): {"app", "web"}, cluster.server_id(new): set()}
    history = cluster.sim.state.metadata_history()
    assert history, "the change must have been written"
    for change in history:
        current[change.server_id] = {t.label for t in read_aliases(change.metadata).load_tokens()}
        for alias in ("app", "web"):
            assert any(alias in labels for labels in current.values()), f"{alias} had no carrier at {change}"
    assert cluster.aliases(new).keys() == {"app", "web"} and cluster.aliases(old) == {}


def test_foreign_keys_and_unowned_aliases_are_never_touched(make_cluster: Any) -> None:
    """Invariant 4: only landb-alias* keys are written; a hand-set alias without a claim survives sync."""
    cluster = make_cluster()
    first = cluster.server_id(cluster.nodes[0])
    foreign = cluster.sim.state.metadata(first)
    interface_value = "eth0.cern.ch:legacy--load-7-;eth1.cern.ch:other"
    cluster.sim.state.set_metadata_direct(
        first, {**foreign, "landb-alias": "legacy--load-0-", "landb-alias1": interface_value}
    )
    cluster.want("app.cern.ch")
    cluster.settle()
    cluster.want()  # the source drops app: sync deletes what it owns, and only that
    cluster.settle()

    after = cluster.sim.state.metadata(first)
    assert after["landb-alias"] == "legacy--load-0-"
    assert after["landb-alias1"] == interface_value
    assert {k: after[k] for k in foreign} == foreign
    for change in cluster.sim.state.metadata_history():
        if change.method == "direct":
            continue
        assert change.key is None or change.key.startswith("landb-alias")
    legacy = [e for e in cluster.provider.records() if e.dns_name == "legacy.cern.ch"]
    assert len(legacy) == 1, "a hand-set alias is reported so external-dns knows the name is taken"


def test_removing_an_unowned_alias_is_refused_and_changes_nothing(make_cluster: Any) -> None:
    cluster = make_cluster()
    first = cluster.server_id(cluster.nodes[0])
    metadata = {**cluster.sim.state.metadata(first), "landb-alias": "legacy--load-0-"}
    cluster.sim.state.set_metadata_direct(first, metadata)
    legacy = next(e for e in cluster.provider.records() if e.dns_name == "legacy.cern.ch")
    with pytest.raises(ApplyError, match="legacy: no ownership record"):
        cluster.provider.apply_changes(Changes(delete=(legacy,)))
    assert cluster.sim.state.metadata(first) == metadata


def test_a_refusal_is_counted_and_told_even_when_the_apply_then_fails_upstream(make_cluster: Any) -> None:
    """Step 9 settles the refusals decided before an upstream error too: the deletion of an unowned alias
    is refused (counted, said), then storing the new name's claim fails; nothing is written."""
    cluster = make_cluster()
    first = cluster.server_id(cluster.nodes[0])
    metadata = {**cluster.sim.state.metadata(first), "landb-alias": "legacy--load-0-"}
    cluster.sim.state.set_metadata_direct(first, metadata)
    legacy = next(e for e in cluster.provider.records() if e.dns_name == "legacy.cern.ch")
    new = Endpoint("new.cern.ch", "A", ("192.0.2.1",))
    cluster.sim.state.inject_fault(api="kubernetes", method="PUT", path_pattern="configmaps", times=None)
    cluster.sim.state.inject_fault(api="kubernetes", method="PATCH", path_pattern="configmaps", times=None)
    cluster.sim.state.inject_fault(api="kubernetes", method="POST", path_pattern="configmaps", times=None)

    with capture_logs() as logs, pytest.raises(UpstreamError):
        cluster.provider.apply_changes(Changes(create=(new, ownership_record(new, OWNER)), delete=(legacy,)))

    assert counted(cluster.metrics, "refused_changes_total", reason="not_owned") == 1
    assert [e["alias"] for e in logs if e["event"].startswith("change refused: alias held by someone")] == [
        "legacy"
    ]
    assert cluster.sim.state.metadata(first) == metadata
    assert not any("new" in cluster.aliases(node) for node in cluster.nodes)


def test_noop_registry_manages_every_alias(make_cluster: Any) -> None:
    cluster = make_cluster(registry="noop")
    first = cluster.server_id(cluster.nodes[0])
    cluster.sim.state.set_metadata_direct(
        first, {**cluster.sim.state.metadata(first), "landb-alias": "legacy--load-0-"}
    )
    legacy = next(e for e in cluster.provider.records() if e.dns_name == "legacy.cern.ch")
    cluster.provider.apply_changes(Changes(delete=(legacy,)))
    assert "landb-alias" not in cluster.sim.state.metadata(first)


def test_a_locked_server_fails_alone_and_converges_once_unlocked(make_cluster: Any) -> None:
    """Invariant 7: a server that refuses writes does not stop the others."""
    cluster = make_cluster()
    cluster.lock(cluster.nodes[1])
    cluster.want("app.cern.ch")
    with pytest.raises(ApplyError, match=re.escape(cluster.nodes[1])):
        cluster.loop()
    assert "app" in cluster.aliases(cluster.nodes[0]) and "app" in cluster.aliases(cluster.nodes[2])
    assert cluster.aliases(cluster.nodes[1]) == {}
    cluster.lock(cluster.nodes[1], locked=False)
    cluster.settle()
    assert "app" in cluster.aliases(cluster.nodes[1])


def test_metadata_quota_overflow_is_refused_and_other_servers_converge(make_cluster: Any) -> None:
    cluster = make_cluster(max_value_length=80, reserved_metadata_keys=0)
    full = cluster.server_id(cluster.nodes[0])
    crowded = {**cluster.sim.state.metadata(full), **{f"user-key-{i}": "x" for i in range(4)}}
    cluster.sim.state.set_metadata_direct(full, crowded)
    cluster.sim.state.set_quota(len(crowded) + 1)  # room for one landb-alias key, not two
    cluster.want(*(f"name{i:02d}.cern.ch" for i in range(12)))  # 12 tokens need two 80-char values
    with pytest.raises(ApplyError, match="quota"):
        cluster.loop()
    assert all(
        k == "landb-alias" or not k.startswith("landb-alias") for k in cluster.sim.state.metadata(full)
    )
    assert len(cluster.aliases(cluster.nodes[1])) == 12
    assert counted(cluster.metrics, "refused_changes_total", reason="plan") > 0


def test_room_a_withdrawal_frees_serves_the_creations_of_the_same_apply(make_cluster: Any) -> None:
    """At its quota, a node drops a0..a3 and gains b0..b5 in one apply: the withdrawals' leave write empties
    landb-alias2 (a DELETE) before the additions are written, so all six land in one apply, as they did
    when external-dns happened to send the withdrawals in a loop of their own."""
    cluster = make_cluster(max_value_length=80, ingress_nodes=1, workers=0)
    node = cluster.nodes[0]
    old = [f"a{i}.cern.ch" for i in range(10)]  # 6 tokens fill landb-alias, 4 go into landb-alias2
    cluster.want(*old)
    cluster.settle()
    server = cluster.server_id(node)
    cluster.sim.state.set_quota(len(cluster.sim.state.metadata(server)))  # not one key more

    new = [f"b{i}.cern.ch" for i in range(6)]
    cluster.want(*old[:6], *new)
    cluster.loop()  # one apply: it refused four of the six (no key left for them) before

    assert set(cluster.aliases(node)) == {name.removesuffix(".cern.ch") for name in (*old[:6], *new)}
    assert counted(cluster.metrics, "refused_changes_total", reason="plan") == 0


def test_a_cluster_over_its_quota_gets_what_fits_and_one_line_per_alias_and_per_node(
    make_cluster: Any,
) -> None:
    """Every node full but for one key: each gets the names that fit in it, and the log says each name
    refused once (not once per node) and each full node once; a later loop says the same, no more."""
    cluster = make_cluster(max_value_length=80, reserved_metadata_keys=0)
    ingress = cluster.nodes[:3]
    for node in ingress:
        sid = cluster.server_id(node)
        crowded = {**cluster.sim.state.metadata(sid), **{f"user-key-{i}": "x" for i in range(4)}}
        cluster.sim.state.set_metadata_direct(sid, crowded)
    cluster.sim.state.set_quota(len(crowded) + 1)
    names = [f"name{i:02d}" for i in range(12)]  # 16 characters a token: 5 fit in one 80-character value
    cluster.want(*(f"{name}.cern.ch" for name in names))
    for _ in range(2):
        with capture_logs() as logs, pytest.raises(ApplyError, match="quota"):
            cluster.loop()
        refused = [e["alias"] for e in logs if e["event"] == "change refused"]
        full = [e["node"] for e in logs if e["event"].startswith("node out of metadata room")]
        assert refused == names[5:]
        assert sorted(full) == sorted(ingress)
        for node in ingress:
            assert sorted(cluster.aliases(node)) == names[:5]


def test_nova_down_is_an_upstream_error_and_nothing_is_written(make_cluster: Any) -> None:
    """Invariant 6: the webhook turns this into a 503, so external-dns retries instead of exiting."""
    cluster = make_cluster()
    cluster.sim.state.inject_fault(api="nova", status=503, times=None)
    cluster.want("app.cern.ch")
    with pytest.raises(UpstreamError):
        cluster.loop()
    assert api_writes(cluster.sim) == []


def test_dry_run_writes_nothing(make_cluster: Any) -> None:
    cluster = make_cluster(dry_run=True)
    cluster.want("app.cern.ch")
    changes = cluster.loop()
    assert changes != Changes()
    assert api_writes(cluster.sim) == []
    assert cluster.sim.state.configmap("default", "landb-webhook-ownership") is None
    assert counted(cluster.metrics, "metadata_writes_total", operation="post", result="dry_run") == 3


def test_unrepresentable_endpoints_are_dropped_and_ownership_records_pass_through(make_cluster: Any) -> None:
    cluster = make_cluster()
    claim = Endpoint("a-app.cern.ch", "TXT", ('"heritage=external-dns,external-dns/owner=x"',))
    odd = [
        Endpoint("app.example.org", "A", ("1.2.3.4",)),
        Endpoint("deep.app.cern.ch", "A", ("1.2.3.4",)),
        Endpoint("*.cern.ch", "A", ("1.2.3.4",)),
        Endpoint("under_score.cern.ch", "A", ("1.2.3.4",)),
        Endpoint(f"{'x' * 64}.cern.ch", "A", ("1.2.3.4",)),
        Endpoint("mx.cern.ch", "MX", ("10 mail.cern.ch",)),
    ]
    adjusted = cluster.provider.adjust_endpoints([*odd, Endpoint("App.CERN.ch.", "CNAME", ("x",)), claim])
    assert [e.dns_name for e in adjusted] == ["app.cern.ch", "a-app.cern.ch"]
    assert adjusted[1] == claim
    assert (
        adjusted[0].record_type == "A" and adjusted[0].record_ttl == 0 and not adjusted[0].provider_specific
    )
    kinds = ("other_zone", "multi_label", "wildcard", "invalid_characters", "too_long", "record_type")
    dropped = {kind: counted(cluster.metrics, "dropped_endpoints_total", reason=kind) for kind in kinds}
    assert dropped == dict.fromkeys(kinds, 1.0)


def test_no_ingress_node_left_is_refused_rather_than_unpublishing_everything(make_cluster: Any) -> None:
    """A selector that suddenly matches nothing must not take every name off the air."""
    cluster = make_cluster(ingress_nodes=2)
    cluster.want("app.cern.ch")
    cluster.settle()
    before = {n: cluster.aliases(n) for n in cluster.nodes[:2]}
    for node in cluster.nodes[:2]:
        cluster.relabel(node, False)
    with pytest.raises(ApplyError, match="no ingress node"):
        cluster.loop()
    assert {n: cluster.aliases(n) for n in cluster.nodes[:2]} == before


def test_a_mistyped_ingress_selector_is_said_at_the_first_records_naming_it_once_not_every_loop(
    make_cluster: Any,
) -> None:
    """LANDB_INGRESS_SELECTOR=role=ingres: Records answers (nothing to publish is no outage) and /readyz
    stays ready, but the first Records says it, the apply's refusal names the selector, the gauge reads 0."""
    cluster = make_cluster(ingress_nodes=2, workers=1, ingress_selector="role=ingres")
    ask_openstack_once(cluster.adapters).join(timeout=30)
    with capture_logs() as logs:
        for _ in range(3):
            cluster.provider.records()

    [said] = [e for e in logs if e["event"].startswith("no node matches the ingress selector")]
    assert (said["log_level"], said["ingress_selector"], said["nodes_seen"]) == ("warning", "role=ingres", 3)
    assert "LANDB_INGRESS_SELECTOR" in said["hint"]
    assert cluster.gauge("ingress_nodes") == 0  # what LandbWebhookNoIngressNode reads (its promtool cases)
    readiness = cluster.provider.readiness()
    assert readiness.ready and "none matching the ingress selector role=ingres" in readiness.reason

    cluster.want("app.cern.ch")
    with capture_logs() as logs, pytest.raises(ApplyError, match="no ingress node"):
        cluster.loop()
    [refused] = [e for e in logs if e["event"].startswith("no node matches the ingress selector: aliases")]
    assert refused["ingress_selector"] == "role=ingres"


def test_the_selector_matching_nothing_is_said_again_at_once_each_time_it_starts_again(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(ingress_nodes=1, workers=1)
    ingress = cluster.nodes[0]

    def said_after_records() -> list[str]:
        with capture_logs() as logs:
            cluster.provider.records()
        return [e["event"] for e in logs if "ingress selector" in e["event"]]

    assert said_after_records() == []
    assert cluster.gauge("ingress_nodes") == 1
    cluster.relabel(ingress, False)
    assert said_after_records() == ["no node matches the ingress selector: no alias can be placed"]
    assert said_after_records() == []
    cluster.relabel(ingress, True)
    assert said_after_records() == ["the ingress selector matches nodes again"]
    cluster.relabel(ingress, False)
    assert said_after_records() == ["no node matches the ingress selector: no alias can be placed"]


def test_a_removal_waits_until_the_new_carrier_is_written(make_cluster: Any) -> None:
    """Invariant 3 under failure: the alias moves to a locked node; the old carrier keeps it until then."""
    cluster = make_cluster(ingress_nodes=1, workers=1)
    cluster.want("app.cern.ch")
    cluster.settle()
    old, new = cluster.nodes[0], cluster.nodes[1]
    cluster.lock(new)
    cluster.relabel(new, True)
    cluster.relabel(old, False)

    with pytest.raises(ApplyError, match="removal held back"):
        cluster.loop()
    assert cluster.aliases(old) == {"app": 0} and cluster.aliases(new) == {}
    assert cluster.gauge("removals_held_back_total", reason="carrier_not_written") == 1

    cluster.lock(new, locked=False)
    cluster.settle()
    assert cluster.aliases(old) == {} and cluster.aliases(new) == {"app": 1}


# -- operations signals ------------------------------------------------------------------------------


def sync_timestamp(cluster: Cluster) -> float | None:
    return cluster.metrics.registry.get_sample_value("landb_webhook_last_successful_sync_timestamp_seconds")


def test_every_successful_loop_advances_the_sync_timestamp_even_when_nothing_is_applied(
    make_cluster: Any,
) -> None:
    """A settled cluster is a healthy one: its age-of-last-sync alert must not fire (the apply one would)."""
    cluster = make_cluster()
    cluster.want("app.cern.ch")
    cluster.settle()
    cluster.metrics.last_successful_sync_timestamp_seconds.set(0)
    cluster.metrics.last_apply_success_timestamp_seconds.set(0)

    assert cluster.loop() == Changes()
    assert (sync_timestamp(cluster) or 0) > 0
    last_apply = "landb_webhook_last_apply_success_timestamp_seconds"
    assert cluster.metrics.registry.get_sample_value(last_apply) == 0

    cluster.metrics.last_successful_sync_timestamp_seconds.set(0)
    cluster.sim.state.inject_fault(api="nova", status=503, times=None)
    with pytest.raises(UpstreamError):
        cluster.loop()
    assert sync_timestamp(cluster) == 0


def test_readiness_says_why_the_webhook_cannot_do_its_job(make_cluster: Any) -> None:
    cluster = make_cluster()
    untried = cluster.provider.readiness()
    assert (untried.ready, untried.reason) == (
        False,
        "OpenStack: no call has succeeded since start-up (credentials untried)",
    )
    cluster.provider.records()
    assert cluster.provider.readiness().ready

    password = cluster.sim.state.credentials.password
    cluster.sim.state.inject_fault(
        api="keystone", method="POST", path_pattern="/auth/tokens", status=401, times=None
    )
    cluster.adapters.servers.close()  # drops the cached token: the next call authenticates again
    with pytest.raises(UpstreamError):
        cluster.provider.records()
    readiness = cluster.provider.readiness()
    assert not readiness.ready
    assert readiness.reason.startswith("OpenStack: keystone:")
    assert "401" in readiness.reason and password not in readiness.reason

    cluster.sim.state.clear_faults()
    cluster.provider.records()
    assert cluster.provider.readiness().ready


@pytest.mark.parametrize("keystone_refuses", [False, True])
def test_serve_asks_openstack_once_at_start_up_and_is_ready_only_after_an_answer(
    make_cluster: Any, keystone_refuses: bool
) -> None:
    cluster = make_cluster()
    if keystone_refuses:
        cluster.sim.state.inject_fault(
            api="keystone", method="POST", path_pattern="/auth/tokens", status=401, times=None
        )

    with capture_logs() as logs:
        ask_openstack_once(cluster.adapters).join(timeout=30)

    readiness = cluster.provider.readiness()
    if keystone_refuses:
        assert not readiness.ready and readiness.reason.startswith("OpenStack: keystone:")
        [line] = [entry for entry in logs if entry["log_level"] == "error"]
        assert line["event"] == "OpenStack did not answer at start-up: not ready until a call succeeds"
        assert "401" in line["error"]
    else:
        assert readiness.ready
        assert "OpenStack answered" in [entry["event"] for entry in logs]


def test_readiness_waits_for_the_node_cache(simulator: Simulator, sim_clients: ClientConfig) -> None:
    simulator.state.inject_fault(api="kubernetes", status=503, times=None)
    provider, adapters = build_provider(settings_for(sim_clients), Metrics.create(process_metrics=False))
    try:
        readiness = provider.readiness()
    finally:
        adapters.close()
    assert not readiness.ready
    assert readiness.reason.startswith("kubernetes: ") and "not synced yet" in readiness.reason


def test_one_summary_line_per_apply_counting_and_naming_aliases_not_tokens(make_cluster: Any) -> None:
    """An alias on three nodes is one alias (three tokens); the line names them, a bounded number."""
    cluster = make_cluster(ingress_nodes=3, workers=1)
    cluster.want("app.cern.ch", "web.cern.ch")
    with capture_logs() as logs:
        cluster.loop()
    summaries = [line for line in logs if line["event"] == "apply finished"]
    assert len(summaries) == 1
    assert summaries[0]["log_level"] == "info"
    assert re.fullmatch(
        r"\+2 -0 aliases \(\+6 -0 tokens\) on 3 of 4 nodes, 0 failed, \d+ ms, created app, web",
        summaries[0]["summary"],
    )
    assert (summaries[0]["aliases_added"], summaries[0]["tokens_added"]) == (2, 6)

    many = [f"n{i:02}.cern.ch" for i in range(12)]
    cluster.want("app.cern.ch", *many)
    with capture_logs() as logs:
        cluster.loop()
    (summary,) = [line["summary"] for line in logs if line["event"] == "apply finished"]
    assert re.fullmatch(
        r"\+12 -1 aliases \(\+36 -3 tokens\) on 3 of 4 nodes, 0 failed, \d+ ms, "
        r"created n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 2 more, removed web",
        summary,
    )


LANDED = (
    "aliases_added",
    "aliases_removed",
    "tokens_added",
    "tokens_removed",
    "nodes_written",
    "nodes_failed",
)


def summary_of(logs: list[dict[str, Any]]) -> dict[str, Any]:
    """The apply's one ``apply finished`` line: its summary and its counts."""
    (line,) = [line for line in logs if line["event"] == "apply finished"]
    return {"summary": line["summary"], **{field: line[field] for field in (*LANDED, "held_back")}}


def post_writes(cluster: Cluster, operation: str = "post") -> dict[str, float]:
    return {
        result: cluster.gauge("metadata_writes_total", operation=operation, result=result) or 0.0
        for result in ("ok", "error")
    }


def test_a_credential_whose_writes_nova_refuses_is_summed_up_as_nothing_written_and_all_failed(
    make_cluster: Any, sim_clients: ClientConfig
) -> None:
    """The summary counts what landed: with a reader's credential every write is refused (403), so no
    token and no node is counted written, and each of the three planned nodes is counted failed."""
    cluster = make_cluster(ingress_nodes=3, workers=1, os_cloud=sim_clients.readonly_cloud_name)
    cluster.want("app.cern.ch")
    with capture_logs() as logs, pytest.raises(ApplyError, match="403"):
        cluster.loop()

    line = summary_of(logs)
    assert re.fullmatch(
        r"\+0 -0 aliases \(\+0 -0 tokens\) on 0 of 4 nodes, 3 failed, \d+ ms", line.pop("summary")
    )
    assert line == dict.fromkeys((*LANDED, "held_back"), 0) | {"nodes_failed": 3}
    assert cluster.placement() == {node: {} for node in cluster.nodes}
    assert post_writes(cluster) == {"ok": 0, "error": 3}
    assert cluster.gauge("last_apply_success_timestamp_seconds") == 0


def test_a_summary_counts_the_writes_that_landed_and_those_that_failed_apart_the_leave_writes_included(
    make_cluster: Any,
) -> None:
    """One server refuses every write (403): ``old`` leaves DNS, so its removal is each server's leave write,
    sent first; the refusing server's fails, and it is sent nothing else. The two other servers lose ``old``
    (their leave writes) and take ``app`` (their make writes). Only their tokens count, the leave writes'
    included, the name counts neither as created nor as removed (its change did not land everywhere), and
    the metrics agree."""
    cluster = make_cluster(ingress_nodes=3, workers=1)
    cluster.want("old.cern.ch")
    cluster.settle()
    refusing = cluster.nodes[1]
    cluster.sim.state.inject_fault(
        api="nova", path_pattern=f"/servers/{cluster.server_id(refusing)}/metadata", status=403, times=None
    )
    before = post_writes(cluster), post_writes(cluster, "delete")

    cluster.want("app.cern.ch")
    with capture_logs() as logs, pytest.raises(ApplyError, match=re.escape(refusing)):
        cluster.loop()

    line = summary_of(logs)
    assert re.fullmatch(
        r"\+0 -0 aliases \(\+2 -2 tokens\) on 2 of 4 nodes, 1 failed, \d+ ms",
        line.pop("summary"),
    )
    assert line == {
        "aliases_added": 0,
        "aliases_removed": 0,
        "tokens_added": 2,
        "tokens_removed": 2,
        "nodes_written": 2,
        "nodes_failed": 1,
        "held_back": 0,
    }
    others = [node for node in cluster.nodes[:3] if node != refusing]
    assert {node: set(cluster.aliases(node)) for node in others} == {node: {"app"} for node in others}
    assert set(cluster.aliases(refusing)) == {"old"}
    after = post_writes(cluster), post_writes(cluster, "delete")
    # two make writes (POSTs) and two leave writes (each deletes the key ``old`` was alone in) landed; one
    # leave write failed
    assert [{result: a[result] - b[result] for result in a} for a, b in zip(after, before, strict=True)] == [
        {"ok": 2, "error": 0},
        {"ok": 2, "error": 1},
    ]


def test_the_alias_gauges_split_owned_from_unowned_and_count_what_status_flags(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=3, workers=1)
    first, worker = cluster.server_id(cluster.nodes[0]), cluster.server_id(cluster.nodes[-1])
    cluster.sim.state.set_metadata_direct(
        first, {**cluster.sim.state.metadata(first), "landb-alias": "legacy--load-0-"}
    )
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()

    def sample(name: str, **labels: str) -> float | None:
        return cluster.metrics.registry.get_sample_value(f"landb_webhook_{name}", labels)

    assert sample("aliases_published", ownership="owned") == 2
    assert sample("aliases_published", ownership="unowned") == 1  # legacy, set by hand
    assert sample("names_needing_attention") == 0
    assert sample("nodes_without_server") == 0

    # A worker carrying a name: `status` flags it (a non-ingress carrier), and so does the gauge.
    cluster.sim.state.set_metadata_direct(
        worker, {**cluster.sim.state.metadata(worker), "landb-alias": "stray--load-0-"}
    )
    cluster.provider.records()

    assert sample("names_needing_attention") == 1


def test_the_writer_lease_and_node_cache_gauges_are_read_when_scraped(make_cluster: Any) -> None:
    elected = make_cluster()
    assert elected.adapters.lease is not None
    elected.eventually(
        lambda: elected.metrics.registry.get_sample_value("landb_webhook_writer_lease_held") == 1,
        what="the writer lease gauge to show the lease held",
    )
    age = elected.metrics.registry.get_sample_value("landb_webhook_node_cache_age_seconds")
    assert age is not None and math.isfinite(age) and age >= 0  # synced (+Inf before the first list)

    elected.adapters.lease.stop()  # released: this replica may no longer write
    assert elected.metrics.registry.get_sample_value("landb_webhook_writer_lease_held") == 0

    alone = make_cluster(ingress_nodes=0, workers=0, leader_election=False)
    assert alone.metrics.registry.get_sample_value("landb_webhook_writer_lease_held") == 1


def test_a_replica_without_the_writer_lease_leaves_orphaned_claims_alone(make_cluster: Any) -> None:
    """Dropping a claim is a write: only the lease holder makes it (its own Records does)."""
    cluster = make_cluster()
    assert cluster.adapters.lease is not None
    orphan = ownership_record(Endpoint("gone.cern.ch", "A", ("192.0.2.1",)), OWNER)
    cluster.adapters.ownership.apply([orphan], [])
    cluster.adapters.lease.stop()  # released: another replica may hold it now

    cluster.provider.records()

    stored = cluster.sim.state.configmap("default", "landb-webhook-ownership") or {}
    kept = [decode_record(value).dns_name for value in (stored.get("data") or {}).values()]
    assert kept == [orphan.dns_name]


class LapsedLease:
    """A WriterLease whose tenure ends right after the apply has checked it: before its first write."""

    def held(self) -> bool:
        return True

    def holder(self) -> str:
        return "replica-b"

    def tenure(self) -> int | None:
        return 1

    def held_until(self, tenure: int) -> float:
        return -math.inf


def test_the_claim_write_is_fenced_too_and_nothing_is_written_once_the_lease_is_uncertain(
    make_cluster: Any,
) -> None:
    cluster = make_cluster()
    adapters = cluster.adapters
    provider = LandbProvider(
        Ports(adapters.nodes, adapters.servers, adapters.ownership, writer_lease=LapsedLease()),
        provider_options(cluster.settings),
        cluster.metrics,
    )
    record = Endpoint("app.cern.ch", "A", ("192.0.2.1",))

    with pytest.raises(ApplyError, match="apply abandoned before the ownership records were written"):
        provider.apply_changes(Changes(create=(record, ownership_record(record, OWNER))))

    assert api_writes(cluster.sim) == []
    assert adapters.ownership.records() == []
    refused = {"reason": "writer_lease_lost"}
    assert cluster.metrics.registry.get_sample_value("landb_webhook_refused_changes_total", refused) == 1


def test_records_says_when_a_node_joining_would_overflow_the_request_body_limit(make_cluster: Any) -> None:
    """The ApplyChanges of a node joining carries every name's addresses twice: past the body limit it
    is a 503 every loop and the node never carries a name. Records says so before it happens."""
    cluster = make_cluster(ingress_nodes=3, max_request_body=2**16)
    with capture_logs() as logs:
        cluster.want(*(f"app{i:02d}.cern.ch" for i in range(20)))
        cluster.settle()
    assert not [line for line in logs if line["event"].startswith("request body limit too small")]

    with capture_logs() as logs:
        cluster.want(*(f"app{i:02d}.cern.ch" for i in range(60)))
        cluster.settle()
        cluster.provider.records()
    [said] = [line for line in logs if line["event"].startswith("request body limit too small")]
    assert (said["names"], said["ingress_addresses"], said["limit_bytes"]) == (60, 3, 2**16)
    assert said["hint"].startswith("set LANDB_MAX_REQUEST_BODY to at least 1048576 ")


def test_the_read_after_an_apply_parses_nothing_the_apply_wrote_and_still_sees_the_rest(
    make_cluster: Any,
) -> None:
    """After a first publish of 1,000 names on 500 nodes the next Records parsed and indexed 500,000
    tokens it had just written. The apply hands what it wrote to the next read; what someone else changes
    meanwhile is read as usual."""
    cluster = make_cluster(ingress_nodes=3)
    cluster.want("app.cern.ch")
    cluster.settle()
    cluster.want("app.cern.ch", "web.cern.ch", "db.cern.ch")
    cluster.loop()  # writes web and db on every ingress node

    parsed = PARSED_VALUES.parsed
    records = cluster.provider.records()
    assert PARSED_VALUES.parsed == parsed
    assert sorted(e.dns_name for e in records if e.record_type == "A") == [
        "app.cern.ch",
        "db.cern.ch",
        "web.cern.ch",
    ]

    cluster.want("app.cern.ch", "web.cern.ch", "db.cern.ch", "new.cern.ch")
    cluster.loop()
    parsed = PARSED_VALUES.parsed
    hand = cluster.server_id(cluster.nodes[0])
    edited = {**cluster.sim.state.server(hand).metadata, "landb-alias9": "byhand--load-7-"}
    cluster.sim.state.set_metadata_direct(hand, edited)

    records = cluster.provider.records()
    assert PARSED_VALUES.parsed == parsed + 1  # the hand-made value only
    assert "byhand.cern.ch" in {e.dns_name for e in records}
    assert "new.cern.ch" in {e.dns_name for e in records}
