"""Events for the people behind each name (provider.events, provider.event_emitter): which transition makes
which event, one event per transition with repeats in its series, and the emitter's promises (rate limit,
the last state of every name, bounded memory, failures that stay its own). Virtual time, no sleeps."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from landb_webhook.backends import EventWriteFailed, KubeEvent, ObjectRef
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.propagation import Addresses, Judgement, Published, State, Transition
from landb_webhook.metrics import Metrics
from landb_webhook.provider.watch.event_emitter import EmitterOptions, EventEmitter, dns_change
from landb_webhook.provider.watch.events import (
    MAX_NOTE_BYTES,
    SERIES_REFRESH_SECONDS,
    EventLedger,
    NameChange,
    intent,
    note,
    source_of,
)
from support.fake_time import FakeTime

APP = ObjectRef("Ingress", "team-a", "myapp")


def asking(name: str, resource: str = "ingress/team-a/myapp") -> Endpoint:
    return Endpoint(name, "A", ("10.0.0.1",), labels=(("resource", resource),))


class RecordingSink:
    """backends.EventSink keeping what it was given, with the virtual time; ``failing``: the kind it fails
    every write with."""

    def __init__(self, clock: FakeTime, failing: str | None = None) -> None:
        self.clock = clock
        self.failing = failing
        self.written: list[tuple[float, KubeEvent]] = []
        self.forgotten: list[ObjectRef] = []

    def write(self, event: KubeEvent) -> None:
        if self.failing is not None:
            raise EventWriteFailed(self.failing, f"HTTP 403 Forbidden for {event.name}")
        self.written.append((self.clock.monotonic(), event))

    def forget(self, regarding: ObjectRef) -> None:
        self.forgotten.append(regarding)


def drain(emitter: EventEmitter, clock: FakeTime) -> None:
    """Run the emitter's steps until nothing waits, sleeping (virtually) what each step asks."""
    while (wait := emitter.step()) is not None:
        clock.sleep(wait)


def events_total(metrics: Metrics, result: str) -> float:
    return metrics.registry.get_sample_value("landb_webhook_events_total", {"result": result}) or 0.0


# -- the decision --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        ("ingress/team-a/myapp", APP),
        ("service/team-b/web", ObjectRef("Service", "team-b", "web")),
        ("httproute/team-a/myapp", ObjectRef("HTTPRoute", "team-a", "myapp")),
        ("grpcroute/team-a/api", ObjectRef("GRPCRoute", "team-a", "api")),
        ("tlsroute/team-a/tls", ObjectRef("TLSRoute", "team-a", "tls")),
        ("tcproute/team-a/db", None),  # a TCP route names no host: no name of ours
        ("crd/team-a/x", None),
        ("ingress/team-a", None),
        ("ingress//myapp", None),
        (None, None),
    ],
)
def test_the_resource_label_names_an_ingress_a_service_or_a_route(
    resource: str | None, expected: ObjectRef
) -> None:
    assert source_of(resource) == expected


@pytest.mark.parametrize(
    ("change", "type_", "reason", "says"),
    [
        (
            NameChange("myapp.cern.ch", "written", "3 ingress nodes (a, b, c)"),
            "Normal",
            "Written",
            "DNS pending",
        ),
        (NameChange("myapp.cern.ch", "removed", "3 ingress nodes"), "Normal", "Removed", "DNS drops it"),
        (
            NameChange("my.app.cern.ch", "refused", "has more than one label before cern.ch", "multi_label"),
            "Warning",
            "Refused",
            "cannot be a LanDB alias: change it",
        ),
        (
            NameChange(
                "myapp.example.org", "refused", "'myapp.example.org' is not in the cern.ch zone", "other_zone"
            ),
            "Warning",
            "Refused",
            "change the host",
        ),
        (
            NameChange("myapp.cern.ch", "refused", "held by someone else", "not_owned"),
            "Warning",
            "Refused",
            "adopt",
        ),
        (
            NameChange("myapp.cern.ch", "refused", "LanDB holds a CNAME", "plain_alias"),
            "Warning",
            "Refused",
            "remove",
        ),
        (
            NameChange(
                "myapp.cern.ch", "published", "myapp.cern.ch resolves to its 3 ingress nodes, 11 min after"
            ),
            "Normal",
            "OnTheAir",
            "resolves to its 3 ingress nodes",
        ),
        (
            NameChange("myapp.cern.ch", "conflict", "myapp.cern.ch is answered by"),
            "Warning",
            "DnsConflict",
            "LanDB",
        ),
        (
            NameChange("myapp.cern.ch", "gone", "myapp.cern.ch no longer resolves"),
            "Normal",
            "DnsGone",
            "no longer",
        ),
    ],
)
def test_each_transition_makes_one_event_naming_the_name_what_happened_and_what_to_do(
    change: NameChange, type_: str, reason: str, says: str
) -> None:
    told = intent(APP, change)
    assert told is not None
    assert (told.type, told.reason, told.regarding) == (type_, reason, APP)
    assert change.name in told.note
    assert says in told.note


