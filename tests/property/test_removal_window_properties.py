"""Properties of THE REMOVAL WINDOW (provider/apply/removals.py): what the removal guard adds up over time."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from landb_replay import apply_plan
from landb_strategies import LABEL_POOL, fleets

from landb_webhook.landb.plan import ServerState, carriers, frozen_carriers, plan_changes
from landb_webhook.provider import RemovalGuard
from landb_webhook.provider.apply.removals import RemovalWindow, guard_removals

HOUR = 3600.0
START = 1_800_000_000.0
OLD = [f"app{i}" for i in range(30)]
"""Names published since before the window opened."""

gaps = st.floats(min_value=0, max_value=HOUR / 10, allow_nan=False)


def removal_guard(*, max_share: float, min_count: int) -> RemovalGuard:
    """The removal guard with these thresholds over an hour, mass removal not allowed."""
    return RemovalGuard(max_share=max_share, min_count=min_count, allow=False, window_seconds=HOUR)


@st.composite
def slices(draw: st.DrawFn) -> list[frozenset[str]]:
    """Disjoint groups of the old names, each withdrawn by one apply."""
    names = draw(st.permutations(OLD))
    cuts = sorted(draw(st.lists(st.integers(0, len(OLD)), max_size=8)))
    bounds = [0, *cuts, draw(st.integers(cuts[-1] if cuts else 0, len(OLD)))]
    return [frozenset(names[a:b]) for a, b in itertools.pairwise(bounds)]


def replay(steps: list[tuple[float, frozenset[str], frozenset[str]]]) -> tuple[RemovalWindow, int]:
    """Applies (at, withdrawn, created) from a cluster publishing every OLD name; the window after them
    and the number published then."""
    window, published = RemovalWindow(HOUR), len(OLD)
    for at, withdrawn, created in steps:
        window = window.after(at, published, withdrawn, created)
        published += len(created) - len(withdrawn)
    return window, published


@given(slices(), st.lists(gaps, min_size=9, max_size=9))
def test_slicing_a_removal_within_the_window_counts_as_one_removal(
    parts: list[frozenset[str]], pauses: list[float]
) -> None:
    times = [START + sum(pauses[: i + 1]) for i in range(len(parts))]
    *earlier, last = parts or [frozenset()]
    window, published = replay([(at, part, frozenset()) for at, part in zip(times, earlier, strict=False)])
    count = window.count(times[len(earlier)], published, last)
    assert count.withdrawn == frozenset().union(*parts)
    assert count.published_at_start == len(OLD)
    everything_at_once = RemovalWindow(HOUR).count(START, len(OLD), frozenset().union(*parts))
    assert count.withdrawn == everything_at_once.withdrawn
    assert count.published_at_start == everything_at_once.published_at_start


@given(
    st.sets(st.sampled_from(OLD)),
    st.integers(1, 50),
    gaps,
    gaps,
)
def test_names_created_within_the_window_never_raise_the_base(
    withdrawing: set[str], junk: int, before: float, after: float
) -> None:
    created = frozenset(f"junk{i}" for i in range(junk))
    window, published = replay([(START + before, frozenset(), created)])
    count = window.count(START + before + after, published, withdrawing)
    assert count.published_at_start == len(OLD)
    assert count.withdrawn == withdrawing
    # Withdrawing the junk again is no removal of what was published at the window's start.
    assert window.count(START + before + after, published, created).withdrawn == frozenset()


@given(slices(), st.floats(min_value=0, max_value=10 * HOUR, allow_nan=False))
def test_an_apply_counts_for_exactly_one_window(parts: list[frozenset[str]], wait: float) -> None:
    window, published = replay([(START, part, frozenset()) for part in parts])
    count = window.count(START + wait, published, ())
    if wait <= HOUR:
        assert count.withdrawn == frozenset().union(*parts)
        assert count.published_at_start == len(OLD)
    else:
        assert count.withdrawn == frozenset()
        assert count.published_at_start == published


@given(slices(), st.floats(min_value=1, max_value=10 * HOUR, allow_nan=False))
def test_a_wall_clock_stepped_back_forgets_nothing(parts: list[frozenset[str]], back: float) -> None:
    window, published = replay([(START, part, frozenset()) for part in parts])
    assert window.count(START - back, published, ()).withdrawn == frozenset().union(*parts)


@given(slices(), st.sets(st.text(min_size=1, max_size=8)))
def test_the_window_survives_its_json_form(parts: list[frozenset[str]], created: set[str]) -> None:
    window, _ = replay([(START + i, part, frozenset(created)) for i, part in enumerate(parts)])
    assert RemovalWindow.from_json(window.to_json(), HOUR) == window


@pytest.mark.parametrize("text", ["{}", "[[1, 2]]", '[[1, 2, "x", []]]', "[[1, 2, [3], []]]", "nope"])
def test_a_window_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a removal window"):
        RemovalWindow.from_json(text, HOUR)


def test_the_applies_of_four_the_issue_names_trip_the_guard_on_the_second() -> None:
    """Ten published, removed four at a time: the second apply makes eight of ten."""
    guard = removal_guard(max_share=0.5, min_count=5)
    names = OLD[:10]
    window = RemovalWindow(HOUR).after(START, 10, names[:4])
    count = window.count(START + 60, 6, names[4:8])
    assert not guard.trips(4, 6)  # one apply at a time, it went through
    assert guard.trips(len(count.withdrawn), count.published_at_start)


# -- random histories: re-publishing, junk, restarts, the window sliding ------------------------------

JUNK = [f"junk{i}" for i in range(6)]
SMALL = OLD[:12]


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[float, frozenset[str], frozenset[str], bool]]:
    """Applies (gap since the one before, withdrawn, created, restart after it) over a cluster that
    publishes every SMALL name at first: names withdrawn, published again, junk created and taken back."""
    published = set(SMALL)
    steps = []
    for _ in range(draw(st.integers(1, 10))):
        gap = draw(st.floats(min_value=0, max_value=HOUR / 2, allow_nan=False))
        withdrawn = draw(st.sets(st.sampled_from(sorted(published)))) if published else set()
        off_air = sorted({*SMALL, *JUNK} - published)
        created = draw(st.sets(st.sampled_from(off_air))) if off_air else set()
        published = (published - withdrawn) | created
        steps.append((gap, frozenset(withdrawn), frozenset(created), draw(st.booleans())))
    return steps


@given(histories(), st.floats(min_value=0, max_value=HOUR, allow_nan=False), st.data())
def test_the_window_counts_exactly_the_names_on_the_air_at_its_start_withdrawn_within_it(
    steps: list[tuple[float, frozenset[str], frozenset[str], bool]], wait: float, data: st.DataObject
) -> None:
    """Against a replay of the history: the base is what was published just before the oldest apply
    inside the window, and a name counts when it was on the air then and any apply inside the window
    (this one included) withdrew it, however often it was published again in between. Restarts (the
    window read back from its JSON form) change nothing."""
    window, published, at = RemovalWindow(HOUR), set(SMALL), START
    states: list[tuple[float, frozenset[str], frozenset[str]]] = []  # (at, published before, withdrawn)
    for gap, withdrawn, created, restart in steps:
        at += gap
        window = window.after(at, len(published), withdrawn, created)
        states.append((at, frozenset(published), withdrawn))
        published = (published - withdrawn) | created
        if restart:
            window = RemovalWindow.from_json(window.to_json(), HOUR)
    now = at + wait
    withdrawing = data.draw(st.sets(st.sampled_from(sorted(published))) if published else st.just(set()))

    inside = [state for state in states if state[0] >= now - HOUR]
    on_air_at_start = inside[0][1] if inside else frozenset(published)
    withdrawn_within = frozenset().union(*(state[2] for state in inside)) | withdrawing
    count = window.count(now, len(published), withdrawing)
    assert count.published_at_start == len(on_air_at_start)
    assert count.withdrawn == withdrawn_within & on_air_at_start


def test_withdrawing_publishing_again_and_withdrawing_others_is_no_way_around_the_window() -> None:
    """The issue's history, defaults (half, at least five): ten names, four withdrawn, the same four
    published again, four others withdrawn: eight of the ten on the air at the window's start."""
    guard = removal_guard(max_share=0.5, min_count=5)
    names, first, others = OLD[:10], frozenset(OLD[:4]), frozenset(OLD[4:8])
    window = RemovalWindow(HOUR).after(START, len(names), first)
    window = window.after(START + 60, len(names) - 4, (), first)
    count = window.count(START + 120, len(names), others)
    assert count.withdrawn == first | others
    assert count.published_at_start == len(names)
    assert guard.trips(len(count.withdrawn), count.published_at_start)


