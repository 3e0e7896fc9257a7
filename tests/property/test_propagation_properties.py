"""Properties of DNS PROPAGATION (landb/propagation.py): one check of one name, judged; the cases of its
docstring, row by row."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.landb import propagation
from landb_webhook.landb.propagation import (
    CONFLICT_AFTER_SYNC_PERIODS,
    Addresses,
    Alias,
    Answer,
    Judgement,
    NoAnswer,
    NoName,
    Published,
    State,
    describe,
    judge,
    transition,
)
from support.rule_tables import table_rows

PERIOD = 900.0
START = 1_800_000_000.0
LIMIT = CONFLICT_AFTER_SYNC_PERIODS * PERIOD

ips = st.frozensets(st.sampled_from([f"10.0.0.{i}" for i in range(1, 9)]), max_size=5)
times = st.floats(min_value=0, max_value=4 * LIMIT, allow_nan=False)


@st.composite
def publications(draw: st.DrawFn) -> Published:
    carried = draw(ips)
    former = draw(ips) - carried
    written = draw(st.none() | times.map(lambda t: START + t))
    return Published(carried, former, written)


answers: st.SearchStrategy[Answer] = st.one_of(
    ips.filter(bool).map(Addresses),
    st.just(Alias("elsewhere.cern.ch.")),
    st.just(NoName()),
    st.just(NoAnswer("timed out")),
)


@st.composite
def histories(draw: st.DrawFn) -> tuple[Published, list[tuple[float, Answer]]]:
    """A publication and answers at increasing times from the write (or from START)."""
    published = draw(publications())
    at = published.written_at or START
    checks = []
    for gap in draw(st.lists(st.floats(min_value=0, max_value=LIMIT / 3, allow_nan=False), max_size=12)):
        at += gap
        checks.append((at, draw(answers)))
    return published, checks


gaps = st.floats(min_value=0, max_value=LIMIT, allow_nan=False)
strangers: st.SearchStrategy[Answer] = st.sampled_from(
    [
        Addresses(frozenset({"192.0.2.9"})),
        Addresses(frozenset({"10.0.0.1", "192.0.2.9"})),
        Alias("x.cern.ch."),
    ]
)
"""Answers no publication drawn here ever holds: something this cluster never published."""


@st.composite
def rewritten_histories(draw: st.DrawFn) -> list[tuple[float, Published, Answer]]:
    """Checks at increasing times, with what we publish at each: between some of them a write changed the
    carriers (a node joined or left), their former ones becoming ``former``, timed at the check."""
    published = draw(publications())
    at = published.written_at or START
    checks = []
    for gap, rewrite in draw(st.lists(st.tuples(gaps, st.booleans()), max_size=12)):
        at += gap
        if rewrite:
            published = rewritten(published, draw(ips), at)
        checks.append((at, published, draw(answers | strangers)))
    return checks


def rewritten(published: Published, carried: frozenset[str], at: float) -> Published:
    return Published(carried, (published.former | published.ips) - carried, at)


def foreign(published: Published, answer: Answer) -> bool:
    return isinstance(answer, Alias) or (
        isinstance(answer, Addresses) and not answer.ips <= published.ips | published.former
    )


def replay_rewritten(checks: list[tuple[float, Published, Answer]]) -> list[Judgement]:
    judged: list[Judgement] = []
    for at, published, answer in checks:
        judged.append(judge(published, answer, judged[-1] if judged else None, at, sync_period=PERIOD))
    return judged


def replay(published: Published, checks: list[tuple[float, Answer]]) -> list[Judgement]:
    return replay_rewritten([(at, published, answer) for at, answer in checks])


@given(publications().filter(lambda p: bool(p.ips)), times, answers)
def test_answering_exactly_the_carriers_ips_is_published_whatever_came_before(
    published: Published, offset: float, before: Answer
) -> None:
    previous = judge(published, before, None, START, sync_period=PERIOD)

    judged = judge(published, Addresses(published.ips), previous, START + offset, sync_period=PERIOD)

    assert judged.state is State.PUBLISHED


@given(histories())
def test_a_resolver_failure_changes_nothing_about_the_name(
    history: tuple[Published, list[tuple[float, Answer]]],
) -> None:
    """Never blamed on the name: the judgement after a failure then an answer is the one without it."""
    published, checks = history
    judged = replay(published, checks)
    for (at, answer), previous, current in zip(checks, [None, *judged], judged, strict=False):
        if isinstance(answer, NoAnswer):
            assert current.state is State.UNKNOWN
            assert transition("app.cern.ch", published, previous, current, at) is None
            if previous is not None:
                assert (current.known, current.since, current.mismatch_since) == (
                    previous.known,
                    previous.since,
                    previous.mismatch_since,
                )
    real = [(at, answer) for at, answer in checks if not isinstance(answer, NoAnswer)]
    without_failures = replay(published, real)
    if without_failures:
        last = judged[-1] if not isinstance(checks[-1][1], NoAnswer) else None
        if last is not None:
            assert (last.known, last.since, last.mismatch_since) == (
                without_failures[-1].known,
                without_failures[-1].since,
                without_failures[-1].mismatch_since,
            )


@given(histories())
def test_a_conflict_is_a_foreign_answer_that_lasted_two_sync_periods_past_the_write(
    history: tuple[Published, list[tuple[float, Answer]]],
) -> None:
    published, checks = history
    judged = replay(published, checks)
    for (at, _), current in zip(checks, judged, strict=True):
        if current.known is not State.CONFLICT:
            continue
        assert current.mismatch_since is not None
        assert at - current.mismatch_since > LIMIT
        if published.written_at is not None:
            assert at - published.written_at > LIMIT


@given(histories())
def test_a_foreign_answer_kept_past_two_sync_periods_after_the_write_is_a_conflict(
    history: tuple[Published, list[tuple[float, Answer]]],
) -> None:
    published, checks = history
    written = published.written_at if published.written_at is not None else START
    foreign = Alias("other.cern.ch.")
    late = [*checks, (max([written, *(at for at, _ in checks)]) + LIMIT + 1, foreign)]
    later = [*late, (late[-1][0] + LIMIT + 1, foreign)]

    assert replay(published, later)[-1].state is State.CONFLICT


@given(rewritten_histories())
def test_through_rewrites_a_conflict_stands_while_the_answer_is_foreign_and_only_then(
    checks: list[tuple[float, Published, Answer]],
) -> None:
    """Whatever we write meanwhile: a name in conflict stays so while DNS answers something neither our
    carriers nor our former ones; an answer of ours ends it; a conflict begins only once the foreign
    answer has lasted two sync periods past both its start and the write then current."""
    judged = replay_rewritten(checks)
    for (at, published, answer), previous, current in zip(checks, [None, *judged], judged, strict=False):
        if isinstance(answer, NoAnswer):
            continue
        if not foreign(published, answer):
            assert current.known is not State.CONFLICT
        elif previous is not None and previous.known is State.CONFLICT:
            assert current.known is State.CONFLICT
        elif current.known is State.CONFLICT:
            assert current.mismatch_since is not None and at - current.mismatch_since > LIMIT
            assert published.written_at is None or at - published.written_at > LIMIT


@given(
    rewritten_histories(),
    strangers,
    st.lists(st.tuples(gaps, ips), min_size=1, max_size=6),
    st.lists(st.floats(min_value=0, max_value=LIMIT / 3, allow_nan=False), max_size=4),
)
def test_nodes_joining_or_leaving_never_take_a_name_out_of_conflict_while_dns_answers_the_same_stranger(
    history: list[tuple[float, Published, Answer]],
    stranger: Answer,
    rewrites: list[tuple[float, frozenset[str]]],
    checks_after: list[float],
) -> None:
    """The scenario of issue 24: in conflict, then each write (a node joins or leaves) followed by checks
    at any time after it, DNS answering the same stranger throughout: a conflict at every check, never a
    transition; DNS then answering the carriers clears it."""
    start = Published(frozenset({"10.0.0.1"}), frozenset(), START)
    published = history[-1][1] if history else start
    at = max([START, *(when for when, _, _ in history)])
    at = max(at, published.written_at or at) + LIMIT + 1
    checks = [*history, (at, published, stranger), (at + LIMIT + 1, published, stranger)]
    judged = replay_rewritten(checks)
    assert judged[-1].known is State.CONFLICT
    at += LIMIT + 1
    for gap, carried in rewrites:
        at += gap
        published = rewritten(published, carried, at)
        for after in (0.0, *checks_after):
            at += after
            current = judge(published, stranger, judged[-1], at, sync_period=PERIOD)
            assert current.known is State.CONFLICT
            assert transition("app.cern.ch", published, judged[-1], current, at) is None
            judged.append(current)

    ours: Answer = Addresses(published.ips) if published.ips else NoName()
    cleared = judge(published, ours, judged[-1], at + 1, sync_period=PERIOD)
    assert cleared.known is (State.PUBLISHED if published.ips else State.GONE)


@given(histories())
def test_what_we_published_never_makes_a_conflict(
    history: tuple[Published, list[tuple[float, Answer]]],
) -> None:
    """Answers made only of carriers' and former carriers' IPs, or no name at all."""
    published, checks = history
    ours = [
        (at, answer)
        for at, answer in checks
        if not isinstance(answer, Alias)
        and not (isinstance(answer, Addresses) and not answer.ips <= published.ips | published.former)
    ]

    assert all(j.state is not State.CONFLICT for j in replay(published, ours))


@given(histories())
def test_a_pending_begun_by_the_write_is_as_old_as_the_write(
    history: tuple[Published, list[tuple[float, Answer]]],
) -> None:
    published, checks = history
    for (at, _), current in zip(checks, replay(published, checks), strict=True):
        assert current.since <= at
        if current.known is State.PENDING and published.written_at is not None:
            assert current.since >= published.written_at


@given(publications(), times)
def test_no_such_name_is_gone_for_a_removed_name_and_pending_for_a_carried_one(
    published: Published, offset: float
) -> None:
    judged = judge(published, NoName(), None, START + offset, sync_period=PERIOD)

    assert judged.state is (State.PENDING if published.ips else State.GONE)


@given(histories())
def test_a_transition_is_said_exactly_when_the_known_state_changes(
    history: tuple[Published, list[tuple[float, Answer]]],
) -> None:
    published, checks = history
    judged = replay(published, checks)
    said = []
    for (at, _), previous, current in zip(checks, [None, *judged], judged, strict=False):
        change = transition("app.cern.ch", published, previous, current, at)
        if change is not None:
            assert change.before != change.after.known
            assert describe(change).startswith("app.cern.ch ")
            said.append(change.after.known)
    known = [j.known for j in judged if j.known is not None]
    changes = [b for a, b in zip([None, *known], known, strict=False) if a != b]
    assert said == changes


def test_the_former_carriers_answered_beside_the_new_ones_are_stale_and_alone_pending() -> None:
    published = Published(frozenset({"10.0.0.2"}), frozenset({"10.0.0.1"}), START)

    beside = judge(
        published, Addresses(frozenset({"10.0.0.1", "10.0.0.2"})), None, START + 60, sync_period=PERIOD
    )
    alone = judge(published, Addresses(frozenset({"10.0.0.1"})), None, START + 60, sync_period=PERIOD)

    assert (beside.state, alone.state, alone.since) == (State.STALE, State.PENDING, START)


def test_a_published_name_that_starts_answering_something_else_counts_from_then() -> None:
    """Written long ago: the two sync periods run from when the foreign answer began, not the write."""
    published = Published(frozenset({"10.0.0.2"}), frozenset(), START)
    fine = judge(published, Addresses(frozenset({"10.0.0.2"})), None, START + 10 * LIMIT, sync_period=PERIOD)
    turned = START + 11 * LIMIT

    first = judge(published, Alias("x.cern.ch."), fine, turned, sync_period=PERIOD)
    still = judge(published, Alias("x.cern.ch."), first, turned + LIMIT, sync_period=PERIOD)
    past = judge(published, Alias("x.cern.ch."), still, turned + LIMIT + 1, sync_period=PERIOD)

    assert [j.state for j in (fine, first, still, past)] == [
        State.PUBLISHED,
        State.PENDING,
        State.PENDING,
        State.CONFLICT,
    ]
    assert (first.since, past.since) == (turned, turned + LIMIT + 1)


def test_the_published_line_says_how_many_nodes_and_how_long_after_the_write() -> None:
    published = Published(frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"}), frozenset(), START)
    pending = judge(published, NoName(), None, START + 60, sync_period=PERIOD)
    done = judge(published, Addresses(published.ips), pending, START + 660, sync_period=PERIOD)

    change = transition("myapp.cern.ch", published, pending, done, START + 660)

    assert change is not None
    assert describe(change) == "myapp.cern.ch resolves to its 3 ingress nodes, 11 min after the write"


# -- the cases of the rule's docstring: one entry per row of its table, what DNS answers as its id --------
# Each case: what we publish (carriers 10.0.0.1-2, former carrier 10.0.0.3), then checks at seconds after
# the write; the states the checks give, and the state the name is known by at the end.

A, B, FORMER, FOREIGN = "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.9"
CARRIED = Published(frozenset({A, B}), frozenset({FORMER}), START)
REMOVED = Published(frozenset(), frozenset({FORMER}), START)
NODE_LEFT = Published(frozenset({A}), frozenset({B, FORMER}), START + LIMIT + 120)  # rewritten since
TAKING_OVER = Published(frozenset({A, B}), frozenset({FORMER}), START, taking_over=True)

# fmt: off
ROWS = [  # published, [(seconds after the write, answer[, published since])] -> states, known at the end
    pytest.param(CARRIED, [(60, Addresses(frozenset({A, B})))], ["published"], "published",
                 id="exactly the carriers' IPs"),
    pytest.param(CARRIED, [(60, Addresses(frozenset({A, B, FORMER})))], ["stale"], "stale",
                 id="every carrier's IP, and IPs of former carriers"),
    pytest.param(REMOVED, [(60, Addresses(frozenset({FORMER})))], ["stale"], "stale",
                 id="former carriers' IPs only, for a removed name"),
    pytest.param(CARRIED, [(60, Addresses(frozenset({A})))], ["pending"], "pending",
                 id="some carrier's IP missing, nothing foreign"),
    pytest.param(CARRIED, [(60, NoName())], ["pending"], "pending",
                 id="NXDOMAIN / no A record, name still carried"),
    pytest.param(REMOVED, [(60, NoName())], ["gone"], "gone",
                 id="NXDOMAIN / no A record, name removed"),
    pytest.param(CARRIED, [(60, Addresses(frozenset({A, FOREIGN}))), (LIMIT + 60, Alias("x.cern.ch."))],
                 ["pending", "conflict"], "conflict",
                 id="an IP we never published, or a CNAME"),
    pytest.param(CARRIED, [(60, Alias("x.cern.ch.")), (LIMIT + 60, Alias("x.cern.ch.")),
                           (LIMIT + 180, Alias("x.cern.ch."), NODE_LEFT)],
                 ["pending", "conflict", "conflict"], "conflict",
                 id="the same, the name already in conflict"),
    pytest.param(CARRIED, [(60, Addresses(frozenset({A, B}))), (120, NoAnswer("timed out"))],
                 ["published", "unknown"], "published",
                 id="nothing: the resolver failed or timed out"),
    pytest.param(TAKING_OVER, [(60, Addresses(frozenset({A, B, FOREIGN}))),
                               (LIMIT + 60, Addresses(frozenset({A, B, FOREIGN}))),
                               (LIMIT + 120, Addresses(frozenset({A, B})))],
                 ["shared", "shared", "published"], "published",
                 id="taken over: every carrier's IP, and others'"),
    pytest.param(TAKING_OVER, [(60, Addresses(frozenset({FOREIGN}))), (LIMIT + 60, Alias("x.cern.ch.")),
                               (LIMIT + 120, Addresses(frozenset({A, FOREIGN})))],
                 ["pending", "pending", "pending"], "pending",
                 id="taken over: a carrier missing, others or CNAME"),
]
# fmt: on


def test_each_row_of_the_rules_docstring_is_a_case_below_in_its_order() -> None:
    rows = table_rows(propagation.__doc__, starts_row="DNS answers")
    assert [case.id for case in ROWS] == [row["DNS answers"] for row in rows]


@pytest.mark.parametrize(("published", "checks", "states", "known"), ROWS)
def test_the_cases_of_the_rules_docstring(
    published: Published,
    checks: list[tuple[float, Answer, *tuple[Published, ...]]],
    states: list[str],
    known: str,
) -> None:
    judged = replay_rewritten(
        [(START + seconds, (*since, published)[0], answer) for seconds, answer, *since in checks]
    )
    assert [judgement.state for judgement in judged] == states
    assert judged[-1].known == known


@given(histories(), st.booleans())
def test_a_name_taken_over_on_purpose_is_never_a_conflict_and_shared_only_while_every_carrier_answers(
    history: tuple[Published, list[tuple[float, Answer]]], carried: bool
) -> None:
    published, checks = history
    published = replace(published, taking_over=True)
    if carried and not published.ips:
        published = replace(published, ips=frozenset({"10.0.0.1"}))
    previous = None
    for at, answer in checks:
        previous = judge(published, answer, previous, at, sync_period=PERIOD)
        if published.ips:
            assert previous.state is not State.CONFLICT
        if previous.state is State.SHARED:
            assert isinstance(answer, Addresses)
            assert published.ips <= answer.ips
            assert not answer.ips <= published.ips | published.former


def test_the_shared_line_names_what_else_answers() -> None:
    published = Published(frozenset({A, B}), frozenset(), START, taking_over=True)
    pending = judge(published, Addresses(frozenset({FOREIGN})), None, START + 60, sync_period=PERIOD)
    shared = judge(published, Addresses(frozenset({A, B, FOREIGN})), pending, START + 960, sync_period=PERIOD)

    change = transition("indico.cern.ch", published, pending, shared, START + 960)

    assert change is not None
    assert describe(change) == (
        "indico.cern.ch resolves to its 2 ingress nodes and to 10.0.0.9 of another device: taking over, "
        "16 min after the write"
    )
