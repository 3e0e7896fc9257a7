"""Upstream faults injected through the simulator, seen through the real openstacksdk: what is retried,
how often, after how long, and never past the reply deadline (adapters/retry.py).

Backoff sleeps are virtual (support.fake_time): tests assert the exact calls made and the delays asked
for, never how long anything took.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import OpenStackSession
from landb_webhook.adapters.retry import RetryPolicy
from landb_webhook.backends import UpstreamError
from landb_webhook.deadline import answering_by
from support.default_options import openstack_options, retry_policy
from support.fake_time import FakeTime

LANDB_KEYS = {"landb-mainuser": "it-ops", "landb-responsible": "it-ops"}
ALIAS = {"landb-alias": "app--load-0-"}
METADATA_POST = "/metadata$"
POLICY = RetryPolicy(
    transient_retries=4, conflict_retries=2, base_delay=0.2, conflict_delay=0.5, max_delay=2.0
)

BUDGET = 60.0
"""Seconds an operation may take outside a reply deadline: ample, so that only the retry budget ends the
retries in these tests, however slow the machine (the deadline tests set their own)."""

MakeStore = Callable[..., OpenStackServerStore]


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def store(make_server_store: MakeStore, fake_time: FakeTime) -> OpenStackServerStore:
    """A store with the default policy, virtual sleeps, seeded jitter, authenticated already."""
    made = make_server_store(
        retry=POLICY,
        budget=BUDGET,
        clock=fake_time.monotonic,
        sleep=fake_time.sleep,
        chance=random.Random(8),
    )
    made.max_metadata_items()  # authenticated and discovered: only the call under test remains
    return made


def posts(state: Any) -> list[int]:
    return [call.status for call in state.api_calls("nova") if call.method == "POST"]


def token_requests(state: Any) -> list[int]:
    return [
        call.status
        for call in state.api_calls("keystone")
        if call.method == "POST" and call.path.endswith("/auth/tokens")
    ]


def assert_backoff(delays: list[float], first: float, cap: float = POLICY.max_delay) -> None:
    """Each delay is its exponential step (capped), jittered into [1/2, 1] of it."""
    for retry, delay in enumerate(delays, start=1):
        step = min(cap, first * 2 ** (retry - 1))
        assert step / 2 <= delay <= step, (retry, delay)


@pytest.fixture
def server(simulator: Any) -> str:
    server_id: str = simulator.state.add_server("cluster-node-0", LANDB_KEYS)
    return server_id


# -- transient failures: retried with bounded, jittered exponential backoff ----------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_a_transient_failure_is_retried_until_it_succeeds(
    simulator: Any, store: Any, server: str, fake_time: FakeTime, status: int
) -> None:
    state = simulator.state
    state.reset_api_calls()
    fault = state.inject_fault(api="nova", method="POST", path_pattern=METADATA_POST, status=status, times=2)
    store.set_metadata(server, ALIAS)
    assert fault.hits == 2
    assert posts(state) == [status, status, 200]
    assert len(fake_time.delays) == 2
    assert_backoff(fake_time.delays, POLICY.base_delay)
    assert state.metadata(server) == {**LANDB_KEYS, **ALIAS}


def test_a_lasting_5xx_is_tried_one_plus_the_retry_budget_times(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.reset_api_calls()
    state.inject_fault(api="nova", method="POST", path_pattern=METADATA_POST, status=503, times=None)
    with pytest.raises(UpstreamError) as raised:
        store.set_metadata(server, ALIAS)
    assert (raised.value.upstream, raised.value.retryable) == ("nova", True)
    assert posts(state) == [503] * (1 + POLICY.transient_retries)
    assert_backoff(fake_time.delays, POLICY.base_delay)
    assert fake_time.delays[-1] <= POLICY.max_delay
    assert state.metadata(server) == LANDB_KEYS


def test_a_connection_reset_is_retried(simulator: Any, store: Any, server: str, fake_time: FakeTime) -> None:
    state = simulator.state
    state.reset_api_calls()
    state.inject_fault(api="nova", method="POST", path_pattern=METADATA_POST, reset=True)
    store.set_metadata(server, ALIAS)
    assert posts(state) == [0, 200]  # 0: the connection was dropped without a reply
    assert len(fake_time.delays) == 1
    assert state.metadata(server) == {**LANDB_KEYS, **ALIAS}


def test_a_write_whose_reply_is_lost_is_sent_again_and_lands_once(
    simulator: Any, store: Any, server: str
) -> None:
    state = simulator.state
    state.clear_metadata_history()
    state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_POST, reset=True, after_processing=True
    )
    store.set_metadata(server, ALIAS)
    history = state.metadata_history(server)
    assert [change.method for change in history] == ["POST", "POST"]
    assert history[0].metadata == history[1].metadata == {**LANDB_KEYS, **ALIAS}  # a merge is idempotent


def test_a_delete_retried_after_its_reply_was_lost_counts_as_done(
    simulator: Any, store: Any, fake_time: FakeTime
) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-1", {**LANDB_KEYS, "landb-alias2": "old--load-0-"})
    state.reset_api_calls()
    state.inject_fault(api="nova", method="DELETE", status=502, after_processing=True)
    store.delete_metadata(server, "landb-alias2")
    deletes = [call.status for call in state.api_calls("nova") if call.method == "DELETE"]
    assert deletes == [502, 404]
    assert state.metadata(server) == LANDB_KEYS


def test_a_reply_slower_than_the_call_timeout_is_retried(
    simulator: Any, make_server_store: MakeStore, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    slow = make_server_store(timeout=0.3, retry=POLICY, clock=fake_time.monotonic, sleep=fake_time.sleep)
    slow.max_metadata_items()
    fault = state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_POST, status=503, delay=3.0, times=1
    )
    slow.set_metadata(server, ALIAS)
    assert fault.hits == 1
    assert len(fake_time.delays) == 1
    assert state.metadata(server) == {**LANDB_KEYS, **ALIAS}


# -- the deadline and Retry-After ----------------------------------------------------------------------


def test_no_retry_starts_that_could_not_finish_before_the_reply_deadline(
    simulator: Any, make_server_store: MakeStore, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    timeout = 0.3
    slow = make_server_store(
        timeout=timeout,
        retry=retry_policy(transient_retries=10),
        clock=fake_time.monotonic,
        sleep=fake_time.sleep,
        chance=random.Random(3),
    )
    slow.max_metadata_items()
    state.reset_api_calls()
    fault = state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_POST, status=None, delay=30, times=None
    )
    deadline = fake_time.monotonic() + 5.0
    with answering_by(deadline), pytest.raises(UpstreamError) as raised:
        slow.set_metadata(server, ALIAS)
    assert "timed out" in raised.value.reason
    assert fake_time.sleeps, "a timeout is transient: it is retried while there is time"
    for sleep in fake_time.sleeps:
        assert sleep.at + sleep.seconds + timeout <= deadline
    assert fault.hits == len(fake_time.sleeps) + 1 < 1 + 10


def test_retry_after_is_honoured_as_the_least_delay(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.reset_api_calls()
    state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_POST, status=503, headers={"Retry-After": "3"}
    )
    store.set_metadata(server, ALIAS)
    assert posts(state) == [503, 200]
    assert fake_time.delays == [3.0]


def test_retry_after_as_an_http_date(simulator: Any, store: Any, server: str, fake_time: FakeTime) -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=6), usegmt=True)
    simulator.state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_POST, status=429, headers={"Retry-After": later}
    )
    store.set_metadata(server, ALIAS)
    (delay,) = fake_time.delays
    assert 3.0 <= delay <= 6.0  # whole seconds in the header, and the time the first call took


def test_a_retry_after_past_the_deadline_is_not_waited_for(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.reset_api_calls()
    state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_POST, status=503, headers={"Retry-After": "120"}
    )
    with answering_by(fake_time.monotonic() + 10), pytest.raises(UpstreamError) as raised:
        store.set_metadata(server, ALIAS)
    assert raised.value.retryable
    assert posts(state) == [503]
    assert fake_time.delays == []


# -- conflicts: a bounded number of retries, then reported -------------------------------------------


def test_a_locked_server_is_retried_a_bounded_number_of_times_then_reported(
    simulator: Any, store: Any, server: str, fake_time: FakeTime, lock_server: Any
) -> None:
    state = simulator.state
    lock_server(server)
    state.reset_api_calls()
    with pytest.raises(UpstreamError) as raised:
        store.set_metadata(server, ALIAS)
    assert (raised.value.upstream, raised.value.retryable) == ("nova", False)
    assert "409" in raised.value.reason and f"Instance {server} is locked" in raised.value.reason
    assert posts(state) == [409] * (1 + POLICY.conflict_retries)
    assert_backoff(fake_time.delays, POLICY.conflict_delay)
    assert state.metadata(server) == LANDB_KEYS


def test_a_conflict_that_clears_within_the_retries_lands(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.reset_api_calls()
    state.inject_fault(api="nova", method="POST", path_pattern=METADATA_POST, status=409)
    store.set_metadata(server, ALIAS)
    assert posts(state) == [409, 200]
    assert_backoff(fake_time.delays, POLICY.conflict_delay)


def test_a_server_in_error_state_is_a_conflict_too(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.set_vm_state(server, "error")
    state.reset_api_calls()
    with pytest.raises(UpstreamError, match="vm_state error"):
        store.set_metadata(server, ALIAS)
    assert posts(state) == [409] * (1 + POLICY.conflict_retries)


# -- final failures: reported at once ------------------------------------------------------------------


def test_a_full_quota_is_never_retried(simulator: Any, store: Any, server: str, fake_time: FakeTime) -> None:
    state = simulator.state
    state.set_quota(len(LANDB_KEYS))
    state.reset_api_calls()
    with pytest.raises(UpstreamError, match="403"):
        store.set_metadata(server, ALIAS)
    assert posts(state) == [403]
    assert fake_time.delays == []


def test_a_rejected_value_is_never_retried(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.reset_api_calls()
    with pytest.raises(UpstreamError, match="400"):
        store.set_metadata(server, {"landb-alias": "x" * 256})
    assert posts(state) == [400]
    assert fake_time.delays == []


def test_a_policy_refusal_is_never_retried(
    simulator: Any, client_config: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    reader = OpenStackServerStore(
        OpenStackSession(
            client_config.readonly_cloud_name,
            clouds_yaml=client_config.clouds_yaml,
            options=openstack_options(),
            clock=fake_time.monotonic,
            sleep=fake_time.sleep,
        )
    )
    state.reset_api_calls()
    try:
        with pytest.raises(UpstreamError, match="403"):
            reader.set_metadata(server, ALIAS)
    finally:
        reader.close()
    assert posts(state) == [403]
    assert fake_time.delays == []


# -- Keystone ------------------------------------------------------------------------------------------


def test_keystone_unavailable_is_retried_and_reported_as_keystone(
    simulator: Any, make_server_store: MakeStore, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    fresh = make_server_store(retry=POLICY, budget=BUDGET, clock=fake_time.monotonic, sleep=fake_time.sleep)
    state.inject_fault(api="keystone", method="POST", path_pattern="/auth/tokens$", status=503, times=None)
    with pytest.raises(UpstreamError) as raised:
        fresh.set_metadata(server, ALIAS)
    assert (raised.value.upstream, raised.value.retryable) == ("keystone", True)
    assert token_requests(state) == [503] * (1 + POLICY.transient_retries)
    assert posts(state) == []


def test_a_token_expiring_mid_write_is_renewed_and_the_write_lands(
    simulator: Any, store: Any, server: str, fake_time: FakeTime
) -> None:
    state = simulator.state
    state.reset_api_calls()
    state.inject_fault(api="nova", method="POST", path_pattern=METADATA_POST, status=None, expire_tokens=True)
    store.set_metadata(server, ALIAS)
    assert posts(state) == [401, 200]  # keystoneauth logs in again and repeats the call once
    assert token_requests(state) == [201]
    assert fake_time.delays == []
    assert state.metadata(server) == {**LANDB_KEYS, **ALIAS}
