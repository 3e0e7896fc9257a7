"""``landb-webhook serve`` with its DNS watcher, against the simulator and a real DNS server (Knot).

One name goes from the write to ``published`` as Knot (playing LanDB) starts answering its carriers; the
write time is in the state ConfigMap. With a resolver that never answers, every webhook call still
succeeds: DNS trouble never reaches a webhook answer. Waits are on log lines, with deadlines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.e2e_support import WebhookProcess, http_get
from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import loop_over_http
from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.watch.publications import STATE_KEY
from landb_webhook.webhook.wire import decode_endpoints
from support.knot import KnotServer, knot, switchable

__all__ = ["knot"]

NAMESPACE = "default"
DEADLINE = 60.0
"""Seconds to wait for what the watcher does within one recheck period (10 s) and one look (15 s)."""


@pytest.fixture
def start_webhook(
    simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path
) -> Iterator[Callable[[str], WebhookProcess]]:
    seed_cluster(simulator.state, ingress_nodes=3, workers=0)
    started: list[WebhookProcess] = []

    def start(resolver: str) -> WebhookProcess:
        process = WebhookProcess(
            {
                "OS_CLIENT_CONFIG_FILE": str(sim_clients.clouds_yaml),
                "LANDB_OS_CLOUD": sim_clients.cloud_name,
                "LANDB_KUBECONFIG": str(sim_clients.kubeconfig),
                "LANDB_OWNERSHIP_NAMESPACE": NAMESPACE,
                "LANDB_LEADER_ELECTION": "false",
                "LANDB_LOG_FORMAT": "json",
                "LANDB_DNS_RESOLVERS": resolver,
                "LANDB_DNS_RECHECK_PERIOD": "10",
            },
            tmp_path / f"serve-{len(started)}.log",
        )
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        process.stop()


def events(process: WebhookProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in process.log_text().splitlines() if line.startswith("{")]


def said(process: WebhookProcess, event: str) -> bool:
    return any(entry.get("event") == event for entry in events(process))


def judged(process: WebhookProcess, name: str, state: str) -> list[dict[str, Any]]:
    """The watcher's lines saying ``name`` is now in ``state``."""
    return [e for e in events(process) if e.get("name") == name and e.get("dns") == state]


def carriers(process: WebhookProcess, name: str) -> list[str]:
    status, _, body = http_get(process.api_port, "/records")
    assert status == 200
    found: list[Endpoint] = [e for e in decode_endpoints(body) if e.dns_name == name and e.record_type == "A"]
    return list(found[0].targets) if found else []


def test_serve_follows_a_name_from_the_write_to_published_and_stores_the_write_time(
    simulator: Simulator,
    start_webhook: Callable[[str], WebhookProcess],
    knot: KnotServer,
    eventually: Callable[..., Any],
) -> None:
    webhook = start_webhook(knot.address)
    with httpx.Client(base_url=f"http://127.0.0.1:{webhook.api_port}", timeout=15) as client:
        desired = [Endpoint("onair.cern.ch", "A", ("192.0.2.1",))]
        assert loop_over_http(client, desired, owner="test").succeeded
        ips = carriers(webhook, "onair.cern.ch")  # Records: what DNS should answer
    assert len(ips) == 3

    pending = eventually(
        lambda: judged(webhook, "onair.cern.ch", "pending"), timeout=DEADLINE, what="the name pending"
    )
    knot.publish("onair", ips)  # LanDB's sync
    published = eventually(
        lambda: judged(webhook, "onair.cern.ch", "published"), timeout=DEADLINE, what="published"
    )

    assert pending[0]["event"].startswith(
        "onair.cern.ch does not resolve to its 3 ingress nodes yet (no such"
    )
    assert published[0]["event"].startswith("onair.cern.ch resolves to its 3 ingress nodes, ")
    state = simulator.state.configmap(NAMESPACE, "landb-webhook-ownership-state")
    assert state is not None
    assert "onair.cern.ch" in json.loads(state["data"][STATE_KEY])["names"]
    status, _, metrics = http_get(webhook.health_port, "/metrics")
    assert status == 200
    assert 'landb_webhook_dns_names{state="published"} 1.0' in metrics.decode()


def test_a_resolver_that_stops_answering_changes_no_webhook_answer(
    start_webhook: Callable[[str], WebhookProcess], eventually: Callable[..., Any], knot: KnotServer
) -> None:
    """Names published while DNS answered (each new name is asked once before its first write: DNS first)
    go on being answered the same once the resolver falls silent."""
    with switchable(knot) as switch:
        webhook = start_webhook(switch.address)
        with httpx.Client(base_url=f"http://127.0.0.1:{webhook.api_port}", timeout=15) as client:
            desired = [Endpoint(f"quiet{i}.cern.ch", "A", ("192.0.2.1",)) for i in range(3)]
            first = loop_over_http(client, desired, owner="test")
            switch.answering = False
            assert client.get("/records").status_code == 200  # external-dns' next loop: the watcher learns
            eventually(
                lambda: said(
                    webhook, "DNS resolver does not answer: names keep their last DNS state until it does"
                ),
                timeout=DEADLINE,
                what="the watcher to find the resolver silent",
            )
            later = [loop_over_http(client, desired, owner="test") for _ in range(3)]

    assert first.succeeded and first.changes is not None
    assert all(loop.succeeded and loop.changes is None for loop in later)
    status, _, body = http_get(webhook.health_port, "/readyz")
    assert status == 200, body
