"""A name written mid-round is asked about as soon as Records reports its carriers, not at the watch's next
round (up to ``LOOK_AGAIN`` later): the demo's LanDB, and a short sync period, would otherwise publish it
before the watch ever saw it pending."""

from __future__ import annotations

import threading

from landb_webhook.landb.propagation import Addresses, Answer, NoName, State
from landb_webhook.provider.watch.dns_watch import LOOK_AGAIN, DnsWatch
from landb_webhook.provider.watch.publications import PublicationLog
from support.default_options import dns_watch_options


class Resolver:
    """Answers NXDOMAIN, and says when a given name has been asked about."""

    where = "test"

    def __init__(self, awaited: str) -> None:
        self.awaited = awaited
        self.asked = threading.Event()
        self.names: list[str] = []

    def resolve(self, dns_name: str) -> Answer:
        self.names.append(dns_name)
        if dns_name == self.awaited:
            self.asked.set()
        return NoName() if dns_name == self.awaited else Addresses(frozenset({"188.184.0.1"}))


def test_a_report_that_adds_a_name_wakes_the_watch_at_once() -> None:
    published = PublicationLog()
    published.reported({"old.cern.ch": ["188.184.0.1"]}, now=1.0)
    resolver = Resolver(awaited="new.cern.ch")
    watch = DnsWatch(published, resolver, dns_watch_options(queries_per_second=50, recheck_period=3600))
    assert watch.step() == LOOK_AGAIN  # everything asked: the thread would sleep its longest
    watch.start()
    try:
        published.written(["new.cern.ch"], now=2.0)
        published.reported({"old.cern.ch": ["188.184.0.1"], "new.cern.ch": ["188.184.0.2"]}, now=2.0)
        # Far less than LOOK_AGAIN: only a wake-up gets the question asked within it.
        assert resolver.asked.wait(LOOK_AGAIN / 3), resolver.names
    finally:
        watch.stop()
    assert resolver.names.count("old.cern.ch") == 1  # recheck period not reached: asked once


def test_a_report_that_changes_nothing_does_not_wake_it() -> None:
    published = PublicationLog()
    woken: list[None] = []
    published.on_change(lambda: woken.append(None))
    published.reported({"app.cern.ch": ["188.184.0.1"]}, now=1.0)
    published.reported({"app.cern.ch": ["188.184.0.1"]}, now=2.0)
    assert len(woken) == 1
    published.reported({"app.cern.ch": ["188.184.0.1", "188.184.0.2"]}, now=3.0)
    assert len(woken) == 2


def test_a_name_written_and_not_reported_yet_is_not_forgotten_meanwhile() -> None:
    """Between ApplyChanges and the next Records the name's carriers are not known: the watch keeps what it
    judged (the demo's walk read the name's disappearance from the gauges as ``gone``)."""
    published = PublicationLog()
    published.reported({"app.cern.ch": ["188.184.0.1"]}, now=1.0)
    watch = DnsWatch(published, Resolver(awaited="other.cern.ch"), dns_watch_options(), clock=lambda: 1.0)
    watch.step()
    assert watch.judgements()["app.cern.ch"].state is State.PUBLISHED

    published.written(["app.cern.ch"], now=2.0)  # taken off the nodes; Records has not reported it yet
    watch.step()

    assert watch.judgements()["app.cern.ch"].state is State.PUBLISHED