# -- what counts as gone: the last carrier -------------------------------------------------------------


@given(fleets(), st.sets(st.sampled_from(LABEL_POOL)))
def test_the_guard_counts_exactly_the_withdrawn_names_left_with_no_carrier_once_the_plan_landed(
    fleet: list[ServerState], withdraw: set[str]
) -> None:
    """Against the plan itself, applied: a withdrawn name that a value we never edit (a frozen key, a
    per-interface form) keeps on the air has not gone, and one nobody carried was never there."""
    before = carriers(fleet)
    after = carriers(apply_plan(fleet, plan_changes(fleet, dict.fromkeys(withdraw, frozenset()))))
    gone = {label for label in withdraw if before.get(label) and not after.get(label)}

    never_trips = removal_guard(max_share=0.5, min_count=10**6)
    window = guard_removals(
        never_trips,
        RemovalWindow(HOUR),
        withdraw=withdraw,
        publish=set(),
        published=before,
        staying=frozen_carriers(fleet),
        now=START,
        dry_run=False,
    ).window
    assert (window.applies[-1].withdrawn if window.applies else frozenset()) == gone


# -- per namespace: one team's churn is judged on its own -------------------------------------------------

TEAMS = ("team-a", "team-b", "")


@st.composite
def teams(draw: st.DrawFn) -> tuple[dict[str, str], set[str], set[str]]:
    """Each OLD name in a namespace (``""``: none), the names withdrawn, the names created."""
    whose = {label: draw(st.sampled_from(TEAMS)) for label in OLD}
    withdraw = draw(st.sets(st.sampled_from(OLD)))
    created = {f"new{i}" for i in range(draw(st.integers(0, 4)))}
    whose |= {label: draw(st.sampled_from(TEAMS)) for label in created}
    return whose, withdraw, created


