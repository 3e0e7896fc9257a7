"""Properties of THE CARRIER RULE (provider/read/health.py: judge, alias_carriers, Placement)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.backends import Node
from landb_webhook.provider.read.health import HealthPolicy, Placement, judge

NOW = 1_800_000_000.0
SERVERS = [f"s{i}" for i in range(6)]

times = st.none() | st.floats(min_value=NOW - 2000, max_value=NOW, allow_nan=False)
policies = st.builds(
    HealthPolicy,
    grace_seconds=st.floats(min_value=0, max_value=1500, allow_nan=False),
    cordoned_carry=st.booleans(),
)


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    deleting = draw(st.booleans())
    return Node(
        name="n",
        server_id=None,
        internal_ips=(),
        is_ingress=True,
        ready=draw(st.booleans()),
        ready_changed_at=draw(times),
        deleting=deleting,
        deleting_since=draw(times) if deleting else None,
        unschedulable=draw(st.booleans()),
        controller_ready=draw(st.none() | st.booleans()),
        controller_changed_at=draw(times),
    )


def unhealthy_since(node: Node, policy: HealthPolicy) -> list[float]:
    """The moments each of the node's problems began (an unknown one: long ago), written out longhand."""
    since: list[float] = []
    if node.deleting:
        since.append(node.deleting_since if node.deleting_since is not None else -math.inf)
    if not node.ready:
        since.append(node.ready_changed_at if node.ready_changed_at is not None else -math.inf)
    if node.controller_ready is False:
        since.append(node.controller_changed_at if node.controller_changed_at is not None else -math.inf)
    if node.unschedulable and not policy.cordoned_carry:
        since.append(-math.inf)
    return since


@given(nodes(), policies, st.floats(min_value=0, max_value=3000, allow_nan=False))
def test_an_unhealthy_node_carries_exactly_until_its_grace_period_ends(
    node: Node, policy: HealthPolicy, later: float
) -> None:
    now = NOW + later
    since = unhealthy_since(node, policy)
    verdict = judge(node, policy, now)
    assert verdict.carries == all(now - start < policy.grace_seconds for start in since)
    assert verdict.healthy == (not since)


@given(nodes(), policies, st.floats(min_value=0, max_value=3000, allow_nan=False))
def test_a_node_that_stopped_carrying_does_not_come_back_while_nothing_changes(
    node: Node, policy: HealthPolicy, later: float
) -> None:
    if not judge(node, policy, NOW).carries:
        assert not judge(node, policy, NOW + later).carries


@given(st.builds(Node, st.just("n"), st.none(), st.just(()), st.just(True)), policies)
def test_a_healthy_node_always_carries(node: Node, policy: HealthPolicy) -> None:
    assert judge(node, policy, NOW).carries and judge(node, policy, NOW).healthy


@st.composite
def placements(draw: st.DrawFn) -> Placement:
    ingress = frozenset(draw(st.sets(st.sampled_from(SERVERS))))
    eligible = frozenset(draw(st.sets(st.sampled_from(sorted(ingress))))) if ingress else frozenset()
    labels = draw(st.lists(st.sampled_from(["app", "web", "db"]), unique=True))
    current = {label: draw(st.sets(st.sampled_from(SERVERS))) for label in labels}
    return Placement(ingress=ingress, eligible=eligible, current=current)


@given(placements(), st.sampled_from(["app", "web", "db", "new"]))
def test_the_last_ingress_carrier_of_an_alias_is_never_taken_away(placement: Placement, label: str) -> None:
    chosen = placement.carriers_of(label)
    current = frozenset(placement.current.get(label, ()))
    assert chosen <= placement.ingress
    if placement.ingress:
        assert chosen, "an alias must keep at least one carrier while any ingress node exists"
    if placement.ingress and not placement.eligible:  # no ingress node may carry: they stay
        assert current & placement.ingress <= chosen, "with no healthy node, no ingress carrier is removed"
    else:
        assert chosen == placement.eligible


@given(placements())
def test_once_applied_the_placement_asks_for_nothing_more(placement: Placement) -> None:
    """Settle: carriers written as chosen are chosen again by the next loop (same nodes, same time)."""
    labels = [*placement.current, "new"]
    applied = {label: placement.carriers_of(label) for label in labels}
    again = Placement(placement.ingress, placement.eligible, applied)
    assert {label: again.carriers_of(label) for label in labels} == applied
