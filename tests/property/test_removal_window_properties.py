"""Properties of THE REMOVAL WINDOW (provider/removals.py): what the removal guard adds up over time."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.provider import RemovalGuard
from landb_webhook.provider.removals import RemovalWindow

HOUR = 3600.0
START = 1_800_000_000.0
OLD = [f"app{i}" for i in range(30)]
"""Names published since before the window opened."""

gaps = st.floats(min_value=0, max_value=HOUR / 10, allow_nan=False)


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
    guard = RemovalGuard(max_share=0.5, min_count=5)
    names = OLD[:10]
    window = RemovalWindow(HOUR).after(START, 10, names[:4])
    count = window.count(START + 60, 6, names[4:8])
    assert not guard.trips(4, 6)  # one apply at a time, it went through
    assert guard.trips(len(count.withdrawn), count.published_at_start)
