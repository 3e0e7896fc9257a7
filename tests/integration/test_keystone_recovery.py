"""Authentication never blocks a call past its deadline, and recovers by itself (adapters/authlock.py).

A 401 on Keystone's version document used to leave keystoneauth waiting on its own lock for good: every
later call timed out and no request reached Keystone again. These tests run the real openstacksdk and
keystoneauth against the simulator; each call runs in a thread the test waits for with a bound, so that
a wedge fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.e2e_support import WebhookProcess, http_get, simulator_settings
from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_webhook.adapters.authlock import AuthenticationLock, authentication_lock
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import AUTHENTICATION_REQUESTS
from landb_webhook.backends import UpstreamError
from landb_webhook.deadline import answering_by
from support.fake_time import FakeTime

VERSION_DOCUMENT = r"^/identity/v3/?$"
TOKENS = "/identity/v3/auth/tokens"
BOUND = 30.0
"""Seconds a call may take before the test calls it stuck (each call here needs well under one)."""

MakeStore = Callable[..., OpenStackServerStore]


def finishes(call: Callable[[], Any]) -> Any:
    """``call()``'s result or exception, from a thread waited for at most BOUND seconds."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["result"] = call()
        except Exception as error:
            outcome["error"] = error
        done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(BOUND):
        pytest.fail(f"the call was still blocked after {BOUND} s: authentication is wedged")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def keystone_requests(state: Any) -> list[tuple[str, str, int]]:
    return [(call.method, call.path, call.status) for call in state.api_calls("keystone")]


def test_a_401_on_the_version_document_does_not_wedge_authentication(
    simulator: Any, make_server_store: MakeStore
) -> None:
    state = simulator.state
    store = make_server_store()
    state.inject_fault(api="keystone", method="GET", path_pattern=VERSION_DOCUMENT, status=401, times=1)

    assert finishes(store.max_metadata_items) == 128
    # Refused, then read again on the retry, then the token: Keystone was asked again, nothing blocked.
    assert keystone_requests(state) == [
        ("GET", "/identity/v3", 401),
        ("GET", "/identity/v3", 200),
        ("POST", TOKENS, 201),
    ]
    servers = finishes(lambda: store.servers_for([]))
    assert servers == {}
    assert store.unavailable() is None


def test_a_lasting_401_on_the_version_document_fails_each_call_and_never_blocks(
    simulator: Any, make_server_store: MakeStore
) -> None:
    state = simulator.state
    store = make_server_store()
    fault = state.inject_fault(
        api="keystone", method="GET", path_pattern=VERSION_DOCUMENT, status=401, times=None
    )
    for _ in range(2):
        with pytest.raises(UpstreamError) as failed:
            finishes(store.max_metadata_items)
        assert failed.value.upstream == "keystone"
    state.clear_faults()
    assert fault.hits > 0
    assert finishes(store.max_metadata_items) == 128  # Keystone answers again: so does the store


def test_a_call_waits_for_another_calls_authentication_only_until_its_own_deadline(
    simulator: Any, make_server_store: MakeStore
) -> None:
    state = simulator.state
    store = make_server_store(timeout=10.0)
    state.inject_fault(api="keystone", method="POST", path_pattern=TOKENS, status=None, delay=4.0)
    first = threading.Thread(target=store.max_metadata_items, daemon=True)
    first.start()
    deadline = time.monotonic() + BOUND
    while state.in_flight("keystone") == 0:  # the first call is authenticating, holding the lock
        assert time.monotonic() < deadline, "the first call never reached Keystone"
        time.sleep(0.01)

    def second() -> int:
        with answering_by(time.monotonic() + 0.2):
            return store.max_metadata_items()

    with pytest.raises(UpstreamError, match="authentication busy") as busy:
        finishes(second)
    assert (busy.value.upstream, busy.value.retryable) == ("keystone", True)
    # It gave up while the first call's token request was still unanswered, and asked Keystone nothing.
    assert [call for call in state.api_calls("keystone") if call.method == "POST"] == []
    first.join(BOUND)
    assert not first.is_alive()


def test_a_connection_whose_authentication_is_stuck_is_replaced(
    simulator: Any, make_server_store: MakeStore
) -> None:
    state = simulator.state
    clock = FakeTime()
    store = make_server_store(
        clock=clock.monotonic, sleep=clock.sleep, timeout=1.0, budget=2.0, limits_ttl=0.0
    )
    assert finishes(store.max_metadata_items) == 128
    wedged = store.connection()
    lock = authentication_lock(wedged.session.auth)
    assert isinstance(lock, AuthenticationLock)

    # A thread stuck inside keystoneauth, holding its lock, as a blocked library call would.
    stuck, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            stuck.set()
            release.wait(BOUND)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert stuck.wait(BOUND)
    clock.sleep(AUTHENTICATION_REQUESTS * 1.0 + 1)  # held longer than any authentication takes
    wedged.session.auth.invalidate()  # the next call must authenticate
    tokens_before = len([call for call in state.api_calls("keystone") if call.method == "POST"])
    try:
        # Finds the holder stuck: does not wait for it, connects afresh and authenticates again.
        assert finishes(store.max_metadata_items) == 128
        assert store.connection() is not wedged
        tokens = [call for call in state.api_calls("keystone") if call.method == "POST"]
        assert len(tokens) == tokens_before + 1  # the fresh connection authenticated once
    finally:
        release.set()
        holder.join(BOUND)


# -- the running service ------------------------------------------------------------------------------


@pytest.fixture
def webhook(simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path) -> Iterator[WebhookProcess]:
    """``landb-webhook serve``, not started: a test starts it once Keystone misbehaves."""
    seed_cluster(simulator.state, ingress_nodes=2, workers=1)
    process = WebhookProcess(
        simulator_settings(sim_clients, LANDB_REQUEST_TIMEOUT="5", LANDB_UPSTREAM_TIMEOUT="2"),
        tmp_path / "webhook.log",
    )
    yield process
    process.stop()


def test_serve_recovers_by_itself_once_keystone_answers_again(
    simulator: Simulator, webhook: WebhookProcess
) -> None:
    state = simulator.state
    fault = state.inject_fault(
        api="keystone", method="GET", path_pattern=VERSION_DOCUMENT, status=401, times=None
    )
    webhook.start(ready=False)  # its start-up call to OpenStack authenticates into the fault
    assert http_get(webhook.health_port, "/readyz")[0] == 503  # OpenStack has not answered yet
    for _ in range(3):
        asked = len(state.api_calls("keystone"))
        assert http_get(webhook.api_port, "/records")[0] == 503
        assert len(state.api_calls("keystone")) > asked  # Keystone is asked again each time: not wedged
        assert http_get(webhook.health_port, "/healthz")[0] == 200  # failing in time is not a stall
    assert fault.hits >= 3
    state.clear_faults()
    assert http_get(webhook.api_port, "/records")[0] == 200  # the first Records after Keystone is back
