"""The carrier rule's verdicts by example."""

from __future__ import annotations

from typing import Any

from landb_webhook.backends import Node
from landb_webhook.provider.read.health import HealthPolicy, judge

NOW = 1_800_000_000.0
POLICY = HealthPolicy(grace_seconds=300, cordoned_carry=True)


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
