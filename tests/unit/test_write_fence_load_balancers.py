"""The write fence on load balancer tag writes: each is sent only while the writer surely holds the lease,
and losing it during the load balancers' make writes stops the apply before any server is written."""

from __future__ import annotations

from collections.abc import Sequence

from test_write_fence import MARGIN, Clock, ClockedLease, CountingStore, plan_for

from landb_webhook.backends import LoadBalancer
from landb_webhook.deadline import reply_deadline
from landb_webhook.landb.loadbalancers import TagPlan, TagWrite
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.executor import PlanExecutor
from landb_webhook.provider.apply.fence import WriteFence
from landb_webhook.provider.apply.loadbalancers import LoadBalancerPath, LoadBalancers, TagWrites
from landb_webhook.provider.apply.writes import write_in_order


class CountingLoadBalancers:
    """A LoadBalancerStore double: counts tag writes, notes each one's reply deadline, loses the lease
    after the first."""

    def __init__(self, lease: ClockedLease) -> None:
        self.writes: list[str] = []
        self.deadlines: list[float | None] = []
        self._lease = lease

    def load_balancers(self) -> Sequence[LoadBalancer]:
        return []

    def update_tags(self, load_balancer_id: str, add: Sequence[str], remove: Sequence[str]) -> None:
        self.writes.append(load_balancer_id)
        self.deadlines.append(reply_deadline())
        self._lease.lose()


def tag_writes(store: CountingLoadBalancers, metrics: Metrics) -> TagWrites:
    path = LoadBalancerPath(store, metrics, dns_domain="cern.ch", dry_run=False, concurrency=1, max_age=30)
    plan = TagPlan(
        make_writes=(TagWrite("lb-1", add=("new-a",)), TagWrite("lb-2", add=("new-b",))),
        break_writes=(TagWrite("lb-3", remove=("old-c",)),),
    )
    load_balancers = LoadBalancers(
        tuple(LoadBalancer(f"lb-{i}", f"svc-{i}", f"188.184.30.{i}") for i in (1, 2, 3))
    )
    return TagWrites(path, plan, load_balancers)


def test_losing_the_lease_during_the_load_balancer_makes_sends_nothing_more() -> None:
    clock = Clock()
    lease = ClockedLease(ends=clock.now + 3 * MARGIN)
    servers = CountingStore(lease, after=99)
    lbs = CountingLoadBalancers(lease)
    metrics = Metrics.create(process_metrics=False)
    executor = PlanExecutor(servers, concurrency=2, dry_run=False, metrics=metrics)

    outcome = write_in_order(
        executor,
        [plan_for("a")],
        WriteFence(lease, tenure=1, margin=MARGIN, clock=clock),
        tag_writes(lbs, metrics),
    )

    assert outcome.abandoned is not None
    assert lbs.writes == ["lb-1"]  # the second load balancer's check already failed
    assert lbs.deadlines == [lease.ends]  # and the first ran under the tenure's end as its deadline
    assert servers.requests == []  # no server written, no removal anywhere
