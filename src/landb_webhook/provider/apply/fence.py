"""The write fence: a writer stops writing as soon as it cannot be sure it still holds the writer lease.

Nova takes no condition on a metadata write, and every write sends whole ``landb-alias*`` values
computed from the inventory read when the apply began. A writer paused long enough (a stopped
process, a starved node, an API server out of reach) for another replica to take the Lease and
write would, on waking, overwrite that replica's work with its stale plan. So before each request
(every Nova POST and DELETE, every claim write) the writer checks that the tenure its apply
started in still lasts at least ``margin`` seconds by the monotonic clock; if not, nothing more is
sent and the apply is abandoned with a 503 (external-dns' next loop, on the holder, plans afresh).

``margin`` is the upstream timeout: a request that passed the check has been answered or given up
by the client before the tenure can end, and no other replica takes the Lease before it has gone
unrenewed for the lease duration, which is longer again. What no check can cover is a pause
between the check and the send longer than that: see docs/architecture.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from landb_webhook.backends import UpstreamError, WriterLease
from landb_webhook.deadline import answering_by
from landb_webhook.provider.interface import ApplyError


class WriterLeaseLost(ApplyError):
    """The writer can no longer be sure it holds the lease: the rest of the apply was not sent."""


@dataclass(frozen=True)
class WriteFence:
    """One apply's fence: the lease tenure it started in, and how long that tenure must still last."""

    lease: WriterLease | None
    """None: the only replica (leader election off), never fenced."""
    tenure: int = 0
    margin: float = 0.0
    clock: Callable[[], float] = time.monotonic

    def check(self, before: str) -> float:
        """The moment the tenure surely ends (infinity without a lease); raises WriterLeaseLost when
        fewer than ``margin`` seconds are left. ``before`` names the write, for the message."""
        if self.lease is None:
            return math.inf
        ends = self.lease.held_until(self.tenure)
        left = ends - self.clock()
        if left >= self.margin:
            return ends
        why = (
            "the writer lease was lost or not renewed in time"
            if left <= 0
            else f"the writer lease is sure for only {left:.1f} s more, less than the {self.margin:g} s "
            "a request may take"
        )
        raise WriterLeaseLost(
            f"writer lease no longer certain, apply abandoned before {before}: {why}; "
            "the replica holding it applies the changes at its next loop"
        )


def send_fenced(
    fence: WriteFence, before: str, write: Callable[[], None]
) -> UpstreamError | WriterLeaseLost | None:
    """One write, sent only if the fence passes right before it (and retried only within the tenure it
    checked); an upstream failure or the fence's refusal is returned, a bug raised."""
    try:
        tenure_ends = fence.check(before)
    except WriterLeaseLost as lost:
        return lost
    try:
        with answering_by(tenure_ends):
            write()
    except UpstreamError as error:
        return error
    return None


UNFENCED = WriteFence(lease=None)
"""For the only replica: leader election off."""
