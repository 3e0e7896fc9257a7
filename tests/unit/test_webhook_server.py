"""What a client cannot do to the server: hold a connection by sending half a request, open connections
until the process runs out of file descriptors, stall the event loop (and /healthz) with a body to
decode, or flood the log with accept errors.

Everything runs on real sockets; every wait is bounded by a socket timeout and ends on an event (the
server closing the connection, a reply), never on a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import http.client
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

import landb_webhook.webhook.api as webhook_app
from landb_webhook.endpoint import Endpoint
from landb_webhook.webhook.server import (
    ACCEPT_OUT_OF_RESOURCES,
    HEALTH_LIMITS,
    ConnectionLimits,
    HttpServers,
)
from landb_webhook.webhook.wire import MEDIA_TYPE, encode_endpoints
from support.memory_provider import InMemoryProvider
from support.serving import WAIT, Webhook, serving

QUICK = 0.3
"""The head and body deadlines of the tests' servers, in seconds."""
HALF_A_HEAD = b"POST /records HTTP/1.1\r\nHost: 127.0.0.1\r\n"
FULL_HEAD = (
    f"POST /records HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {MEDIA_TYPE}\r\nContent-Length: 100\r\n\r\n"
).encode()


@contextmanager
def quick_server(
    max_connections: int = 32, timeout: float = QUICK
) -> Iterator[tuple[Webhook, InMemoryProvider]]:
    """A server whose API cuts a request's head or body after ``timeout`` s."""
    provider = InMemoryProvider()
    limits = ConnectionLimits("api", max_connections, head_timeout=timeout, body_timeout=timeout)
    with serving(provider, limits=limits) as webhook:
        yield webhook, provider


def connect(webhook: Webhook) -> socket.socket:
    return connect_to(webhook.api.base_url)


def connect_to(url: httpx.URL) -> socket.socket:
    assert url.host is not None and url.port is not None
    return socket.create_connection((url.host, url.port), timeout=WAIT)


def read_until_closed(connection: socket.socket) -> bytes:
    """What the server sends until it closes the connection; TimeoutError after WAIT s if it never does.

    A server closing a socket with unread data resets it: the client may then see a reset, not the end."""
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


@pytest.mark.parametrize(
    "sent", [b"", HALF_A_HEAD, FULL_HEAD + b'{"create":'], ids=["nothing", "half a head", "half a body"]
)
def test_a_client_that_stops_halfway_is_cut_at_the_deadline(sent: bytes) -> None:
    with quick_server() as (webhook, provider), capture_logs() as logs, connect(webhook) as connection:
        connection.sendall(sent)

        read_until_closed(connection)  # raises socket.timeout if the server holds the connection

    assert provider.records() == []
    assert any(str(entry["event"]).startswith("connection closed: the request") for entry in logs)


def test_a_keep_alive_connection_outlives_the_head_deadline() -> None:
    # Only a request under way has a deadline: between requests the keep-alive timeout (120 s) applies,
    # longer than Go's idle timeout, so external-dns never sends down a connection we are closing.
    with quick_server() as (webhook, _provider):
        url = webhook.api.base_url
        assert url.host is not None and url.port is not None
        connection = http.client.HTTPConnection(url.host, url.port, timeout=WAIT)
        try:
            connection.request("GET", "/records")
            assert connection.getresponse().read() == b"[]"
            assert connection.sock is not None
            connection.sock.settimeout(3 * QUICK)

            with pytest.raises(TimeoutError):
                connection.sock.recv(1)  # nothing arrives, and the connection stays open

            connection.sock.settimeout(WAIT)
            connection.request("GET", "/records")
            assert connection.getresponse().read() == b"[]"
        finally:
            connection.close()


def test_past_the_connection_cap_a_connection_is_answered_503_and_closed_and_healthz_answers() -> None:
    cap = 4
    with quick_server(max_connections=cap, timeout=60) as (webhook, _provider), ExitStack() as held:
        webhook.api.get("/records")  # the client's own keep-alive connection counts too
        for _ in range(cap - 1):
            held.enter_context(connect(webhook)).sendall(b"GET /records HTTP/1.1\r\n")
        surplus = [held.enter_context(connect(webhook)) for _ in range(20)]

        answers = [read_until_closed(connection) for connection in surplus]
        health = webhook.health.get("/healthz")

    assert all(answer.startswith(b"HTTP/1.1 503") for answer in answers)
    assert all(answer.endswith(b"too many open connections\n") for answer in answers)
    assert health.status_code == 200


