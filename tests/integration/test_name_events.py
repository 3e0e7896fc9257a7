"""Kubernetes Events for the people behind each name, through the real kubernetes client against the
simulator's events.k8s.io/v1 API: each Ingress hears what happened to its name (written, refused and
why), a second loop adds no event, a first publish of 1,000 names stays within the documented rate with
the last state of every name written, and an event API that fails changes no webhook answer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from landb_simulator import Simulator, seed_cluster, seed_gateway_route
from landb_simulator.external_dns import plan
from landb_webhook.adapters.events import KubernetesEventSink
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.backends import KubeEvent, ObjectRef
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.propagation import Addresses, Judgement, Published, State, Transition
from landb_webhook.metrics import Metrics
from landb_webhook.provider import LandbProvider
from landb_webhook.provider.watch.event_emitter import EmitterOptions, EventEmitter
from landb_webhook.wiring import build_adapters, provider_on
from support.fake_time import FakeTime
from support.provider_cluster import OWNER, Cluster, settings_for

NAMESPACE = "team-a"


def ingress(name: str, host: str) -> Endpoint:
    return Endpoint(
        host, "A", ("192.0.2.1",), record_ttl=300, labels=(("resource", f"ingress/{NAMESPACE}/{name}"),)
    )


def route(name: str, host: str) -> Endpoint:
    """An HTTPRoute's endpoint, as external-dns' gateway-httproute source labels it."""
    return Endpoint(
        host, "A", ("192.0.2.1",), record_ttl=300, labels=(("resource", f"httproute/{NAMESPACE}/{name}"),)
    )


def loop(cluster: Cluster) -> Changes:
    return cluster.loop()


def notes(sim: Simulator, reason: str) -> dict[str, str]:
    """Object name -> the note of its event with ``reason``."""
    return {e["regarding"]["name"]: e["note"] for e in sim.state.events(NAMESPACE) if e["reason"] == reason}


def test_each_ingress_hears_what_happened_to_its_name_and_a_second_loop_adds_no_event(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(events=True)
    sim = cluster.sim
    good = sim.state.add_ingress(NAMESPACE, "myapp", ["myapp.cern.ch"])
    sim.state.add_ingress(NAMESPACE, "elsewhere", ["myapp.example.org"])
    cluster.desired = [ingress("myapp", "myapp.cern.ch"), ingress("elsewhere", "myapp.example.org")]
    cluster.settle()

    written = cluster.eventually(lambda: notes(sim, "Written"), what="the Written event")
    refused = cluster.eventually(lambda: notes(sim, "Refused"), what="the Refused event")
    assert written["myapp"].startswith("myapp.cern.ch written on 3 ingress nodes (")
    assert "DNS pending" in written["myapp"]
    assert refused["elsewhere"].startswith("myapp.example.org not published: 'myapp.example.org' is not in")
    assert "change the host" in refused["elsewhere"]
    event = next(e for e in sim.state.events(NAMESPACE) if e["reason"] == "Written")
    assert event["regarding"] == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "namespace": NAMESPACE,
        "name": "myapp",
        "uid": good["metadata"]["uid"],
    }
    assert (event["type"], event["reportingController"], event["action"]) == (
        "Normal",
        "landb-webhook",
        "Write",
    )

    names_before = sorted(e["metadata"]["name"] for e in sim.state.events(NAMESPACE))
    assert loop(cluster) == Changes()
    assert cluster.adapters.events is not None
    cluster.eventually(lambda: cluster.adapters.events.waiting() == 0, what="the emitter idle")
    assert sorted(e["metadata"]["name"] for e in sim.state.events(NAMESPACE)) == names_before
    refused_again = next(e for e in sim.state.events(NAMESPACE) if e["regarding"]["name"] == "elsewhere")
    assert (
        refused_again["series"]["count"] >= 2
    )  # dropped by every loop's AdjustEndpoints: one event, counted


@pytest.mark.parametrize("status", [503, 403])
def test_an_event_api_that_fails_changes_no_webhook_answer(make_cluster: Any, status: int) -> None:
    failing = make_cluster(events=True)
    failing.sim.state.add_ingress(NAMESPACE, "myapp", ["myapp.cern.ch"])
    fault = failing.sim.state.inject_fault(
        api="kubernetes",
        path_pattern=r"^/apis/(events\.k8s\.io|networking\.k8s\.io)/",
        status=status,
        times=None,
    )
    failing.desired = [ingress("myapp", "myapp.cern.ch"), ingress("elsewhere", "myapp.example.org")]
    first = loop(failing)  # ApplyChanges answered 204: an ApplyError would be raised here
    assert sorted((e.dns_name, e.record_type) for e in first.create) == [
        ("a-myapp.cern.ch", "TXT"),
        ("myapp.cern.ch", "A"),
    ]
    assert failing.provider.readiness().ready
    failing.eventually(lambda: fault.hits > 0, what="an event write refused")
    assert loop(failing) == Changes()
    assert [len(e.targets) for e in failing.provider.records() if e.record_type == "A"] == [3]
    failed = "unavailable" if status == 503 else "forbidden"
    assert failing.eventually(
        lambda: failing.metrics.registry.get_sample_value("landb_webhook_events_total", {"result": failed}),
        what=f"events_total{{result={failed!r}}}",
    )
    assert failing.sim.state.events(NAMESPACE) == []


class TimedSink:
    """The real sink, with the virtual time of each write the emitter made through it."""

    def __init__(self, sink: KubernetesEventSink, clock: FakeTime) -> None:
        self.sink, self.clock = sink, clock
        self.at: list[tuple[float, KubeEvent]] = []

    def write(self, event: KubeEvent) -> None:
        self.sink.write(event)
        self.at.append((self.clock.monotonic(), event))

    def forget(self, regarding: ObjectRef) -> None:
        self.sink.forget(regarding)


@pytest.fixture
def thousand_names(
    simulator: Simulator, sim_clients: Any
) -> Iterator[tuple[LandbProvider, EventEmitter, TimedSink, FakeTime, Metrics]]:
    seed_cluster(simulator.state, ingress_nodes=3, workers=1)
    for index in range(1000):
        simulator.state.add_ingress(NAMESPACE, f"app{index}", [f"app{index}.cern.ch"])
    settings = settings_for(sim_clients)
    metrics = Metrics.create(process_metrics=False)
    adapters = build_adapters(settings, metrics=metrics)
    clock = FakeTime()
    api_client = api_client_for(settings.kubeconfig)
    sink = TimedSink(
        KubernetesEventSink(api_client, instance="test-pod", request_timeout=settings.upstream_timeout), clock
    )
    options = EmitterOptions(rate=10.0, burst=100, queue_cap=10_000)
    emitter = EventEmitter(sink, metrics, options, clock=clock.time, monotonic=clock.monotonic)
    provider = provider_on(adapters, settings, metrics, events=emitter)
    adapters.nodes.start()
    assert adapters.nodes.wait_synced(5)
    try:
        yield provider, emitter, sink, clock, metrics
    finally:
        adapters.close()
        api_client.close()


def test_a_first_publish_of_1000_names_is_within_the_rate_and_no_name_loses_its_last_state(
    simulator: Simulator, thousand_names: Any
) -> None:
    provider, emitter, sink, clock, metrics = thousand_names
    desired = [ingress(f"app{index}", f"app{index}.cern.ch") for index in range(1000)]
    changes = plan(provider.records(), provider.adjust_endpoints(desired), owner=OWNER, policy="sync").changes
    provider.apply_changes(changes)
    assert emitter.waiting() == 1000  # one per name, whatever else was told
    started = clock.monotonic()
    # DNS sees half of them on the air before their Written event could go out: that state is the last.
    published = Published(frozenset({"10.0.0.1"}), written_at=clock.time())
    for index in range(500):
        name = f"app{index}.cern.ch"
        judged = Judgement(State.PUBLISHED, clock.time(), Addresses(published.ips))
        emitter.tell_dns(Transition(name, State.PENDING, judged, published, clock.time() + 660))
    most_waiting = emitter.waiting()
    while (wait := emitter.step()) is not None:
        most_waiting = max(most_waiting, emitter.waiting())
        clock.sleep(wait)

    for count, (at, _) in enumerate(sink.at, start=1):
        assert count <= 100 + 10 * (at - started) + 1e-6
    assert most_waiting <= 1000
    last = {e["regarding"]["name"]: e["reason"] for e in simulator.state.events(NAMESPACE)}
    assert last == {f"app{index}": "OnTheAir" if index < 500 else "Written" for index in range(1000)}
    assert metrics.registry.get_sample_value("landb_webhook_events_total", {"result": "created"}) == 1000
    on_air = next(e["note"] for e in simulator.state.events(NAMESPACE) if e["regarding"]["name"] == "app7")
    assert on_air.startswith("app7.cern.ch resolves to its 1 ingress node, 11 min after the write")


def test_with_landb_events_false_nothing_is_written(make_cluster: Any) -> None:
    cluster = make_cluster(events=False)
    cluster.sim.state.add_ingress(NAMESPACE, "myapp", ["myapp.cern.ch"])
    cluster.desired = [ingress("myapp", "myapp.cern.ch"), ingress("elsewhere", "myapp.example.org")]
    cluster.settle()
    assert cluster.adapters.events is None
    assert not [
        c for c in cluster.sim.state.api_calls("kubernetes") if "events" in c.path or "ingresses" in c.path
    ]
    assert cluster.sim.state.events() == []


def test_after_a_move_from_an_ingress_to_an_httproute_every_event_is_the_routes(make_cluster: Any) -> None:
    """The name moves from its Ingress to an HTTPRoute (created beside it, then the Ingress deleted):
    nothing is written, and when a node joins, the name's Written event goes on the route by its uid and
    none on the deleted Ingress, though external-dns' update names the Ingress on its old side (the txt
    registry labels the current record with its claim's resource)."""
    cluster = make_cluster(events=True)
    sim, emitter = cluster.sim, cluster.adapters.events
    assert emitter is not None
    ingress_obj = sim.state.add_ingress(NAMESPACE, "myapp", ["myapp.cern.ch"])
    seed_gateway_route(sim.state, ["188.184.1.1"], namespace=NAMESPACE)
    [route_obj] = sim.state.routes(NAMESPACE)
    cluster.desired = [ingress("myapp", "myapp.cern.ch")]
    cluster.settle()
    cluster.eventually(lambda: notes(sim, "Written"), what="the Written event on the Ingress")

    cluster.desired = [ingress("myapp", "myapp.cern.ch"), route("myapp", "myapp.cern.ch")]
    assert loop(cluster) == Changes()  # both ask: the Ingress keeps the name
    sim.state.kube.delete("ingresses", NAMESPACE, "myapp")
    cluster.desired = [route("myapp", "myapp.cern.ch")]
    assert loop(cluster) == Changes()
    cluster.eventually(emitter.idle, what="the emitter idle")
    before = {e["metadata"]["name"] for e in sim.state.events(NAMESPACE)}

    worker = next(
        n
        for n in cluster.nodes
        if "ingress" not in (sim.state.node(n) or {})["metadata"]["labels"].get("role", "")
    )
    sim.state.label_node(worker, "role", "ingress")
    adjusted = cluster.eventually(
        lambda: [e for e in cluster.provider.adjust_endpoints(cluster.desired) if len(e.targets) == 4],
        what="the joining node among the carriers",
    )
    changes = plan(cluster.provider.records(), adjusted, owner=OWNER).changes
    claimed = (("resource", f"ingress/{NAMESPACE}/myapp"),)
    cluster.provider.apply_changes(
        replace(changes, update_old=tuple(replace(e, labels=claimed) for e in changes.update_old))
    )
    cluster.eventually(emitter.idle, what="the emitter idle")
    new = [e for e in sim.state.events(NAMESPACE) if e["metadata"]["name"] not in before]
    assert [(e["regarding"]["kind"], e["regarding"]["uid"], e["reason"]) for e in new] == [
        ("HTTPRoute", route_obj["metadata"]["uid"], "Written")
    ]
    assert new[0]["regarding"]["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert ingress_obj["metadata"]["uid"] not in {e["regarding"]["uid"] for e in new}
