"""The retry policy (adapters/retry.py) and the reply deadline every upstream retry is held to
(deadline.py): pure rules, and the deadline reaching the threads that make the calls."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.adapters.retry import Failure, RetryPolicy, failure_of_status, parse_retry_after
from landb_webhook.backends import Node, Server
from landb_webhook.deadline import answering_by, reply_deadline
from landb_webhook.landb.plan import MetadataWrite, ServerPlan, ServerState
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.executor import PlanExecutor
from landb_webhook.provider.apply.fence import UNFENCED
from landb_webhook.provider.apply.writes import write_in_order
from landb_webhook.webhook.api import ProviderCalls
from support.default_options import retry_policy


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (500, Failure.TRANSIENT),
        (502, Failure.TRANSIENT),
        (503, Failure.TRANSIENT),
        (504, Failure.TRANSIENT),
        (429, Failure.TRANSIENT),
        (408, Failure.TRANSIENT),
        (409, Failure.CONFLICT),
        (400, Failure.FINAL),
        (401, Failure.FINAL),
        (403, Failure.FINAL),
        (404, Failure.FINAL),
    ],
)
def test_statuses_are_sorted_into_transient_conflict_and_final(status: int, failure: Failure) -> None:
    assert failure_of_status(status) is failure


@given(
    policy=st.builds(
        RetryPolicy,
        transient_retries=st.integers(0, 10),
        conflict_retries=st.integers(0, 5),
        base_delay=st.floats(0.01, 1),
        conflict_delay=st.floats(0.01, 1),
        max_delay=st.floats(0.01, 5),
    ),
    failure=st.sampled_from([Failure.TRANSIENT, Failure.CONFLICT]),
    seed=st.integers(0, 2**32),
)
def test_delays_grow_exponentially_within_their_jitter_and_cap_and_stop_at_the_budget(
    policy: RetryPolicy, failure: Failure, seed: int
) -> None:
    chance = random.Random(seed)
    first, limit = (
        (policy.base_delay, policy.transient_retries)
        if failure is Failure.TRANSIENT
        else (policy.conflict_delay, policy.conflict_retries)
    )
    for retry in range(1, limit + 1):
        delay = policy.delay(failure, retry, None, chance)
        step = min(policy.max_delay, first * 2 ** (retry - 1))
        assert delay is not None and step / 2 <= delay <= step
    assert policy.delay(failure, limit + 1, None, chance) is None


def test_final_failures_are_never_retried() -> None:
    assert retry_policy().delay(Failure.FINAL, 1, None, random.Random(0)) is None


@given(retry_after=st.floats(0, 600), seed=st.integers(0, 2**32))
def test_retry_after_is_the_least_delay(retry_after: float, seed: int) -> None:
    delay = retry_policy().delay(Failure.TRANSIENT, 1, retry_after, random.Random(seed))
    assert delay is not None and delay >= retry_after


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None


def test_the_deadline_is_the_earliest_one_set() -> None:
    assert reply_deadline() is None
    with answering_by(100.0):
        assert reply_deadline() == 100.0
        with answering_by(200.0):
            assert reply_deadline() == 100.0
        with answering_by(50.0):
            assert reply_deadline() == 50.0
    assert reply_deadline() is None


def test_a_provider_call_runs_knowing_when_its_reply_is_due() -> None:
    calls = ProviderCalls(deadline=7.0)
    try:
        before = time.monotonic()
        seen = asyncio.run(calls.read(reply_deadline))
        after = time.monotonic()
    finally:
        calls.close()
    assert seen is not None and before + 7.0 <= seen <= after + 7.0


class _RecordingStore:
    """A ServerStore that notes, per write, the reply deadline its thread sees."""

    def __init__(self) -> None:
        self.seen: dict[str, float | None] = {}
        self._lock = threading.Lock()

    def servers_for(self, nodes: Sequence[Node]) -> Mapping[str, Server]:
        return {}

    def set_metadata(self, server_id: str, items: Mapping[str, str]) -> None:
        with self._lock:
            self.seen[server_id] = reply_deadline()

    def delete_metadata(self, server_id: str, key: str) -> None:
        raise AssertionError("not expected")

    def max_metadata_items(self) -> int:
        return 128


def test_parallel_writes_see_the_deadline_of_the_call_that_planned_them() -> None:
    store = _RecordingStore()
    executor = PlanExecutor(
        store, concurrency=4, dry_run=False, metrics=Metrics.create(process_metrics=False)
    )
    plans = [
        ServerPlan(
            ServerState(f"server-{i}", f"node-{i}", f"node-{i}", {}),
            added=(),
            removed=(),
            make_write=MetadataWrite({"landb-alias": "app--load-0-"}),
            break_write=MetadataWrite(),
        )
        for i in range(8)
    ]
    with answering_by(1234.5):
        write_in_order(executor, plans, UNFENCED)
    assert store.seen == {f"server-{i}": 1234.5 for i in range(8)}
