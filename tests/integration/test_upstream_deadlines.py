"""Every request the webhook sends upstream carries a connect and a read timeout.

A request without one can wait for ever on a peer that accepted the connection and went quiet, holding
its thread, and with it a lock or the single writer, past every deadline. Checked where all three
clients end up (keystoneauth and openstacksdk through requests, the kubernetes client directly): urllib3's
connection pool, for a whole external-dns loop of the provider as ``serve`` wires it (watches, Lease,
claims, Keystone, Nova), from a cold start.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from urllib3.connectionpool import HTTPConnectionPool

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import create_with_claim
from landb_webhook.config import Settings
from landb_webhook.metrics import Metrics
from landb_webhook.webhook.wire import decode_changes
from landb_webhook.wiring import ask_openstack_once, build_provider

WAIT = 20.0


@dataclass(frozen=True)
class SentRequest:
    method: str
    path: str
    connect_timeout: float | None
    read_timeout: float | None

    @property
    def bounded(self) -> bool:
        return all(isinstance(value, int | float) for value in (self.connect_timeout, self.read_timeout))


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SentRequest]]:
    """Every request any client of this process sends, with the timeouts urllib3 applies to it."""
    recorded: list[SentRequest] = []
    original = HTTPConnectionPool.urlopen
    signature = inspect.signature(original)

    def urlopen(self: HTTPConnectionPool, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        timeout = self._get_timeout(call.arguments["timeout"])  # the pool's default when none is given
        timeout.start_connect()
        recorded.append(
            SentRequest(
                call.arguments["method"], call.arguments["url"], timeout.connect_timeout, timeout.read_timeout
            )
        )
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HTTPConnectionPool, "urlopen", urlopen)
    yield recorded


def test_every_upstream_request_of_a_loop_has_a_connect_and_a_read_timeout(
    simulator: Simulator, sim_clients: ClientConfig, sent: list[SentRequest]
) -> None:
    seed_cluster(simulator.state, ingress_nodes=2, workers=1)
    settings = Settings(
        os_cloud=sim_clients.cloud_name,
        kubeconfig=sim_clients.kubeconfig,
        ownership_store="configmap",
        ownership_namespace="default",
        leader_election=True,
        lease_namespace="default",
        dns_watch=False,  # no resolver but a loopback one
    )
    provider, adapters = build_provider(settings, Metrics.create(process_metrics=False))
    try:
        ask_openstack_once(adapters)  # as serve does: ready only once OpenStack has answered
        deadline = time.monotonic() + WAIT
        while not provider.readiness().ready:  # watches synced, Lease held, OpenStack answered
            assert time.monotonic() < deadline, provider.readiness().reason
            time.sleep(0.02)
        records = provider.records()
        provider.adjust_endpoints(records)
        provider.apply_changes(decode_changes(create_with_claim("deadlines")))
        assert any(record.dns_name == "deadlines.cern.ch" for record in provider.records())
    finally:
        adapters.close()

    paths = {request.path.split("?")[0] for request in sent}
    for upstream in ("/identity/v3/auth/tokens", "/compute/", "/api/v1/nodes", "/configmaps", "/leases"):
        assert any(upstream in path for path in paths), f"no request to {upstream} was seen: {paths}"
    assert [request for request in sent if not request.bounded] == []