def test_healthz_answers_while_the_api_is_held_by_slow_clients() -> None:
    with quick_server(max_connections=64, timeout=60) as (webhook, _provider), ExitStack() as held:
        slow = [held.enter_context(connect(webhook)) for _ in range(64 + 20)]
        for connection in slow:
            connection.sendall(HALF_A_HEAD)
        read_until_closed(slow[-1])  # the API is full: past the cap, connections are closed at once

        assert webhook.health.get("/healthz").status_code == 200


# --- Decoding: in a worker thread, inside the reply's deadline ----------------------------------------


class BlockingDecode:
    """The real decode_endpoints, run after the test releases it; it records the thread it ran in."""

    def __init__(self) -> None:
        self.decode = webhook_app.decode_endpoints
        self.release = threading.Event()
        self.threads: list[str] = []

    def __call__(self, body: bytes) -> list[Endpoint]:
        self.threads.append(threading.current_thread().name)
        self.release.wait(WAIT)
        return self.decode(body)


def test_decoding_runs_in_a_worker_inside_the_deadline_while_healthz_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decode = BlockingDecode()
    monkeypatch.setattr(webhook_app, "decode_endpoints", decode)
    body = encode_endpoints([Endpoint("app.cern.ch", "A", ("192.0.2.1",))])
    provider = InMemoryProvider()
    try:
        with serving(provider, request_timeout=QUICK) as webhook:
            reply = webhook.api.post("/adjustendpoints", content=body)
            health = webhook.health.get("/healthz")
    finally:
        decode.release.set()

    assert reply.status_code == 503
    assert reply.json() == {"error": "deadline exceeded"}
    assert health.status_code == 200
    assert [name.startswith("provider-read") for name in decode.threads] == [True]


# --- Accept errors at the descriptor limit ------------------------------------------------------------


def test_accept_errors_are_logged_at_most_once_per_period() -> None:
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(HttpServers([]).handle_loop_exception)
    context: dict[str, Any] = {
        "message": ACCEPT_OUT_OF_RESOURCES,
        "exception": OSError(errno.EMFILE, "Too many open files"),
    }
    try:
        with capture_logs() as logs:
            for _ in range(5000):
                loop.call_exception_handler(context)
    finally:
        loop.close()

    [line] = [entry for entry in logs if entry["event"].startswith("cannot accept connections")]
    assert "Too many open files" in line["error"]


# --- The health listener: a probe always finds a place ------------------------------------------------


def health_connection(webhook: Webhook) -> http.client.HTTPConnection:
    url = webhook.health.base_url
    assert url.host is not None and url.port is not None
    return http.client.HTTPConnection(url.host, url.port, timeout=WAIT)


def test_idle_connections_to_the_health_port_never_keep_a_probe_out() -> None:
    # Any pod may connect to the health port: as many idle keep-alive connections as its cap (each made
    # one request and then holds its connection), and connections that send nothing at all, must not make
    # the kubelet's next probe fail, or the kubelet restarts a healthy webhook.
    idle = HEALTH_LIMITS.max_connections
    with serving(InMemoryProvider()) as webhook, ExitStack() as held:
        for _ in range(idle):
            connection = held.enter_context(contextlib.closing(health_connection(webhook)))
            connection.request("GET", "/healthz")
            assert connection.getresponse().read() == b"ok\n"
        for _ in range(4):
            held.enter_context(connect_to(webhook.health.base_url))

        probe = health_connection(webhook)
        try:
            probe.request("GET", "/healthz")
            reply = probe.getresponse()
            status, body = reply.status, reply.read()
        finally:
            probe.close()

    assert (status, body) == (200, b"ok\n")


def test_the_health_port_closes_an_idle_keep_alive_connection_after_a_few_seconds() -> None:
    # Prometheus and the kubelet connect afresh when their connection was closed; an idle one held for
    # 120 s (the API's keep-alive, sized for external-dns) would only hold a place on the listener.
    assert HEALTH_LIMITS.keep_alive <= 5
    with serving(InMemoryProvider()) as webhook:
        connection = health_connection(webhook)
        try:
            connection.request("GET", "/healthz")
            assert connection.getresponse().read() == b"ok\n"
            assert connection.sock is not None
            connection.sock.settimeout(HEALTH_LIMITS.keep_alive + WAIT)  # bound: keep-alive plus slack

            assert read_until_closed(connection.sock) == b""  # closed by the server, nothing sent
        finally:
            connection.close()
