"""Properties of the DNS watcher's schedule (provider/watch/dns_watch.py): bounded, and no name waits forever.

The watcher's steps are driven at generated moments of a driven clock; the resolver answers at once with
each name's carriers (what DNS answers does not change who is asked when).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import example, given
from hypothesis import strategies as st

from landb_webhook.landb.propagation import Addresses, Answer
from landb_webhook.provider.watch.dns_watch import DnsWatch
from landb_webhook.provider.watch.publications import PublicationLog
from support.default_options import dns_watch_options

START = 1_800_000_000.0
IPS = frozenset({"10.0.0.1"})


class Resolver:
    where = "test"

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.asked: list[tuple[float, str]] = []

    def resolve(self, dns_name: str) -> Answer:
        self.asked.append((self.clock[0], dns_name))
        return Addresses(IPS)


@given(
    names=st.integers(min_value=0, max_value=40),
    rate=st.sampled_from([0.5, 1.0, 2.0, 5.0, 20.0]),
    recheck=st.sampled_from([10.0, 30.0, 120.0]),
    late=st.lists(st.floats(min_value=0.0, max_value=0.5, allow_nan=False), min_size=1, max_size=400),
)
@example(names=40, rate=0.5, recheck=10.0, late=[0.0] * 400)  # asked for far more than the budget allows
def test_questions_stay_within_the_budget_and_every_name_is_asked_again_within_its_period(
    names: int, rate: float, recheck: float, late: list[float]
) -> None:
    """Driven as its thread drives it: the next step when the last one said, woken up to ``late`` later."""
    clock = [START]
    published = PublicationLog()
    published.reported({f"n{i}.cern.ch": ["10.0.0.1"] for i in range(names)}, START)
    resolver = Resolver(clock)
    options = dns_watch_options(queries_per_second=rate, recheck_period=recheck)
    watch = DnsWatch(published, resolver, options, clock=lambda: clock[0])
    for extra in late:
        clock[0] += watch.step() + extra

    capacity = max(1.0, rate)
    for count, (at, _) in enumerate(resolver.asked, start=1):
        assert count <= capacity + rate * (at - START) + 1e-9
    # Once due, a name waits for the names ahead of it (each a token away, plus a late wake-up) at most.
    longest_wait = recheck + (names + 1) * (1 / rate + max(late)) + max(late) + 1e-6
    times = defaultdict(list)
    for at, name in resolver.asked:
        times[name].append(at)
    for asked in times.values():
        assert all(recheck <= b - a <= longest_wait for a, b in itertools.pairwise(asked))
    if names and clock[0] - START > longest_wait:
        assert len(times) == names
        assert all(clock[0] - asked[-1] <= longest_wait for asked in times.values())