def guarded(whose: dict[str, str], withdraw: set[str], created: set[str], window: RemovalWindow) -> Any:
    return guard_removals(
        removal_guard(max_share=0.5, min_count=3),
        window,
        withdraw=withdraw,
        publish=created,
        published={label: {"server"} for label in OLD},
        staying={},
        namespaces=whose,
        now=START,
        dry_run=False,
    )


@given(teams(), st.sampled_from(TEAMS))
def test_a_namespace_is_held_back_exactly_as_if_it_were_alone(
    drawn: tuple[dict[str, str], set[str], set[str]], team: str
) -> None:
    """What the guard holds back of one namespace does not depend on the other namespaces' names, their
    removals or their creations; and it holds back all of that namespace's removals or none."""
    whose, withdraw, created = drawn
    together = guarded(whose, withdraw, created, RemovalWindow(HOUR))
    own = {label for label in OLD if whose[label] == team}
    alone = guard_removals(
        removal_guard(max_share=0.5, min_count=3),
        RemovalWindow(HOUR),
        withdraw=withdraw & own,
        publish={label for label in created if whose[label] == team},
        published={label: {"server"} for label in own},
        staying={},
        now=START,
        dry_run=False,
    )
    held_together = {label for label in together.held_labels() if whose[label] == team}
    assert held_together == alone.held_labels()
    assert held_together in (set(), withdraw & own)
    tripped = removal_guard(max_share=0.5, min_count=3).trips(len(withdraw & own), len(own))
    assert bool(held_together) == tripped


@given(teams())
def test_the_held_back_removals_leave_no_trace_in_the_window_and_the_rest_is_remembered(
    drawn: tuple[dict[str, str], set[str], set[str]],
) -> None:
    whose, withdraw, created = drawn
    result = guarded(whose, withdraw, created, RemovalWindow(HOUR))
    remembered = frozenset().union(*(past.withdrawn for past in result.window.applies))
    assert remembered == withdraw - result.held_labels()
    assert frozenset().union(*(past.created for past in result.window.applies)) == created
    for past in result.window.applies:
        assert {whose[label] for label in past.withdrawn | past.created} <= {past.namespace}
    assert RemovalWindow.from_json(result.window.to_json(), HOUR) == result.window


def test_a_window_stored_before_namespaces_reads_as_the_names_of_no_namespace() -> None:
    window = RemovalWindow.from_json('[[1800000000.0,10,["app1"],[]]]', HOUR)
    assert window.count(START + 60, 9, ["app2"]).withdrawn == {"app1", "app2"}
    assert window.count(START + 60, 9, ["app2"], "team-a").withdrawn == {"app2"}


@pytest.mark.parametrize("text", ['[[1, 2, [], [], ""]]', "[[1, 2, [], [], 3]]", '[[1, 2, [], [], "a", 1]]'])
def test_a_window_entry_with_a_bad_namespace_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a removal window"):
        RemovalWindow.from_json(text, HOUR)
