"""What request bodies cost ``landb-webhook serve`` in memory.

external-dns' bodies are decoded straight from their bytes (webhook/wire.py): a node joining, whose body
is addresses, costs a small multiple of its size. A body of many names costs what the provider does with
each name: 1 MiB of them (~6,000 names) keeps the process under the chart's memory request. The default
limit (16 MiB) is sized for the node joining of the envelope's clusters (test_envelope_edge.py), not for
a body of 100,000 names: LANDB_MAX_REQUEST_ENDPOINTS refuses that one. Measured on the real process
against the simulator: its peak resident set (``VmHWM``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.body_memory import decode_cost, endpoint, peak_rss_mib

from e2e.e2e_support import MEDIA_TYPE, WebhookProcess, http_post, simulator_settings
from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_webhook.config import DEFAULT_MAX_NAMES_PER_NAMESPACE

CHART_VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "values.yaml"
HEADERS = {"Content-Type": MEDIA_TYPE, "Accept": MEDIA_TYPE}


def memory_request_mib() -> int:
    """The webhook container's memory request in the Helm chart (``requests: {..., memory: 192Mi}``)."""
    match = re.search(r"requests:.*memory:\s*(\d+)Mi", CHART_VALUES.read_text())
    assert match is not None, f"no memory request in {CHART_VALUES}"
    return int(match[1])


LIMIT = 2**20
"""The limit these bodies are measured at (LANDB_MAX_REQUEST_BODY's default was 1 MiB until issue 27)."""


def largest(build: Any) -> bytes:
    """``build(n)`` for the largest ``n`` whose body still fits ``LIMIT``."""
    low, high = 1, LIMIT // 32
    while low < high:
        middle = (low + high + 1) // 2
        if len(build(middle)) <= LIMIT:
            low = middle
        else:
            high = middle - 1
    body: bytes = build(low)
    assert LIMIT - len(body) < 1000
    return body


def desired(count: int) -> bytes:
    return json.dumps([endpoint(index) for index in range(count)]).encode()


def deletions(count: int) -> bytes:
    return json.dumps({"delete": [endpoint(index) for index in range(count)]}).encode()


@pytest.fixture
def webhook(simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path) -> Iterator[WebhookProcess]:
    seed_cluster(simulator.state, ingress_nodes=3, workers=1)
    # Registry noop: the deletions are of names nobody publishes, so there is nothing to refuse.
    settings = simulator_settings(sim_clients, LANDB_REGISTRY="noop", LANDB_MAX_REQUEST_BODY=str(LIMIT))
    process = WebhookProcess(settings, tmp_path / "webhook.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_bodies_of_1_mib_of_names_keep_serve_under_the_charts_memory_request(
    webhook: WebhookProcess,
) -> None:
    adjust = largest(desired)
    apply = largest(deletions)

    adjusted, _ = http_post(webhook.api_port, "/adjustendpoints", adjust, HEADERS)
    applied, applied_reply = http_post(webhook.api_port, "/records", apply, HEADERS)
    too_large, reply = http_post(webhook.api_port, "/adjustendpoints", adjust + b" " * 1000, HEADERS)
    peak = peak_rss_mib(webhook.pid)

    assert (adjusted, applied, too_large) == (200, 204, 503), (applied_reply, reply)
    assert peak < memory_request_mib(), f"peak RSS {peak:.0f} MiB"


def memory_limit_mib() -> int:
    """The webhook container's memory limit in the Helm chart (``limits: { memory: 384Mi }``)."""
    match = re.search(r"limits:.*memory:\s*(\d+)Mi", CHART_VALUES.read_text())
    assert match is not None, f"no memory limit in {CHART_VALUES}"
    return int(match[1])


def test_16_mib_of_names_is_cut_to_the_endpoint_limit_with_default_settings_under_the_charts_memory_limit(
    simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path
) -> None:
    """~100,000 names fit the default body limit; the provider's work on them would take ``serve`` to
    ~470 MiB. LANDB_MAX_REQUEST_ENDPOINTS cuts them to its limit before they are decoded (webhook/bounded.py:
    element by element, the excess of the largest requester never decoded), and the rest is answered."""
    seed_cluster(simulator.state, ingress_nodes=3, workers=1)
    process = WebhookProcess(simulator_settings(sim_clients), tmp_path / "webhook.log")
    process.start()
    try:
        body = desired(16 * 2**20 // len(desired(1)))
        status, reply = http_post(process.api_port, "/adjustendpoints", body, HEADERS)
        peak = peak_rss_mib(process.pid)
    finally:
        process.stop()

    assert len(body) > 15 * 2**20
    assert status == 200, reply
    # every name's Ingress is in one namespace: past the cut, its cap keeps 1,000 (provider.ownership.tenancy)
    assert len(json.loads(reply)) == DEFAULT_MAX_NAMES_PER_NAMESPACE
    assert peak < memory_limit_mib(), f"peak RSS {peak:.0f} MiB"


def test_the_body_of_a_node_joining_is_decoded_in_a_small_multiple_of_its_size() -> None:
    """external-dns' ApplyChanges when a node joins 300 ingress nodes x 1,000 names (9 MiB) is decoded
    straight from its bytes (webhook/wire.py's exact models): at most 3x the body at the peak, where the
    forgiving models' Python dicts alone cost ~7x (62 MiB)."""
    cost = decode_cost(300, 1000)

    assert cost["body_mib"] > 8
    assert cost["peak_over_start_mib"] <= 3 * cost["body_mib"], cost
