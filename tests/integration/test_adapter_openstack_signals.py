"""What the OpenStack adapter tells operators: every call counted and timed, and whether OpenStack is usable.

Driven through openstacksdk against the simulated Keystone and Nova, faults injected there.
"""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import FAILURE_WINDOW, OpenStackSession
from landb_webhook.adapters.openstack_health import NOT_ANSWERED_YET
from landb_webhook.adapters.retry import RetryPolicy
from landb_webhook.backends import Node, UpstreamError
from landb_webhook.logs import configure_logging
from landb_webhook.metrics import Metrics
from support.default_options import openstack_options
from support.logging_state import restored_logging

CALLS = "landb_webhook_openstack_api_calls_total"
DURATIONS = "landb_webhook_openstack_api_call_duration_seconds_count"


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def calls(metrics: Metrics, operation: str, result: str, sample: str = CALLS) -> float:
    value = metrics.registry.get_sample_value(sample, {"operation": operation, "result": result})
    return value or 0.0


@pytest.fixture
def metrics() -> Metrics:
    return Metrics.create(process_metrics=False)


def test_every_call_is_counted_and_timed_by_operation_and_result(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore], metrics: Metrics
) -> None:
    state = simulator.state
    # An explicit policy: two retries of a transient failure, none of a 409, so every count is known.
    store = make_server_store(metrics=metrics, retry=RetryPolicy(transient_retries=2, conflict_retries=0))
    server = state.add_server("signals-node-0")
    locked = state.add_server("signals-node-1")
    state.set_locked(locked, True)

    store.servers_for([Node("signals-node-0", None, ("10.0.0.1",), True)])
    store.set_metadata(server, {"landb-alias": "app--load-0-"})
    store.delete_metadata(server, "landb-alias")
    store.max_metadata_items()
    with pytest.raises(UpstreamError):
        store.set_metadata(locked, {"landb-alias": "app--load-1-"})
    state.inject_fault(api="nova", method="GET", path_pattern="/servers/detail$", status=503, times=None)
    with pytest.raises(UpstreamError):
        store.servers_for([Node("signals-node-0", None, ("10.0.0.1",), True)])

    assert calls(metrics, "list_servers", "ok") == 1
    assert calls(metrics, "list_servers", "error") == 3  # the call and its two retries
    assert calls(metrics, "set_metadata", "ok") == 1
    assert calls(metrics, "set_metadata", "error") == 1  # 409: no retry under this policy
    assert calls(metrics, "delete_metadata", "ok") == 1
    assert calls(metrics, "get_limits", "ok") == 1
    assert calls(metrics, "list_servers", "error", DURATIONS) == 3
    assert calls(metrics, "set_metadata", "ok", DURATIONS) == 1


def test_refused_credentials_are_auth_refused_and_make_openstack_unavailable(
    simulator: Any, client_config: Any, metrics: Metrics
) -> None:
    clouds = client_config.clouds_yaml.read_text()
    password = simulator.state.credentials.password
    client_config.clouds_yaml.write_text(clouds.replace(password, "not-the-password"))
    store = OpenStackServerStore(
        OpenStackSession(
            client_config.cloud_name,
            clouds_yaml=client_config.clouds_yaml,
            options=openstack_options(),
            metrics=metrics,
        )
    )
    try:
        assert store.unavailable() == NOT_ANSWERED_YET  # untried credentials are not known to work
        with pytest.raises(UpstreamError):
            store.max_metadata_items()
        reason = store.unavailable()
    finally:
        store.close()

    assert calls(metrics, "get_limits", "auth_refused") == 1
    assert calls(metrics, "get_limits", "keystone_unreachable") == 0
    assert reason is not None and reason.startswith("keystone:") and "401" in reason
    assert "not-the-password" not in reason


def test_a_locked_server_does_not_make_openstack_unavailable(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore]
) -> None:
    state = simulator.state
    store = make_server_store()
    locked = state.add_server("signals-node-2")
    state.set_locked(locked, True)

    with pytest.raises(UpstreamError) as raised:
        store.set_metadata(locked, {"landb-alias": "app--load-0-"})

    assert "409" in raised.value.reason
    assert store.unavailable() is None


def test_openstack_is_unavailable_until_a_call_succeeds_or_the_window_passes(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore]
) -> None:
    state = simulator.state
    clock = ManualClock()
    store = make_server_store(clock=clock)
    server = state.add_server("signals-node-3")
    store.max_metadata_items()
    fault = state.inject_fault(api="nova", method="POST", path_pattern="/metadata$", status=503, times=None)

    with pytest.raises(UpstreamError):
        store.set_metadata(server, {"landb-alias": "app--load-0-"})
    assert "503" in (store.unavailable() or "")
    clock.now += FAILURE_WINDOW - 1
    assert store.unavailable() is not None
    clock.now += 2
    assert store.unavailable() is None

    with pytest.raises(UpstreamError):
        store.set_metadata(server, {"landb-alias": "app--load-0-"})
    assert store.unavailable() is not None
    fault.cancel()
    store.set_metadata(server, {"landb-alias": "app--load-0-"})
    assert store.unavailable() is None


