"""Both webhook apps on real loopback sockets, served by uvicorn from a background thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette

from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_REQUEST_ENDPOINTS
from landb_webhook.metrics import Metrics
from landb_webhook.provider.interface import WebhookProvider
from landb_webhook.webhook.api import ProviderCalls, create_api_app, create_health_app
from landb_webhook.webhook.liveness import CallProgress
from landb_webhook.webhook.server import (
    HEALTH_LIMITS,
    ConnectionLimits,
    HttpServers,
    api_limits,
    bind_listener,
    listener_url,
)
from landb_webhook.webhook.wire import MEDIA_TYPE

WAIT = 5.0
"""Upper bound for anything that should happen promptly; only reached when a test fails."""


@dataclass
class Webhook:
    api: httpx.Client
    health: httpx.Client
    metrics: Metrics
    api_app: Starlette

    @property
    def calls(self) -> ProviderCalls:
        calls: ProviderCalls = self.api_app.state.provider_calls
        return calls


def client(base_url: str, timeout: float = WAIT) -> httpx.Client:
    """A client that sends what external-dns sends with every POST: the webhook media type."""
    return httpx.Client(base_url=base_url, timeout=timeout, headers={"Content-Type": MEDIA_TYPE})


@contextmanager
def serving(
    provider: WebhookProvider,
    *,
    request_timeout: float = WAIT,
    metrics: Metrics | None = None,
    client_timeout: float = WAIT,
    progress: CallProgress | None = None,
    max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY,
    max_endpoints: int = DEFAULT_MAX_REQUEST_ENDPOINTS,
    allowed_hosts: tuple[str, ...] = (),
    limits: ConnectionLimits | None = None,
) -> Iterator[Webhook]:
    """Both apps on real sockets, served by uvicorn from a background thread's event loop; /healthz judges
    the API's calls as ``serve`` wires it (``progress``: the API's own unless given)."""
    metrics = metrics if metrics is not None else Metrics.create(process_metrics=False)
    api_listener = bind_listener("127.0.0.1", 0)
    health_listener = bind_listener("127.0.0.1", 0)
    api_app = create_api_app(
        provider,
        metrics,
        request_timeout=request_timeout,
        max_body_bytes=max_body_bytes,
        max_endpoints=max_endpoints,
        allowed_hosts=allowed_hosts,
        progress=progress,
    )
    health_app = create_health_app(provider, metrics, progress=api_app.state.provider_calls.progress)
    servers = HttpServers(
        [
            (api_app, api_listener, limits or api_limits()),
            (health_app, health_listener, HEALTH_LIMITS),
        ],
        graceful_timeout=1,
    )
    thread = threading.Thread(target=asyncio.run, args=(servers.serve(handle_signals=False),), daemon=True)
    thread.start()
    # No waiting for start-up: the sockets already listen, connections queue until uvicorn accepts them.
    with (
        client(listener_url(api_listener), client_timeout) as api,
        client(listener_url(health_listener), client_timeout) as health,
    ):
        try:
            yield Webhook(api=api, health=health, metrics=metrics, api_app=api_app)
        finally:
            servers.stop()
            thread.join(WAIT)
    assert not thread.is_alive(), "the servers did not stop"