def test_pending_and_stale_make_no_event_and_a_note_stays_within_a_kib() -> None:
    assert intent(APP, NameChange("myapp.cern.ch", "pending")) is None
    assert intent(APP, NameChange("myapp.cern.ch", "stale")) is None
    told = intent(APP, NameChange("myapp.cern.ch", "refused", "é" * 2000, "capacity"))
    assert told is not None
    assert len(told.note.encode()) <= MAX_NOTE_BYTES


def transition(before: State | None, after: State, written_at: float = 1000.0) -> Transition:
    published = Published(frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"}), written_at=written_at)
    answer = Addresses(published.ips)
    return Transition(
        "myapp.cern.ch", before, Judgement(after, since=written_at, answer=answer), published, 1660.0
    )


def test_dns_on_the_air_says_how_long_after_the_write_and_a_first_look_is_no_news() -> None:
    on_air = dns_change(transition(State.PENDING, State.PUBLISHED))
    assert on_air is not None
    told = intent(APP, on_air)
    assert told is not None
    assert told.note == "myapp.cern.ch resolves to its 3 ingress nodes, 11 min after the write"
    assert dns_change(transition(None, State.PUBLISHED)) is None  # after a restart: not news
    assert dns_change(transition(State.PUBLISHED, State.PENDING)) is None  # Written said it


# -- one event per transition --------------------------------------------------------------------------


def test_a_repeat_updates_the_series_once_at_once_then_at_most_every_refresh_period() -> None:
    ledger = EventLedger()
    refused = intent(APP, NameChange("myapp.cern.ch", "refused", "held by someone else", "not_owned"))
    assert refused is not None
    first = ledger.record(refused, 100.0)
    assert first is not None and first.count == 1
    second = ledger.record(refused, 160.0)
    assert second is not None
    assert (second.name, second.count, second.first_at, second.last_at) == (first.name, 2, 100.0, 160.0)
    assert ledger.record(refused, 220.0) is None  # counted, told with the next update
    later = ledger.record(refused, 160.0 + SERIES_REFRESH_SECONDS)
    assert later is not None and (later.name, later.count) == (first.name, 4)


def test_another_state_of_the_name_is_a_new_event_and_a_forgotten_one_is_created_again() -> None:
    ledger = EventLedger()
    written = intent(APP, NameChange("myapp.cern.ch", "written", "3 ingress nodes"))
    on_air = intent(APP, NameChange("myapp.cern.ch", "published", "myapp.cern.ch resolves"))
    assert written is not None and on_air is not None
    first = ledger.record(written, 1.0)
    then = ledger.record(on_air, 2.0)
    assert first is not None and then is not None
    assert then.count == 1 and then.name != first.name
    ledger.forget(on_air)
    again = ledger.record(on_air, 3.0)
    assert again is not None and again.count == 1


def test_the_ledger_is_bounded() -> None:
    ledger = EventLedger(cap=10)
    for index in range(50):
        told = intent(
            ObjectRef("Ingress", "ns", f"app{index}"), NameChange(f"app{index}.cern.ch", "written", "x")
        )
        assert told is not None
        ledger.record(told, float(index))
    assert len(ledger) == 10


# -- the emitter ---------------------------------------------------------------------------------------


def test_a_first_publish_of_1000_names_is_written_within_the_rate_and_each_name_ends_in_its_last_state() -> (
    None
):
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock)
    options = EmitterOptions(rate=10.0, burst=100)
    emitter = EventEmitter(sink, metrics, options, clock=clock.time, monotonic=clock.monotonic)
    names = [f"app{index}.cern.ch" for index in range(1000)]
    emitter.learn(asking(name, f"ingress/team-a/app{index}") for index, name in enumerate(names))
    started = clock.monotonic()
    for name in names:
        emitter.tell(NameChange(name, "written", "3 ingress nodes"))
    for name in names[:500]:  # half of them on the air before their Written event could be sent
        emitter.tell(NameChange(name, "published", f"{name} resolves to its 3 ingress nodes"))
    drain(emitter, clock)

    for count, (at, _) in enumerate(sink.written, start=1):
        assert count <= options.burst + options.rate * (at - started) + 1e-6
    last = {event.regarding.name: event.reason for _, event in sink.written}
    assert len(sink.written) == 1000  # one per name: the superseded state is never sent
    assert last == {f"app{index}": "OnTheAir" if index < 500 else "Written" for index in range(1000)}
    assert events_total(metrics, "superseded") == 500
    assert events_total(metrics, "created") == 1000