def unreachable_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again: nothing listens there


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("keystone.example.invalid", "cannot resolve keystone.example.invalid ("),  # RFC 6761: never resolves
        ("127.0.0.1:{port}", "Connection refused"),
    ],
)
def test_an_unreachable_keystone_is_named_by_url_with_the_innermost_reason(
    host: str, why: str, tmp_path: Path
) -> None:
    address = host.format(port=unreachable_port())
    clouds_yaml = tmp_path / "clouds.yaml"
    auth = {"auth_url": f"https://{address}/v3", "username": "u", "password": "p", "project_name": "p"}
    clouds_yaml.write_text(yaml.safe_dump({"clouds": {"away": {"auth": auth}}}))
    store = OpenStackServerStore(
        OpenStackSession(
            "away",
            clouds_yaml=clouds_yaml,
            options=openstack_options(retry=RetryPolicy(transient_retries=0, conflict_retries=0)),
        )
    )
    try:
        with pytest.raises(UpstreamError) as raised:
            store.max_metadata_items()
    finally:
        store.close()

    reason = str(raised.value)
    assert reason.startswith(
        f"keystone: read limits: connection failed: https://{address}/v3/auth/tokens: {why}"
    )
    assert len(reason) <= 320 and "HTTPSConnectionPool" not in reason


def logged(stream: io.StringIO) -> list[tuple[str, str]]:
    """(level, event) of every line logged, in order."""
    return [(line["level"], line["event"]) for line in map(json.loads, stream.getvalue().splitlines())]


@pytest.mark.parametrize(
    ("fault", "result"),
    [
        ({"reset": True}, "keystone_unreachable"),  # a Keystone that drops every connection
        ({"status": 503}, "keystone_unreachable"),  # down behind its load balancer
        ({"status": 401, "path_pattern": "/auth/tokens$"}, "auth_refused"),  # answering, and refusing
    ],
)
def test_a_keystone_outage_is_one_line_when_it_starts_and_one_when_it_ends(
    simulator: Any,
    make_server_store: Callable[..., OpenStackServerStore],
    metrics: Metrics,
    fault: dict[str, Any],
    result: str,
) -> None:
    """Each failed call made ~10 warnings (keystoneauth's, then ours per retry); now the outage is said
    once, counted under a result saying what happened, and its end is said once."""
    store = make_server_store(metrics=metrics)  # the default policy: 4 retries per call
    outage = simulator.state.inject_fault(api="keystone", times=None, **fault)
    stream = io.StringIO()
    with restored_logging():
        configure_logging("info", "json", stream=stream)
        for _ in range(3):
            with pytest.raises(UpstreamError):
                store.max_metadata_items()
        outage.cancel()
        store.max_metadata_items()

    said = {
        "keystone_unreachable": "keystone unreachable: every OpenStack call fails until it answers",
        "auth_refused": "keystone refuses the credentials: every OpenStack call fails until they are fixed",
    }
    assert logged(stream) == [("warning", said[result]), ("info", "keystone answers again")]
    failed = calls(metrics, "get_limits", result)
    assert failed >= 3  # every attempt is counted, retries included
    assert calls(metrics, "get_limits", "ok") == 1
    assert sum(calls(metrics, "get_limits", other) for other in said if other != result) == 0
    ended = json.loads(stream.getvalue().splitlines()[-1])
    assert (ended["failed_attempts"], ended["was"]) == (failed, result)


def test_at_debug_keystoneauth_s_warnings_are_debug_lines(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore]
) -> None:
    store = make_server_store(retry=RetryPolicy(transient_retries=0, conflict_retries=0))
    simulator.state.inject_fault(api="keystone", reset=True, times=None)
    stream = io.StringIO()
    with restored_logging():
        configure_logging("debug", "json", stream=stream)
        with pytest.raises(UpstreamError):
            store.max_metadata_items()

    from_keystoneauth = [
        (line["level"], line["event"][:40])
        for line in map(json.loads, stream.getvalue().splitlines())
        if line.get("logger", "").startswith("keystoneauth.identity")
    ]
    assert ("debug", "Failed to discover available identity ve") in from_keystoneauth
    assert all(level == "debug" for level, _ in from_keystoneauth)
