"""THE APPLY ORDERING (provider/apply/applier.py; the writes it orders are landb/plan.py's).

The plan: a make write only adds tokens and a break write only removes them, and an alias carried before
and wanted after keeps a carrier after every write, in any order of the make writes followed by any order
of the break writes (so the executor may run a phase's requests side by side).

The schedule (``write_in_order`` over the executor): every make request lands before any break request
starts; a server's POST before its DELETEs; never more than ``concurrency`` requests are in flight, the
pool stays full (a server's DELETEs run side by side), a failed make holds back its server's break and
every break removing an alias it was adding, and a failure is reported once per server while every
request is counted.

The store below holds each request until the pool is full or nothing else may start yet, so requests
overlap whenever the rules let them, and a schedule that leaves the pool idle while a request could
start never gets past the hold (the test fails at its bounded wait). No time is measured.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from landb_replay import apply_write, break_steps, make_steps, replay
from landb_strategies import Scenario, scenarios

from landb_webhook.backends import Node, Server, UpstreamError
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.landb.names import LoadToken
from landb_webhook.landb.plan import MetadataWrite, ServerPlan, ServerState, carriers
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.executor import PlanExecutor
from landb_webhook.provider.apply.fence import UNFENCED
from landb_webhook.provider.apply.writes import Outcome, write_in_order

HOLD_LIMIT = 10.0
"""Seconds a held request waits for the pool to fill before the test fails (never reached when the
schedule is right)."""

Request = tuple[str, str | None]
"""(server id, key): the POST when the key is None, else the DELETE of the key."""


@dataclass(frozen=True)
class Event:
    kind: str
    """``start`` or ``end``."""
    request: Request
    phase: int
    """0 make, 1 break: the phase the store was in when the request arrived."""


class HoldingStore:
    """A ServerStore double: records the start and end of every request, answers in the order the held
    requests are released, and fails the requests in ``failing``.

    ``phases`` lists, phase by phase, the writes the executor is expected to attempt: a request is held
    until ``concurrency`` requests are in flight or no other request of the current phase may start
    (a DELETE may start once its server's POST of that phase has landed).
    """

    def __init__(
        self,
        concurrency: int,
        phases: Sequence[Mapping[str, MetadataWrite]],
        failing: frozenset[Request] = frozenset(),
    ) -> None:
        self._concurrency = concurrency
        self._phases = phases
        self._failing = failing
        self._condition = threading.Condition()
        self._started: set[tuple[int, Request]] = set()
        self._ended: set[tuple[int, Request]] = set()
        self.events: list[Event] = []
        self.in_flight = 0
        self.max_in_flight = 0

    # -- backends.ServerStore ---------------------------------------------------------------------------

    def servers_for(self, nodes: Sequence[Node]) -> Mapping[str, Server]:
        return {}

    def set_metadata(self, server_id: str, items: Mapping[str, str]) -> None:
        self._request((server_id, None))

    def delete_metadata(self, server_id: str, key: str) -> None:
        self._request((server_id, key))

    def max_metadata_items(self) -> int:
        return 128

    def unavailable(self) -> str | None:
        return None

    # -- the hold --------------------------------------------------------------------------------------

    def _requests(self, phase: int) -> list[Request]:
        return [
            request
            for server_id, write in self._phases[phase].items()
            for request in ([(server_id, None)] if write.upserts else [])
            + [(server_id, key) for key in write.deletes]
        ]

    def _phase(self) -> int:
        """The phase the executor is in: the first with an expected request still unanswered."""
        for phase in range(len(self._phases)):
            if any((phase, r) not in self._ended for r in self._requests(phase)):
                return phase
        return len(self._phases)

    def _may_start(self, phase: int, request: Request) -> bool:
        server_id, key = request
        if key is None or not self._phases[phase][server_id].upserts:
            return True
        post = (phase, (server_id, None))
        return post in self._ended and (server_id, None) not in self._failing

    def _nothing_else_may_start(self) -> bool:
        phase = self._phase()
        if phase == len(self._phases):
            return True
        return not any(
            (phase, r) not in self._started and self._may_start(phase, r) for r in self._requests(phase)
        )

    def _request(self, request: Request) -> None:
        with self._condition:
            phase = self._phase()
            assert phase < len(self._phases), f"unexpected request {request}"
            assert request in self._requests(phase), f"{request} sent during phase {phase}"
            assert (phase, request) not in self._started, f"{request} sent twice"
            self._started.add((phase, request))
            self.events.append(Event("start", request, phase))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._condition.notify_all()
            held = self._condition.wait_for(
                lambda: self.in_flight >= self._concurrency or self._nothing_else_may_start(),
                timeout=HOLD_LIMIT,
            )
            assert held, f"{request}: the pool stayed short of {self._concurrency} while requests could start"
            self.in_flight -= 1
            self._ended.add((phase, request))
            self.events.append(Event("end", request, phase))
            self._condition.notify_all()
        if request in self._failing:
            raise UpstreamError("nova", f"injected failure of {request}")


def server(name: str) -> ServerState:
    return ServerState(f"id-{name}", f"vm-{name}", f"node-{name}", {})


def plan_for(
    name: str, *, post: bool = False, deletes: int = 0, make: bool = False, removed: tuple[str, ...] = ()
) -> ServerPlan:
    """A server's plan: a make POST if ``make``; a break of a POST (``post``) and ``deletes`` DELETEs."""
    break_write = MetadataWrite(
        {"landb-alias": f"kept-{name}--load-0-"} if post else {},
        tuple(f"landb-alias{k}" for k in range(2, 2 + deletes)),
    )
    return ServerPlan(
        server(name),
        added=(LoadToken(f"new-{name}", 0),) if make else (),
        removed=tuple(LoadToken(label, 0) for label in removed),
        make_write=MetadataWrite({"landb-alias9": f"new-{name}--load-0-"}) if make else MetadataWrite(),
        break_write=break_write,
    )


def phases_of(plans: Sequence[ServerPlan]) -> list[dict[str, MetadataWrite]]:
    return [
        {p.server.server_id: p.make_write for p in plans if p.make_write},
        {p.server.server_id: p.break_write for p in plans if p.break_write},
    ]


def run(plans: Sequence[ServerPlan], store: HoldingStore, concurrency: int) -> tuple[Outcome, Metrics]:
    metrics = Metrics.create(process_metrics=False)
    executor = PlanExecutor(store, concurrency=concurrency, dry_run=False, metrics=metrics)
    return write_in_order(executor, plans, UNFENCED), metrics


def most_at_once(events: Sequence[Event], requests: set[Request]) -> int:
    """The most of ``requests`` in flight at one moment."""
    now = most = 0
    for event in events:
        if event.request in requests:
            now += 1 if event.kind == "start" else -1
            most = max(most, now)
    return most


def assert_ordering_rules(events: Sequence[Event]) -> None:
    """Every make request ended before any break request started; a server's break DELETEs started
    after its break POST ended."""
    makes_end = [i for i, e in enumerate(events) if e.phase == 0 and e.kind == "end"]
    breaks_start = [i for i, e in enumerate(events) if e.phase == 1 and e.kind == "start"]
    assert max(makes_end, default=-1) < min(breaks_start, default=len(events))
    post_ended = {e.request[0]: i for i, e in enumerate(events) if e.phase == 1 and e.request[1] is None}
    for i, event in enumerate(events):
        server_id, key = event.request
        if event.phase == 1 and key is not None and server_id in post_ended:
            assert i > post_ended[server_id], f"{server_id}: DELETE {key} before its POST landed"


def test_requests_fill_the_pool_within_the_ordering_rules() -> None:
    plans = [
        *(plan_for(f"m{i}", make=True) for i in range(6)),
        plan_for("wide", post=True, deletes=7, removed=("gone",)),
        plan_for("deletes-only", deletes=3, removed=("old",)),
        plan_for("post-only", post=True, removed=("moved",)),
        plan_for("both", make=True, post=True, deletes=2, removed=("was",)),
    ]
    store = HoldingStore(4, phases_of(plans))

    outcome, metrics = run(plans, store, 4)

    assert outcome.failures == () and outcome.held_back == ()
    assert store.max_in_flight == 4
    assert_ordering_rules(store.events)
    sent = sum(1 for e in store.events if e.kind == "start")
    assert sent == 7 + 1 + 7 + 3 + 1 + 1 + 2
    assert (
        metrics.registry.get_sample_value(
            "landb_webhook_metadata_writes_total", {"operation": "delete", "result": "ok"}
        )
        == 7 + 3 + 2
    )


def test_the_deletes_of_one_server_run_side_by_side() -> None:
    plans = [plan_for("wide", post=True, deletes=7, removed=("gone",))]
    store = HoldingStore(4, phases_of(plans))

    outcome, _ = run(plans, store, 4)

    assert outcome.failures == ()
    assert_ordering_rules(store.events)
    assert most_at_once(store.events, {("id-wide", f"landb-alias{k}") for k in range(2, 9)}) == 4


@settings(max_examples=25, deadline=None)
@given(
    concurrency=st.integers(1, 5),
    shapes=st.lists(
        st.tuples(st.booleans(), st.booleans(), st.integers(0, 6)).filter(lambda s: s[0] or s[1] or s[2]),
        min_size=1,
        max_size=8,
    ),
)
def test_any_plan_keeps_the_rules_and_the_limit(
    concurrency: int, shapes: list[tuple[bool, bool, int]]
) -> None:
    plans = [
        plan_for(f"s{i}", make=make, post=post, deletes=deletes)
        for i, (make, post, deletes) in enumerate(shapes)
    ]
    store = HoldingStore(concurrency, phases_of(plans))

    outcome, _ = run(plans, store, concurrency)

    assert outcome.failures == ()
    assert store.max_in_flight <= concurrency
    assert_ordering_rules(store.events)
    expected = sum(
        int(p.make_write.upserts != {}) + int(p.break_write.upserts != {}) + len(p.break_write.deletes)
        for p in plans
    )
    assert sum(1 for e in store.events if e.kind == "start") == expected


def test_a_failing_delete_among_parallel_ones_reports_the_server_once_and_counts_every_request() -> None:
    plans = [
        plan_for("broken", post=True, deletes=4, removed=("a", "b")),
        plan_for("fine", deletes=2, removed=("c",)),
    ]
    failing = frozenset({("id-broken", "landb-alias3"), ("id-broken", "landb-alias5")})
    store = HoldingStore(4, phases_of(plans), failing)

    outcome, metrics = run(plans, store, 4)

    assert [f.plan.server.server_id for f in outcome.failures] == ["id-broken"]
    reason = outcome.failures[0].reason
    assert reason.startswith("node-broken: ") and reason.count("node-broken") == 1
    assert reason.endswith("(and 1 more failed request)")
    assert outcome.failed_labels() == {"a", "b"}

    def writes(operation: str, result: str) -> float | None:
        return metrics.registry.get_sample_value(
            "landb_webhook_metadata_writes_total", {"operation": operation, "result": result}
        )

    assert writes("post", "ok") == 1
    assert writes("delete", "ok") == 2 + 2
    assert writes("delete", "error") == 2
    assert metrics.registry.get_sample_value("landb_webhook_upstream_errors_total", {"upstream": "nova"}) == 2


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_failed_post_sends_none_of_its_deletes_and_a_failed_make_holds_back_its_break(
    concurrency: int,
) -> None:
    plans = [
        plan_for("post-fails", post=True, deletes=3, removed=("x",)),
        plan_for("make-fails", make=True, deletes=2, removed=("y",)),
        plan_for("fine", make=True, deletes=1, removed=("z",)),
    ]
    failing = frozenset({("id-post-fails", None), ("id-make-fails", None)})
    phases = phases_of(plans)
    del phases[1]["id-make-fails"]  # held back: its make did not land
    store = HoldingStore(concurrency, phases, failing)

    outcome, _ = run(plans, store, concurrency)

    assert sorted(f.plan.server.server_id for f in outcome.failures) == ["id-make-fails", "id-post-fails"]
    assert [p.server.server_id for p in outcome.held_back] == ["id-make-fails"]
    sent = {e.request for e in store.events if e.kind == "start"}
    assert not any(sid == "id-post-fails" and key is not None for sid, key in sent)
    assert not any(sid == "id-make-fails" and key is not None for sid, key in sent)
    assert ("id-fine", "landb-alias2") in sent


def test_a_failed_make_holds_back_every_break_removing_an_alias_it_was_adding() -> None:
    plans = [
        plan_for("adds", make=True),
        plan_for("drops", deletes=1, removed=("new-adds",)),  # the old carrier of what "adds" adds
        plan_for("other", deletes=1, removed=("z",)),
    ]
    phases = phases_of(plans)
    del phases[1]["id-drops"]  # held back: the new carrier was not written
    store = HoldingStore(2, phases, frozenset({("id-adds", None)}))

    outcome, _ = run(plans, store, 2)

    assert [p.server.server_id for p in outcome.held_back] == ["id-drops"]
    sent = {e.request for e in store.events if e.kind == "start"}
    assert ("id-drops", "landb-alias2") not in sent
    assert ("id-other", "landb-alias2") in sent


# -- the plan: make before break -----------------------------------------------------------------------


def is_subsequence(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    remaining = iter(long)
    return all(any(item == other for other in remaining) for item in short)


def assert_make_before_break(scenario: Scenario, data: st.DataObject) -> None:
    plan = scenario.plan()
    before = carriers(scenario.servers)
    kept_alive = [
        label
        for label, wanted in scenario.wanted.items()
        if before.get(label) and wanted & scenario.visible_ids()
    ]
    makes = data.draw(st.permutations(make_steps(plan)), label="make order")
    breaks = data.draw(st.permutations(break_steps(plan)), label="break order")
    for step, fleet in enumerate(replay(scenario.servers, [*makes, *breaks])):
        found = carriers(fleet)
        for label in kept_alive:
            assert found.get(label), f"{label} has no carrier after write {step + 1}"


@given(scenarios(), st.data())
def test_an_alias_carried_before_and_wanted_after_always_has_a_carrier_in_any_write_order(
    scenario: Scenario, data: st.DataObject
) -> None:
    assert_make_before_break(scenario, data)


@given(scenarios(quota="tight"), st.data())
def test_make_before_break_holds_when_the_quota_refuses_new_carriers(
    scenario: Scenario, data: st.DataObject
) -> None:
    assert_make_before_break(scenario, data)


@given(scenarios(quota="any"))
def test_make_writes_only_add_tokens_and_break_writes_only_remove(scenario: Scenario) -> None:
    plan = scenario.plan()
    for server_plan in plan.servers:
        start = server_plan.server
        made = apply_write(start.metadata, server_plan.make_write)
        broken = apply_write(made, server_plan.break_write)
        assert server_plan.make_write.deletes == ()
        slots0, slots1, slots2 = (read_aliases(md).slots for md in (start.metadata, made, broken))
        for number, tokens in slots0.items():
            assert slots1[number][: len(tokens)] == tokens, "make appends, never rewrites"
        assert set(server_plan.break_write.upserts) <= set(made)
        assert set(slots2) <= set(slots1)
        for number, tokens in slots2.items():
            assert is_subsequence(tokens, slots1[number]), "break removes, never adds or reorders"
        tokens0, tokens1, tokens2 = (
            Counter(read_aliases(md).load_tokens()) for md in (start.metadata, made, broken)
        )
        assert tokens1 - tokens0 == Counter(server_plan.added)
        assert not tokens0 - tokens1
        assert not tokens2 - tokens1
        assert set(tokens1 - tokens2) == set(server_plan.removed)


def test_leave_writes_come_first_and_one_that_fails_stops_its_server_and_what_relied_on_its_additions() -> (
    None
):
    """The leave writes (aliases leaving DNS) land before any make write starts; a server whose leave write
    failed gets neither its make nor its break write (both were packed on what it would have left), and a
    removal elsewhere of an alias it was adding is held back."""
    leave = MetadataWrite({"landb-alias": "kept--load-0-"})
    make = MetadataWrite({"landb-alias9": "new--load-0-"})
    stuck = ServerPlan(
        server("stuck"),
        added=(LoadToken("new", 0),),
        removed=(LoadToken("old", 0),),
        make_write=make,
        break_write=MetadataWrite({}, ("landb-alias3",)),
        leave_write=leave,
    )
    drops = plan_for("drops", deletes=1, removed=("new",))  # the old carrier of what "stuck" adds
    fine = ServerPlan(
        server("fine"),
        added=(LoadToken("web", 0),),
        removed=(LoadToken("gone", 0),),
        make_write=MetadataWrite({"landb-alias2": "web--load-0-"}),
        break_write=MetadataWrite(),
        leave_write=MetadataWrite({}, ("landb-alias2",)),
    )
    plans = [stuck, drops, fine]
    phases = [
        {"id-stuck": leave, "id-fine": fine.leave_write},
        {"id-fine": fine.make_write},
        {},  # drops is held back, stuck gets no break write
    ]
    store = HoldingStore(2, phases, frozenset({("id-stuck", None)}))

    outcome, _ = run(plans, store, 2)

    assert [f.plan.server.server_id for f in outcome.failures] == ["id-stuck"]
    assert [f.phase for f in outcome.failures] == ["leave"]
    assert [p.server.server_id for p in outcome.held_back] == ["id-drops"]
    leaves_end = max(i for i, e in enumerate(store.events) if e.phase == 0 and e.kind == "end")
    makes_start = min(i for i, e in enumerate(store.events) if e.phase == 1 and e.kind == "start")
    assert leaves_end < makes_start
    sent = {e.request for e in store.events if e.kind == "start"}
    assert sent == {("id-stuck", None), ("id-fine", "landb-alias2"), ("id-fine", None)}
    assert outcome.failed_labels() >= {"new", "old"}
