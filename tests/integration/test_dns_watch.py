"""The DNS watcher (provider/watch/dns_watch.py) against a real DNS server: Knot, updated as LanDB would.

The tests play LanDB's publication with RFC 2136 updates (tests/support/knot.py) and drive the watcher's
clock and its steps directly: no sleeping. Every question it asks is counted at the resolver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_webhook.adapters.dns import DnsResolver
from landb_webhook.config import parse_resolver
from landb_webhook.landb.propagation import Answer, State
from landb_webhook.metrics import Metrics
from landb_webhook.provider.watch.dns_watch import DnsWatch
from landb_webhook.provider.watch.publications import PublicationLog
from support.default_options import dns_watch_options
from support.knot import KnotServer, knot, silent_resolver

__all__ = ["knot"]

PERIOD = 900.0
START = 1_800_000_000.0
A, B, C = "10.1.0.1", "10.1.0.2", "10.1.0.3"


@dataclass
class Clock:
    now: float = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class CountingResolver:
    """The real adapter, each question counted (the watcher sees the same answers)."""

    resolver: DnsResolver
    asked: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return self.resolver.where

    def resolve(self, dns_name: str) -> Answer:
        self.asked.append(dns_name)
        return self.resolver.resolve(dns_name)


@dataclass
class Watching:
    clock: Clock
    published: PublicationLog
    resolver: CountingResolver
    watch: DnsWatch
    metrics: Metrics

    def state(self, name: str) -> State | None:
        found = self.watch.judgements().get(name)
        return found.state if found is not None else None

    def step_at(self, seconds: float) -> list[str]:
        """Move the clock on, run one step; the names asked in it."""
        self.clock.advance(seconds)
        before = len(self.resolver.asked)
        self.watch.step()
        return self.resolver.asked[before:]

    def gauge(self, state: str) -> float:
        value = self.metrics.registry.get_sample_value("landb_webhook_dns_names", {"state": state})
        assert value is not None
        return value


def watching(address: str, *, qps: float = 50.0, recheck: float = 60.0, timeout: float = 2.0) -> Watching:
    clock = Clock()
    published = PublicationLog()
    resolver = CountingResolver(DnsResolver([parse_resolver(address)], timeout=timeout))
    metrics = Metrics.create(process_metrics=False)
    options = dns_watch_options(queries_per_second=qps, recheck_period=recheck, sync_period=PERIOD)
    watch = DnsWatch(published, resolver, options, metrics=metrics, clock=clock)
    return Watching(clock, published, resolver, watch, metrics)


@pytest.fixture
def world(knot: KnotServer) -> Iterator[Watching]:
    yield watching(knot.address)


def messages(logs: list[dict[str, Any]]) -> list[str]:
    return [entry["event"] for entry in logs if entry["log_level"] in ("info", "warning")]


def write(world: Watching, name: str, ips: set[str], *, also: dict[str, set[str]] | None = None) -> None:
    """ApplyChanges wrote ``name``; the next Records reports it carried by ``ips``."""
    world.published.written([f"{name}.cern.ch"], world.clock())
    carried = {f"{n}.cern.ch": sorted(i) for n, i in (also or {}).items()}
    if ips:
        carried[f"{name}.cern.ch"] = sorted(ips)
    world.published.reported(carried, world.clock())


def test_a_written_name_is_pending_until_dns_answers_its_carriers_then_published(
    knot: KnotServer, world: Watching
) -> None:
    world.published.reported({}, world.clock())  # the first Records of the process
    write(world, "pub", {A, B, C})

    with capture_logs() as logs:
        world.step_at(60)
        assert world.state("pub.cern.ch") is State.PENDING
        knot.publish("pub", [A, B, C])  # LanDB's sync, 11 minutes after the write
        world.step_at(600)
        assert world.state("pub.cern.ch") is State.PUBLISHED
        world.step_at(60)  # asked again: nothing new to say

    assert messages(logs) == [
        "pub.cern.ch does not resolve to its 3 ingress nodes yet (no such name), 1 min after the write",
        "pub.cern.ch resolves to its 3 ingress nodes, 11 min after the write",
    ]
    assert (world.gauge("published"), world.gauge("pending")) == (1, 0)
    timed = world.metrics.registry.get_sample_value
    assert (
        timed("landb_webhook_dns_publication_seconds_count"),
        timed("landb_webhook_dns_publication_seconds_sum"),
    ) == (
        1,
        660,
    )  # timed once, at its change to published: 11 minutes after the write


def test_a_carrier_that_left_is_stale_until_dns_drops_it(knot: KnotServer, world: Watching) -> None:
    knot.publish("shrink", [A, B, C])
    world.published.reported({"shrink.cern.ch": [A, B, C]}, world.clock())
    world.step_at(0)
    assert world.state("shrink.cern.ch") is State.PUBLISHED

    write(world, "shrink", {A, B})
    with capture_logs() as logs:
        world.step_at(30)
        stale = world.state("shrink.cern.ch")
        knot.publish("shrink", [A, B])
        world.step_at(900)

    assert (stale, world.state("shrink.cern.ch")) == (State.STALE, State.PUBLISHED)
    assert messages(logs) == [
        f"shrink.cern.ch still resolves to {C} of nodes that no longer carry it, 30 s after the write",
        "shrink.cern.ch resolves to its 2 ingress nodes, 15 min after the write",
    ]


def test_a_moved_name_is_pending_while_dns_answers_the_old_carriers_only(
    knot: KnotServer, world: Watching
) -> None:
    knot.publish("moved", [A])
    world.published.reported({"moved.cern.ch": [A]}, world.clock())
    world.step_at(0)

    write(world, "moved", {B})
    world.step_at(60)
    pending = world.watch.judgements()["moved.cern.ch"]
    knot.publish("moved", [B])
    world.step_at(600)

    assert (pending.state, pending.since) == (State.PENDING, START)
    assert world.state("moved.cern.ch") is State.PUBLISHED


def test_a_removed_name_is_stale_then_gone_and_no_longer_asked(knot: KnotServer, world: Watching) -> None:
    knot.publish("removed", [A, B])
    world.published.reported({"removed.cern.ch": [A, B]}, world.clock())
    world.step_at(0)

    write(world, "removed", set())
    with capture_logs() as logs:
        world.step_at(60)
        stale = world.state("removed.cern.ch")
        knot.remove("removed")  # LanDB's next sync
        world.step_at(840)
        asked_later = world.step_at(600)

    assert stale is State.STALE
    assert world.state("removed.cern.ch") is None
    assert "removed.cern.ch" not in asked_later
    assert "removed.cern.ch" not in world.published.published()
    assert messages(logs)[-1] == "removed.cern.ch no longer resolves, 15 min after the removal"


@pytest.mark.parametrize("other", ["addresses", "cname"])
def test_something_else_answering_is_pending_for_two_sync_periods_then_a_conflict(
    knot: KnotServer, world: Watching, other: str
) -> None:
    label = f"taken-{other}"
    if other == "cname":
        knot.publish("somehost", ["10.9.9.9"])
        knot.alias(label, "somehost.cern.ch.")
    else:
        knot.publish(label, ["10.9.9.9"])
    world.published.reported({}, world.clock())
    write(world, label, {A})

    with capture_logs() as logs:
        world.step_at(60)
        early = world.state(f"{label}.cern.ch")
        world.step_at(2 * PERIOD - 60)  # exactly two sync periods: not yet
        at_limit = world.state(f"{label}.cern.ch")
        world.step_at(60)

    assert (early, at_limit, world.state(f"{label}.cern.ch")) == (
        State.PENDING,
        State.PENDING,
        State.CONFLICT,
    )
    conflict = [entry for entry in logs if entry["log_level"] == "warning"]
    answered = "CNAME somehost.cern.ch." if other == "cname" else "A 10.9.9.9"
    assert [entry["event"] for entry in conflict] == [
        f"{label}.cern.ch is answered by something this cluster never published ({answered}), "
        "31 min after the write"
    ]
    assert "LanDB" in conflict[0]["hint"]
    assert world.gauge("conflict") == 1


def test_a_resolver_that_times_out_leaves_every_name_as_it_was_and_is_said_once(knot: KnotServer) -> None:
    with silent_resolver() as silent:
        down = watching(silent, timeout=0.2)
        down.published.reported({"x.cern.ch": [A], "y.cern.ch": [B]}, down.clock())
        with capture_logs() as logs:
            down.step_at(0)
            down.step_at(60)

    assert {down.state("x.cern.ch"), down.state("y.cern.ch")} == {State.UNKNOWN}
    assert down.gauge("unknown") == 2
    assert down.metrics.registry.get_sample_value(
        "landb_webhook_dns_queries_total", {"result": "no_answer"}
    ) == len(down.resolver.asked)
    assert [entry["event"] for entry in logs if entry["log_level"] == "warning"] == [
        "DNS resolver does not answer: names keep their last DNS state until it does"
    ]
    assert all("resolves" not in entry["event"] for entry in logs)


def test_a_name_keeps_its_state_and_age_through_a_resolver_outage(knot: KnotServer) -> None:
    """The resolver is switched under the watcher: knot, then a silent socket, then knot again."""
    with silent_resolver() as silent:
        w = watching(knot.address)
        w.published.reported({}, w.clock())
        write(w, "outage", {A})
        w.step_at(60)
        before = w.watch.judgements()["outage.cern.ch"]
        real = w.resolver.resolver
        w.resolver.resolver = DnsResolver([parse_resolver(silent)], timeout=0.2)
        w.step_at(60)
        during = w.watch.judgements()["outage.cern.ch"]
        w.resolver.resolver = real
        with capture_logs() as logs:
            w.step_at(60)

    after = w.watch.judgements()["outage.cern.ch"]
    assert (before.state, during.state, after.state) == (State.PENDING, State.UNKNOWN, State.PENDING)
    assert before.since == during.since == after.since == START
    assert messages(logs) == ["DNS resolver answers again"]


def test_the_query_rate_is_bounded_and_each_name_is_asked_once_per_recheck_period(knot: KnotServer) -> None:
    names = {f"rate{i}.cern.ch": [A] for i in range(30)}
    w = watching(knot.address, qps=5, recheck=60)
    w.published.reported(names, w.clock())

    per_second = [len(w.step_at(0 if second == 0 else 1)) for second in range(6)]
    for _ in range(60):
        w.step_at(1)

    assert per_second == [5, 5, 5, 5, 5, 5]
    asked = Counter(w.resolver.asked)
    assert set(asked) == set(names)
    assert set(asked.values()) == {2}  # 66 s: the first round, then one more per recheck period


def test_a_name_written_since_its_last_question_is_asked_first(knot: KnotServer) -> None:
    names = {f"order{i}.cern.ch": [A] for i in range(5)}
    w = watching(knot.address, qps=1, recheck=60)
    w.published.reported({}, w.clock())
    w.published.reported(names, w.clock())
    for _ in range(5):
        w.step_at(1)
    assert len(set(w.resolver.asked)) == 5

    write(w, "order3", {A, B}, also={n.removesuffix(".cern.ch"): set(i) for n, i in names.items()})
    w.clock.advance(120)  # every name is due again

    assert w.step_at(1) == ["order3.cern.ch"]


def test_a_published_name_taken_by_someone_else_turns_conflict_and_back_when_released(
    knot: KnotServer, world: Watching
) -> None:
    """Written long ago, published; then DNS answers a CNAME: pending for two sync periods from then,
    a conflict after, and published again once LanDB answers the carriers."""
    world.published.reported({}, world.clock())
    write(world, "later", {A})
    knot.publish("later", [A])
    world.step_at(60)
    world.clock.advance(10 * PERIOD)

    knot.alias("later", "elsewhere.cern.ch.")
    seen = []
    with capture_logs() as logs:
        for seconds in (60, 2 * PERIOD, 60):
            world.step_at(seconds)
            seen.append(world.state("later.cern.ch"))
        knot.publish("later", [A])
        world.step_at(60)
        seen.append(world.state("later.cern.ch"))

    assert seen == [State.PENDING, State.PENDING, State.CONFLICT, State.PUBLISHED]
    assert [(entry["before"], entry["dns"]) for entry in logs if "dns" in entry] == [
        ("published", "pending"),
        ("pending", "conflict"),
        ("conflict", "published"),
    ]


def test_a_name_in_conflict_stays_in_conflict_through_node_changes_while_dns_answers_the_same_stranger(
    knot: KnotServer, world: Watching
) -> None:
    """A node joining, then one leaving, writes the name again: DNS answering something this cluster never
    published throughout, the name stays a conflict (no line, the gauge steady) instead of going back to
    pending for two sync periods after each write; LanDB answering the carriers clears it."""
    knot.publish("held", ["10.9.9.9"])
    world.published.reported({}, world.clock())
    write(world, "held", {A})
    world.step_at(60)
    world.step_at(2 * PERIOD)
    assert world.state("held.cern.ch") is State.CONFLICT

    seen = []
    with capture_logs() as logs:
        for carriers in ({A, B}, {B}):  # a node joins, later the first one leaves
            write(world, "held", carriers)
            for seconds in (30, PERIOD, PERIOD, 60):
                world.step_at(seconds)
                seen.append(world.state("held.cern.ch"))
                assert world.gauge("conflict") == 1
        knot.publish("held", [B])
        world.step_at(PERIOD)
        seen.append(world.state("held.cern.ch"))

    assert seen == [State.CONFLICT] * 8 + [State.PUBLISHED]
    said = [(entry["before"], entry["dns"]) for entry in logs if "dns" in entry]
    assert said == [("conflict", "published")]
