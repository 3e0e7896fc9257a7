"""The provider wired as wiring.build_provider wires it, against a simulator, with a test's clock, sleeper and
jitter injected so that backoff costs no wall time."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from landb_simulator import ClientConfig
from landb_webhook.adapters.kubernetes import KubernetesNodeSource, api_client_for
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.backends import Ports
from landb_webhook.config import Settings
from landb_webhook.metrics import Metrics
from landb_webhook.provider import LandbProvider
from landb_webhook.webhook.api import create_api_app
from landb_webhook.webhook.server import HttpServers, api_limits, bind_listener, listener_url
from landb_webhook.webhook.wire import MEDIA_TYPE
from landb_webhook.wiring import node_source, ownership_store, provider_options, server_store
from support.fake_time import FakeTime

OWNERSHIP_NAMESPACE = "default"


def simulator_settings(config: ClientConfig, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "os_cloud": config.cloud_name,
        "kubeconfig": config.kubeconfig,
        "ownership_store": "configmap",
        "ownership_namespace": OWNERSHIP_NAMESPACE,
        "inventory_max_age": 0,
        "dns_watch": False,  # no resolver but a loopback one (a new name is looked up before its write)
        **overrides,
    }
    return Settings(**values)


@dataclass
class Stack:
    provider: LandbProvider
    nodes: KubernetesNodeSource
    servers: OpenStackServerStore
    ownership: ConfigMapOwnershipStore
    metrics: Metrics
    settings: Settings

    def close(self) -> None:
        self.nodes.stop()
        self.ownership.stop()
        self.servers.close()


def build_stack(
    config: ClientConfig,
    fake_time: FakeTime,
    *,
    seed: int = 0,
    node_clock: Callable[[], float] = time.monotonic,
    watch_timeout: int = 60,
    **overrides: Any,
) -> Stack:
    """Start the node and ownership watches and wait for their first sync; ``overrides`` are Settings
    fields."""
    settings = simulator_settings(config, **overrides)
    api_client = api_client_for(settings.kubeconfig)
    watch = {"clock": node_clock, "watch_timeout": watch_timeout, "backoff_max": 0.5}
    nodes = node_source(settings, api_client, **watch)
    servers = server_store(
        settings,
        clouds_yaml=config.clouds_yaml,
        clock=fake_time.monotonic,
        sleep=fake_time.sleep,
        chance=random.Random(seed),
    )
    ownership = ownership_store(settings, api_client, **watch)
    metrics = Metrics.create(process_metrics=False)
    provider = LandbProvider(Ports(nodes, servers, ownership), provider_options(settings), metrics)
    nodes.start()
    ownership.start()
    if not (nodes.wait_synced(10) and ownership.wait_synced(10)):
        nodes.stop()
        ownership.stop()
        raise TimeoutError("the node or ownership cache did not sync")
    return Stack(provider, nodes, servers, ownership, metrics, settings)


@contextlib.contextmanager
def serving_api(stack: Stack) -> Iterator[httpx.Client]:
    """The webhook API of ``stack`` on a real uvicorn socket on 127.0.0.1; yields a client for it."""
    listener = bind_listener("127.0.0.1", 0)
    app = create_api_app(stack.provider, stack.metrics, request_timeout=stack.settings.request_timeout)
    servers = HttpServers([(app, listener, api_limits())], graceful_timeout=1)
    thread = threading.Thread(target=asyncio.run, args=(servers.serve(handle_signals=False),), daemon=True)
    thread.start()
    try:
        with httpx.Client(
            base_url=listener_url(listener), timeout=15, headers={"Content-Type": MEDIA_TYPE}
        ) as client:
            yield client
    finally:
        servers.stop()
        thread.join(10)
