"""The write fence: a request is sent only while this writer surely still holds the writer lease for one
upstream timeout more, in the tenure its apply started in; the first one that is not stops the apply.

The lease here is a double driven by a test clock (the elector's own tenure and renewal rules are tested
against the Lease API in tests/integration/test_lease.py); requests are counted, no time is measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest

from landb_webhook.backends import Node, Server
from landb_webhook.deadline import reply_deadline
from landb_webhook.landb.names import LoadToken
from landb_webhook.landb.plan import MetadataWrite, ServerPlan, ServerState
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.executor import PlanExecutor
from landb_webhook.provider.apply.fence import WriteFence, WriterLeaseLost
from landb_webhook.provider.apply.writes import write_in_order

MARGIN = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ClockedLease:
    """A WriterLease double: tenure 1, surely held until ``ends``; ``lose()`` ends the tenure."""

    def __init__(self, ends: float) -> None:
        self.ends = ends
        self.current: int | None = 1

    def held(self) -> bool:
        return self.current is not None

    def holder(self) -> str:
        return "replica-a"

    def tenure(self) -> int | None:
        return self.current

    def held_until(self, tenure: int) -> float:
        return self.ends if tenure == self.current else -math.inf

    def lose(self) -> None:
        self.current = None


class CountingStore:
    """A ServerStore double that counts the requests it receives, notes the reply deadline each one ran
    under, and runs ``after_request`` (the moment the lease is lost) after the ``after``-th."""

    def __init__(self, lease: ClockedLease, after: int) -> None:
        self.requests: list[tuple[str, str | None]] = []
        self.deadlines: list[float | None] = []
        self._lease, self._after = lease, after

    def servers_for(self, nodes: Sequence[Node]) -> Mapping[str, Server]:
        return {}

    def set_metadata(self, server_id: str, items: Mapping[str, str]) -> None:
        self._request(server_id, None)

    def delete_metadata(self, server_id: str, key: str) -> None:
        self._request(server_id, key)

    def max_metadata_items(self) -> int:
        return 128

    def unavailable(self) -> str | None:
        return None

    def _request(self, server_id: str, key: str | None) -> None:
        self.requests.append((server_id, key))
        self.deadlines.append(reply_deadline())
        if len(self.requests) == self._after:
            self._lease.lose()


def plan_for(name: str) -> ServerPlan:
    """A make POST adding ``new-<name>`` and a break DELETE removing ``old-<name>``."""
    return ServerPlan(
        ServerState(f"id-{name}", f"vm-{name}", f"node-{name}", {}),
        added=(LoadToken(f"new-{name}", 0),),
        removed=(LoadToken(f"old-{name}", 0),),
        make_write=MetadataWrite({"landb-alias1": f"new-{name}--load-0-"}),
        break_write=MetadataWrite({}, ("landb-alias2",)),
    )


def test_a_fence_passes_while_the_tenure_lasts_the_margin_and_names_why_it_refuses() -> None:
    clock = Clock()
    lease = ClockedLease(ends=clock.now + MARGIN)
    fence = WriteFence(lease, tenure=1, margin=MARGIN, clock=clock)

    assert fence.check("post on node-a") == lease.ends
    clock.now += 0.5
    with pytest.raises(WriterLeaseLost, match=r"before post on node-a: .*only 4\.5 s more, less than the 5"):
        fence.check("post on node-a")
    lease.lose()
    with pytest.raises(WriterLeaseLost, match="lost or not renewed in time"):
        fence.check("post on node-a")


def test_a_later_tenure_does_not_reopen_the_fence_of_an_apply_begun_in_an_earlier_one() -> None:
    clock = Clock()
    lease = ClockedLease(ends=clock.now + 3 * MARGIN)
    fence = WriteFence(lease, tenure=1, margin=MARGIN, clock=clock)
    lease.current = 2  # lapsed and taken again: another replica may have written in between

    with pytest.raises(WriterLeaseLost):
        fence.check("post on node-a")


@pytest.mark.parametrize("concurrency", [1, 3])
def test_losing_the_lease_mid_apply_stops_every_later_request(concurrency: int) -> None:
    clock = Clock()
    lease = ClockedLease(ends=clock.now + 3 * MARGIN)
    store = CountingStore(lease, after=1)
    executor = PlanExecutor(store, concurrency=concurrency, dry_run=False, metrics=Metrics.create())
    plans = [plan_for(name) for name in "abcd"]

    outcome = write_in_order(executor, plans, WriteFence(lease, tenure=1, margin=MARGIN, clock=clock))

    assert outcome.abandoned is not None
    assert "apply abandoned" in str(outcome.abandoned)
    # Only the requests checked before the lease was lost were sent: with one at a time, the first.
    assert len(store.requests) <= concurrency
    assert all(key is None for _, key in store.requests)  # no removal ever follows an abandoned make
    if concurrency == 1:
        assert store.requests == [("id-a", None)]


def test_a_request_runs_under_the_earlier_of_its_reply_deadline_and_the_tenure_end() -> None:
    """The OpenStack adapter starts no retry that could not finish by the reply deadline: capped at the
    tenure's end, a retry is never sent once the lease may have passed on."""
    clock = Clock()
    lease = ClockedLease(ends=clock.now + 3 * MARGIN)
    store = CountingStore(lease, after=0)
    executor = PlanExecutor(store, concurrency=2, dry_run=False, metrics=Metrics.create())

    outcome = write_in_order(
        executor, [plan_for("a")], WriteFence(lease, tenure=1, margin=MARGIN, clock=clock)
    )

    assert outcome.abandoned is None
    assert store.requests == [("id-a", None), ("id-a", "landb-alias2")]
    assert store.deadlines == [lease.ends, lease.ends]
