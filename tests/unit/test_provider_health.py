"""The carrier rule's verdicts by example, and the memory of the Ns the provider removed."""

from __future__ import annotations

from typing import Any

from landb_webhook.landb.indices import LostIndices
from landb_webhook.landb.names import LoadToken
from landb_webhook.landb.plan import MetadataWrite, Plan, ServerPlan, ServerState
from landb_webhook.ports import Node
from landb_webhook.provider.health import HealthPolicy, judge

NOW = 1_800_000_000.0
POLICY = HealthPolicy(grace_seconds=300)


def node(**health: Any) -> Node:
    return Node("n", None, (), True, **health)


def test_each_problem_is_named_and_counted_from_its_own_start() -> None:
    verdict = judge(
        node(ready=False, ready_changed_at=NOW - 10, deleting=True, deleting_since=NOW - 20), POLICY, NOW
    )
    assert verdict.problems == ("being deleted", "not Ready")
    assert verdict.in_grace
    assert not judge(node(ready=False, ready_changed_at=NOW - 300), POLICY, NOW).carries
    assert not judge(node(ready=False), POLICY, NOW).carries, "an unknown start is long ago"


def test_a_cordon_counts_only_when_cordoned_nodes_must_not_carry() -> None:
    assert judge(node(unschedulable=True), POLICY, NOW).healthy
    strict = HealthPolicy(grace_seconds=300, cordoned_carry=False)
    assert judge(node(unschedulable=True), strict, NOW).problems == ("cordoned",)
    assert not judge(node(unschedulable=True), strict, NOW).carries


def test_no_pod_selector_means_the_controller_is_not_looked_at() -> None:
    assert judge(node(controller_ready=None), POLICY, NOW).healthy
    lost = judge(node(controller_ready=False, controller_changed_at=NOW - 1), POLICY, NOW)
    assert lost.problems == ("no Ready ingress controller pod",) and lost.in_grace


def server_plan(server_id: str, added: tuple[LoadToken, ...], removed: tuple[LoadToken, ...]) -> ServerPlan:
    server = ServerState(server_id, server_id, server_id, {})
    return ServerPlan(server, added, removed, MetadataWrite(), MetadataWrite())


def test_lost_indices_remember_removals_and_forget_comebacks_and_withdrawn_names() -> None:
    memory = LostIndices()
    memory.record(
        Plan(servers=(server_plan("a", (), (LoadToken("app", 2), LoadToken("web", 0))),)), withdrawn=()
    )
    assert memory.preferred() == {"app": {"a": 2}, "web": {"a": 0}}
    memory.record(Plan(servers=(server_plan("a", (LoadToken("app", 2),), ()),)), withdrawn={"web"})
    assert memory.preferred() == {}


def test_lost_indices_stay_within_their_limit_dropping_the_oldest() -> None:
    memory = LostIndices(limit=2)
    for server_id in ("a", "b", "c"):
        memory.record(Plan(servers=(server_plan(server_id, (), (LoadToken("app", 1),)),)), withdrawn=())
    assert memory.preferred() == {"app": {"b": 1, "c": 1}}