def test_memory_is_bounded_past_the_cap_the_oldest_waiting_is_dropped_and_counted() -> None:
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock)
    emitter = EventEmitter(
        sink,
        metrics,
        EmitterOptions(rate=10.0, burst=5, queue_cap=20),
        clock=clock.time,
        monotonic=clock.monotonic,
    )
    for index in range(100):
        emitter.tell(
            NameChange(f"app{index}.cern.ch", "written", "3 ingress nodes"), [asking(f"app{index}.cern.ch")]
        )
        assert emitter.waiting() <= 20
    drain(emitter, clock)
    assert [event.note.split()[0] for _, event in sink.written] == [
        f"app{index}.cern.ch" for index in range(80, 100)
    ]
    assert events_total(metrics, "dropped") == 80


def test_a_name_refused_every_loop_is_one_event_whose_series_counts_the_loops() -> None:
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock)
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    for _ in range(10):  # ten external-dns loops, a minute apart
        emitter.tell(
            NameChange("myapp.cern.ch", "refused", "held by hand", "not_owned"), [asking("myapp.cern.ch")]
        )
        drain(emitter, clock)
        clock.sleep(60)
    assert [(event.count, event.name) for _, event in sink.written] == [
        (1, sink.written[0][1].name),
        (2, sink.written[0][1].name),
    ]


def test_a_failing_event_api_is_counted_said_once_per_kind_and_never_raises() -> None:
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock, failing="forbidden")
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    with capture_logs() as logs:
        for index in range(30):
            emitter.tell(
                NameChange(f"app{index}.cern.ch", "written", "3 nodes"), [asking(f"app{index}.cern.ch")]
            )
        drain(emitter, clock)
    said = [line for line in logs if line["event"] == "Kubernetes event not written"]
    assert len(said) == 1
    assert said[0]["kind"] == "forbidden"
    assert "events.k8s.io" in said[0]["hint"]
    assert events_total(metrics, "forbidden") == 30


def test_an_expired_event_is_written_afresh_when_its_series_would_be_updated() -> None:
    clock, metrics = FakeTime(), Metrics.create()

    class ExpiringSink(RecordingSink):
        def write(self, event: KubeEvent) -> None:
            if event.count > 1:
                raise EventWriteFailed("event_gone", "HTTP 404 NotFound")
            super().write(event)

    sink = ExpiringSink(clock)
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    refused = NameChange("myapp.cern.ch", "refused", "held by hand", "not_owned")
    for _ in range(2):
        emitter.tell(refused, [asking("myapp.cern.ch")])
        drain(emitter, clock)
    assert [event.count for _, event in sink.written] == [1, 1]
    assert sink.written[0][1].name != sink.written[1][1].name
    assert events_total(metrics, "event_gone") == 1


