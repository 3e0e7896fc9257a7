"""A node joining a cluster at the edge of the chart's documented memory envelope (190,000 tokens: 190
ingress nodes x 1,000 names, docs/operations.md) is applied by ``landb-webhook serve`` with its default
settings, through its HTTP server: the ApplyChanges external-dns then sends (every name's addresses before
and after, ~7 MiB) is within LANDB_MAX_REQUEST_BODY's default, and the process stays under the chart's
memory limit.

The cluster is seeded as the webhook would have left it (registry noop: every alias counts as managed, no
claims needed); the loop is external-dns': Records, AdjustEndpoints of the same names, then the
ApplyChanges of its plan (updateOld: the records as read; updateNew: as adjusted).
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.body_memory import peak_rss_mib

from e2e import e2e_support
from e2e.e2e_support import MEDIA_TYPE, WebhookProcess, simulator_settings
from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.seed import cern_vm_metadata, node_ip, node_name, server_id
from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY
from landb_webhook.landb.metadata import read_aliases, slot_key

CHART_VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "values.yaml"
HEADERS = {"Content-Type": MEDIA_TYPE, "Accept": MEDIA_TYPE}
CLUSTER = "demo"
INGRESS = 190
NAMES = 1000
LABELS = [f"app-{index:04d}" for index in range(NAMES)]


def memory_limit_mib() -> int:
    """The webhook container's memory limit in the Helm chart (``limits: { memory: 384Mi }``)."""
    match = re.search(r"limits:.*memory:\s*(\d+)Mi", CHART_VALUES.read_text())
    assert match is not None, f"no memory limit in {CHART_VALUES}"
    return int(match[1])


def published(n: int) -> dict[str, str]:
    """Every name on one server, with N = n + 1, packed in values of at most 254 characters."""
    values: list[list[str]] = [[]]
    for label in LABELS:
        token = f"{label}--load-{n + 1}-"
        if len(",".join([*values[-1], token])) > 254:
            values.append([])
        values[-1].append(token)
    return {slot_key(slot + 1): ",".join(tokens) for slot, tokens in enumerate(values)}


def call(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=HEADERS)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def answered(port: int, method: str, path: str, body: bytes | None = None) -> bytes:
    """The reply once it is a 200, as external-dns' next loops would get it: the first read of 190,000
    tokens may take longer than the reply deadline on a loaded machine (503), and its work is kept."""
    deadline = time.monotonic() + 120
    while True:
        status, reply = call(port, method, path, body)
        if status == 200:
            return reply
        assert status == 503 and time.monotonic() < deadline, (status, reply[:300])


@pytest.fixture
def webhook(
    simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WebhookProcess]:
    # 191 nodes to list and watch before /readyz: give a loaded machine longer than the usual 30 s.
    monkeypatch.setattr(e2e_support, "READY_TIMEOUT", 120.0)
    state = simulator.state
    nodes = seed_cluster(state, cluster=CLUSTER, ingress_nodes=INGRESS + 1, workers=0)
    for index, node in enumerate(nodes[:INGRESS]):
        state.set_metadata_direct(
            server_id(CLUSTER, node), {**cern_vm_metadata(CLUSTER, node), **published(index)}
        )
    process = WebhookProcess(simulator_settings(sim_clients, LANDB_REGISTRY="noop"), tmp_path / "webhook.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_a_node_joining_a_cluster_at_the_edge_of_the_envelope_is_applied_with_default_settings(
    simulator: Simulator, webhook: WebhookProcess
) -> None:
    joining = node_name(CLUSTER, INGRESS)
    records = [e for e in json.loads(answered(webhook.api_port, "GET", "/records")) if e["recordType"] == "A"]
    assert len(records) == NAMES and all(len(e["targets"]) == INGRESS for e in records)
    desired = [{"dnsName": e["dnsName"], "targets": ["192.0.2.1"], "recordType": "A"} for e in records]
    adjusted = json.loads(
        answered(webhook.api_port, "POST", "/adjustendpoints", json.dumps(desired).encode())
    )
    assert all(node_ip(CLUSTER, INGRESS) in e["targets"] for e in adjusted)
    body = json.dumps({"updateOld": records, "updateNew": adjusted}, separators=(",", ":")).encode()

    status, reply = call(webhook.api_port, "POST", "/records", body)

    assert status == 204, reply[:500]
    assert 2**20 < len(body) <= DEFAULT_MAX_REQUEST_BODY, len(body)
    carried = {
        t.label for t in read_aliases(simulator.state.metadata(server_id(CLUSTER, joining))).load_tokens()
    }
    assert carried == set(LABELS)
    assert peak_rss_mib(webhook.pid) < memory_limit_mib()
