"""THE INDEX RULE (landb/indices.py) for a carrier coming back: it gets its last N again if still free."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from landb_webhook.landb.indices import assign_indices

SERVERS = [f"s{i}" for i in range(5)]
small = st.integers(min_value=0, max_value=6)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], dict[str, list[int]], dict[str, int], int]:
    """Wanted carriers, the Ns visible servers hold, the Ns some servers would like back, the floor."""
    wanted = draw(st.lists(st.sampled_from(SERVERS), unique=True))
    held = draw(st.dictionaries(st.sampled_from(SERVERS), st.lists(small, max_size=2)))
    preferred = draw(st.dictionaries(st.sampled_from(SERVERS), small))
    return wanted, held, preferred, draw(st.integers(min_value=0, max_value=2))


@given(cases())
def test_a_returning_carrier_gets_its_last_index_when_no_one_holds_it(
    case: tuple[list[str], dict[str, list[int]], dict[str, int], int],
) -> None:
    wanted, held, preferred, floor = case
    assigned = assign_indices(wanted, held, floor=floor, preferred=preferred)
    used = {n for indices in held.values() for n in indices}
    returning = [s for s in wanted if not held.get(s) and s in preferred]
    for server in returning:
        free = preferred[server] >= floor and preferred[server] not in used
        wanted_by_others_first = any(
            preferred.get(other) == preferred[server] for other in returning[: returning.index(server)]
        )
        if free and not wanted_by_others_first:
            assert assigned[server] == preferred[server]


@given(cases())
@example((["s0", "s1"], {"s0": [2], "s1": [2]}, {"s1": 1}, 0))  # s1 loses a duplicate: no comeback
@example((["s0", "s1", "s2"], {"s0": [2], "s1": [2]}, {"s2": 0}, 0))  # s1 renumbered either way
def test_preferences_never_give_two_carriers_one_index_nor_move_a_held_one(
    case: tuple[list[str], dict[str, list[int]], dict[str, int], int],
) -> None:
    wanted, held, preferred, floor = case
    assigned = assign_indices(wanted, held, floor=floor, preferred=preferred)
    without = assign_indices(wanted, held, floor=floor)
    assert sorted(assigned) == sorted(wanted)
    assert len(set(assigned.values())) == len(assigned)
    for server in wanted:
        if without[server] in held.get(server, ()):
            assert assigned[server] == without[server], "a carrier keeping its N keeps the same one"