def test_a_name_no_object_asks_for_makes_no_event() -> None:
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock)
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    emitter.tell(NameChange("orphan.cern.ch", "written", "3 nodes"))
    emitter.tell(NameChange("crd.cern.ch", "written", "3 nodes"), [asking("crd.cern.ch", "crd/ns/x")])
    assert emitter.step() is None
    assert sink.written == []


def test_the_emitter_is_idle_only_once_every_event_told_has_been_written() -> None:
    clock, metrics = FakeTime(), Metrics.create()
    seen_while_writing: list[bool] = []

    class WatchingSink(RecordingSink):
        def write(self, event: KubeEvent) -> None:
            seen_while_writing.append(emitter.idle())  # nothing waits any more, but this one is not written
            super().write(event)

    emitter = EventEmitter(WatchingSink(clock), metrics, clock=clock.time, monotonic=clock.monotonic)
    assert emitter.idle()
    emitter.tell(NameChange("myapp.cern.ch", "written", "3 nodes"), [asking("myapp.cern.ch")])
    assert not emitter.idle()
    drain(emitter, clock)
    assert seen_while_writing == [False]
    assert emitter.idle()


ROUTE = ObjectRef("HTTPRoute", "team-a", "myapp")


def test_later_events_follow_the_object_asking_now_and_the_one_that_left_is_read_again() -> None:
    """Ingress -> HTTPRoute: once AdjustEndpoints hears the route alone ask for the name (the Ingress
    deleted), the name's next event is the route's, and the sink forgets what it knew of the Ingress."""
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock)
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    emitter.learn([asking("myapp.cern.ch")])
    emitter.tell(NameChange("myapp.cern.ch", "written", "3 ingress nodes"))
    drain(emitter, clock)
    emitter.learn([asking("myapp.cern.ch", "httproute/team-a/myapp")])
    emitter.tell(NameChange("myapp.cern.ch", "published", "myapp.cern.ch resolves to its 3 ingress nodes"))
    drain(emitter, clock)
    assert [(event.regarding, event.reason) for _, event in sink.written] == [
        (APP, "Written"),
        (ROUTE, "OnTheAir"),
    ]
    assert sink.forgotten == [APP]


def test_an_object_told_its_name_was_removed_is_read_again_before_its_event() -> None:
    """A removal usually follows the object's deletion: its event reads it again (a deleted object gets
    none, ``object_gone``), and an object created again under its name is known by its new uid."""
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock)
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    emitter.tell(NameChange("myapp.cern.ch", "written", "3 ingress nodes"), [asking("myapp.cern.ch")])
    drain(emitter, clock)
    assert sink.forgotten == []
    emitter.tell(NameChange("myapp.cern.ch", "removed", "3 ingress nodes"), [asking("myapp.cern.ch")])
    drain(emitter, clock)
    assert sink.forgotten == [APP]


def test_an_event_on_a_deleted_object_is_counted_and_not_warned_about() -> None:
    """An Ingress deleted is the usual reason its name is removed: no event, no warning, a count."""
    clock, metrics = FakeTime(), Metrics.create()
    sink = RecordingSink(clock, failing="object_gone")
    emitter = EventEmitter(sink, metrics, clock=clock.time, monotonic=clock.monotonic)
    with capture_logs() as logs:
        emitter.tell(NameChange("myapp.cern.ch", "removed", "3 ingress nodes"), [asking("myapp.cern.ch")])
        drain(emitter, clock)
    assert [line for line in logs if line["log_level"] != "debug"] == []
    assert events_total(metrics, "object_gone") == 1


def test_a_note_is_printable_only_whatever_name_the_object_asked_for() -> None:
    """A host outside the zone reaches the note as its Ingress spelled it: terminal escapes and a
    right-to-left override are written as escapes, never sent raw into `kubectl describe`."""
    asked = "evil\x1b[2J\u202egro.nrec.ch"
    told = note(NameChange(asked, "refused", f"'{asked}' is not in the cern.ch zone", "other_zone"))

    assert told.isprintable()
    assert "\\x1b[2J\\u202egro.nrec.ch not published" in told
