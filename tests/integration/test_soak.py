"""A short soak: consecutive steady-state loops write nothing and do not accumulate memory.

(bench/soak.py runs 2,000 loops against a ``landb-webhook serve`` process and reports its RSS.)

What is asserted, and why it cannot flake:

- zero writes: every loop plans no change, the simulator records no metadata write and the ownership
  ConfigMap keeps its resourceVersion -- exact counts, no timing involved;
- bounded memory: the memory Python has allocated and still holds (tracemalloc, after a full garbage
  collection), measured after a warm-up and again after LOOPS loops, grows by less than GROWTH_BOUND.
  It counts bytes, not time, and ignores memory the allocator keeps but Python does not use (which is
  what makes RSS jumpy). A leak of one loop's records (about 40 endpoints, several KiB) would pass the
  bound within LOOPS loops; what legitimately varies between two snapshots (connection pools, the watch
  thread's current event, openstacksdk's and keystoneauth's small caches) stays far below it.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from landb_webhook.endpoint import Changes
from support.provider_cluster import api_writes

ALIASES = 20
WARMUP = 5
LOOPS = 40
GROWTH_BOUND = 256 * 1024
"""Bytes; a leak of about 6 KiB per loop or more fails (measured: ~40 KiB held by openstacksdk and
keystoneauth after 60 loops, and flat RSS over 2,000 loops in bench/soak.py)."""


def held_bytes(cluster: Any) -> int:
    cluster.sim.state.reset_api_calls()  # the simulator's own log of calls is not the webhook's memory
    gc.collect()
    current, _peak = tracemalloc.get_traced_memory()
    return current


def test_steady_state_loops_write_nothing_and_hold_no_more_memory(make_cluster: Any) -> None:
    cluster = make_cluster(leader_election=False)
    cluster.want(*(f"soak{i:02d}.cern.ch" for i in range(ALIASES)))
    cluster.settle()
    writes = len(api_writes(cluster.sim))
    claims = cluster.sim.state.configmap("default", "landb-webhook-ownership")["metadata"]["resourceVersion"]

    tracemalloc.start()
    try:
        for _ in range(WARMUP):
            assert cluster.loop() == Changes()
        before = held_bytes(cluster)
        for _ in range(LOOPS):
            assert cluster.loop() == Changes()
        after = held_bytes(cluster)
    finally:
        tracemalloc.stop()

    assert len(api_writes(cluster.sim)) == writes
    assert cluster.sim.state.configmap("default", "landb-webhook-ownership")["metadata"][
        "resourceVersion"
    ] == (claims)
    assert after - before < GROWTH_BOUND, f"{after - before} bytes more held after {LOOPS} loops"
