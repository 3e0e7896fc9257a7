"""Bad names in a change set, fuzzed through the real HTTP app and provider against the simulator.

Hypothesis mixes names LanDB can hold with every kind it cannot (other zones, several labels, wildcards,
invalid characters, labels over 63 characters, non-ASCII, odd record types) and sends them the way
external-dns does, in any key spelling. Whatever the mix: the reply is 204 or 503, the valid names are
published on every ingress node, no invalid one reaches the metadata, every drop is counted, foreign
keys are untouched and no value exceeds 254 characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import ownership_record
from landb_simulator.kube_store import CONFIGMAPS
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import is_alias_key, read_aliases
from landb_webhook.logs import REPEAT_KEYS
from landb_webhook.metrics import Metrics
from landb_webhook.webhook.wire import EndpointModel
from landb_webhook.wiring import build_provider
from support.provider_cluster import settings_for
from support.serving import Webhook, serving

INGRESS = 3

_labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
_bad_names = st.one_of(
    _labels.map(lambda label: f"{label}.example.org"),
    st.tuples(_labels, _labels).map(lambda pair: f"{pair[0]}.{pair[1]}.cern.ch"),
    _labels.map(lambda label: f"*.{label}.cern.ch"),
    st.just("*.cern.ch"),
    _labels.map(lambda label: f"-{label}.cern.ch"),
    _labels.map(lambda label: f"{label}_x.cern.ch"),
    st.integers(64, 80).map(lambda n: "a" * n + ".cern.ch"),
    _labels.map(lambda label: f"\u212a{label}.cern.ch"),
    st.just("cern.ch"),
    st.just(""),
)
_spelled = st.sampled_from((str, str.lower, str.upper, str.capitalize))


@pytest.fixture
def webhook(simulator: Simulator, sim_clients: ClientConfig) -> Iterator[tuple[Webhook, Simulator, set[str]]]:
    """The served app, the simulator, and the names of the ingress nodes (and of their servers)."""
    nodes = seed_cluster(simulator.state, ingress_nodes=INGRESS, workers=1)
    metrics = Metrics.create(process_metrics=False)
    provider, adapters = build_provider(settings_for(sim_clients, leader_election=False), metrics)
    assert adapters.nodes.wait_synced(5)
    try:
        with serving(provider, metrics=metrics, request_timeout=10, client_timeout=30) as served:
            yield served, simulator, set(nodes[:INGRESS])
    finally:
        adapters.close()


def endpoint_json(endpoint: Endpoint, key_case: Any) -> dict[str, Any]:
    encoded = json.loads(
        EndpointModel.from_endpoint(endpoint).model_dump_json(by_alias=True, exclude_defaults=True)
    )
    return {key_case(key): value for key, value in encoded.items()}


def dropped(metrics: Metrics) -> float:
    return sum(
        sample.value
        for family in metrics.dropped_endpoints_total.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    )


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    good=st.sets(_labels, min_size=1, max_size=4),
    bad=st.lists(st.tuples(_bad_names, st.sampled_from(("A", "AAAA", "CNAME", "a"))), min_size=1, max_size=4),
    odd_types=st.lists(st.tuples(_labels, st.sampled_from(("MX", "SRV", "NS", "PTR"))), max_size=2),
    key_case=_spelled,
)
@example(
    good={"app"},
    bad=[("a" * 64 + ".cern.ch", "A"), ("x.y.cern.ch", "CNAME"), ("\u212aapp.cern.ch", "A")],
    odd_types=[("mail", "MX")],
    key_case=str.upper,
)
def test_bad_names_are_dropped_and_counted_and_the_good_ones_still_converge(
    webhook: tuple[Webhook, Simulator, set[str]],
    good: set[str],
    bad: list[tuple[str, str]],
    odd_types: list[tuple[str, str]],
    key_case: Any,
) -> None:
    served, sim, ingress = webhook
    baseline = {server.id: sim.state.metadata(server.id) for server in sim.state.servers()}
    records = [Endpoint(f"{label}.cern.ch", "A", ("192.0.2.1",)) for label in sorted(good)]
    unwanted = [Endpoint(name, kind, ("192.0.2.9",)) for name, kind in bad]
    unwanted += [Endpoint(f"{label}.cern.ch", kind, ("192.0.2.9",)) for label, kind in odd_types]
    sent = [*records, *(ownership_record(r, "fuzz") for r in records), *unwanted]
    drops_before = dropped(served.metrics)
    try:
        reply = served.api.post(
            "/records", content=json.dumps({key_case("create"): [endpoint_json(e, key_case) for e in sent]})
        )

        assert reply.status_code == 204, reply.text
        assert dropped(served.metrics) - drops_before >= len(unwanted)
        for server in sim.state.servers():
            metadata = sim.state.metadata(server.id)
            foreign = {k: v for k, v in metadata.items() if not is_alias_key(k)}
            assert foreign == {k: v for k, v in baseline[server.id].items() if not is_alias_key(k)}
            assert all(len(v) <= 254 for k, v in metadata.items() if is_alias_key(k))
            labels = {token.label for token in read_aliases(metadata).load_tokens()}
            assert labels <= good
            if server.name in ingress:
                assert labels == good
    finally:
        for server_id, metadata in baseline.items():
            sim.state.set_metadata_direct(server_id, metadata)
        for configmap in sim.state.kube.select(CONFIGMAPS, "default")[0]:
            sim.state.kube.delete(CONFIGMAPS, "default", configmap["metadata"]["name"])


def test_a_dropped_endpoint_is_said_once_per_period_naming_its_ingress(
    webhook: tuple[Webhook, Simulator, set[str]],
) -> None:
    served, _sim, _ingress = webhook
    wildcard = Endpoint("*.apps.cern.ch", "A", ("192.0.2.9",), labels=(("resource", "ingress/web/apps"),))
    body = json.dumps([endpoint_json(wildcard, str)])

    with capture_logs() as logs:
        replies = [served.api.post("/adjustendpoints", content=body) for _ in range(3)]

    assert [reply.status_code for reply in replies] == [200, 200, 200]
    [line] = [entry for entry in logs if str(entry["event"]).startswith("endpoint dropped")]
    assert line["resource"] == "ingress/web/apps"
    assert line["subject"] == "*.apps.cern.ch A"


def test_the_warnings_about_many_distinct_dropped_names_are_bounded(
    webhook: tuple[Webhook, Simulator, set[str]],
) -> None:
    served, _sim, _ingress = webhook
    names = [Endpoint(f"app{index}.example.org", "A", ("192.0.2.9",)) for index in range(REPEAT_KEYS + 500)]
    body = json.dumps([endpoint_json(endpoint, str) for endpoint in names])

    with capture_logs() as logs:
        reply = served.api.post("/adjustendpoints", content=body)
        again = served.api.post("/adjustendpoints", content=body)

    assert reply.status_code == again.status_code == 200
    drops = [entry for entry in logs if str(entry["event"]).startswith("endpoint dropped")]
    assert len(drops) == REPEAT_KEYS
    [overflow] = [
        entry for entry in logs if entry["event"] == "too many distinct warnings: some were not logged"
    ]
    assert overflow["remembered"] == REPEAT_KEYS
