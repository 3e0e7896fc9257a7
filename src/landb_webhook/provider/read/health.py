"""THE CARRIER RULE: which ingress nodes carry the aliases, given their health.

A carrier must be an ingress node that is healthy: Ready, not being deleted, (optionally) not cordoned
and (optionally) running a Ready ingress-controller pod. A node that stops being healthy keeps carrying
for a grace period, counted from when it stopped (the Ready condition's lastTransitionTime, the
deletionTimestamp, the controller pod's readiness change), so a kubelet restart is not a DNS change. A
cordon, being deliberate, has no grace. A time the API did not give counts as long ago.

Health never takes an alias off the air: when no ingress node is healthy, every alias stays on the
ingress nodes that carry it now (or goes to every ingress node, if none does), and the caller says so
loudly. The rule is a pure function of the nodes, the current carriers and the time, so the same
inputs give the same answer in AdjustEndpoints and ApplyChanges, and a loop settles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from landb_webhook.backends import Node

NO_CONTROLLER = "no Ready ingress controller pod"


@dataclass(frozen=True, kw_only=True)
class HealthPolicy:
    grace_seconds: float
    """How long an unhealthy node keeps carrying, from the moment it became unhealthy
    (LANDB_NODE_GRACE_PERIOD)."""
    cordoned_carry: bool
    """Whether a cordoned (unschedulable) node keeps carrying (LANDB_CORDONED_NODES_CARRY)."""


@dataclass(frozen=True)
class Verdict:
    node: str
    carries: bool
    problems: tuple[str, ...] = ()
    """Why the node is unhealthy (empty when it is healthy)."""

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def in_grace(self) -> bool:
        """Unhealthy, but still carrying until its grace period ends."""
        return self.carries and not self.healthy


def judge(node: Node, policy: HealthPolicy, now: float) -> Verdict:
    """Whether an ingress node carries aliases at ``now`` (epoch seconds), and why not."""
    problems: list[tuple[str, float]] = []
    if node.deleting:
        problems.append(("being deleted", _known(node.deleting_since)))
    if not node.ready:
        problems.append(("not Ready", _known(node.ready_changed_at)))
    if node.controller_ready is False:
        problems.append((NO_CONTROLLER, _known(node.controller_changed_at)))
    if node.unschedulable and not policy.cordoned_carry:
        problems.append(("cordoned", -math.inf))
    carries = all(now - since < policy.grace_seconds for _, since in problems)
    return Verdict(node.name, carries, tuple(problem for problem, _ in problems))


def _known(timestamp: float | None) -> float:
    return -math.inf if timestamp is None else timestamp


def alias_carriers(
    eligible: frozenset[str], ingress: frozenset[str], current: Iterable[str]
) -> frozenset[str]:
    """The servers that must carry one alias: the eligible ones, or -- when none is -- never fewer than
    the ingress servers carrying it now (all ingress servers if it has no ingress carrier yet)."""
    if eligible:
        return eligible
    return (ingress & frozenset(current)) or ingress


@dataclass(frozen=True)
class Placement:
    """Where the aliases go at one moment: the one answer AdjustEndpoints and ApplyChanges both use."""

    ingress: frozenset[str]
    """Server ids of the ingress nodes, healthy or not."""
    eligible: frozenset[str]
    """Server ids of the ingress nodes that carry (healthy, or unhealthy within the grace period)."""
    current: Mapping[str, Iterable[str]]
    """Alias label -> server ids carrying it now."""

    def carriers_of(self, label: str) -> frozenset[str]:
        return alias_carriers(self.eligible, self.ingress, self.current.get(label, ()))
