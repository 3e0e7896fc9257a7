"""THE PACKING RULE (landb/packing.py: add_tokens, remove_tokens): the cases of its docstring, small
layouts one can check by counting characters, and its properties on generated layouts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.landb import packing
from landb_webhook.landb.metadata import join_tokens
from landb_webhook.landb.names import LoadToken
from landb_webhook.landb.packing import ValueTooLong, add_tokens, add_tokens_within, remove_tokens
from support.rule_tables import table_rows

Layout = dict[int, tuple[str, ...]]

short_labels = st.builds(
    "{}{}{}".format,
    st.sampled_from("abcdefgh"),
    st.text(alphabet="abc0-", max_size=10),
    st.sampled_from("abc01"),
)
rendered_tokens = st.builds(LoadToken, short_labels, st.integers(0, 99)).map(LoadToken.render)


@dataclass(frozen=True)
class Edit:
    slots: Layout
    """Existing slots; values may already be over ``max_length`` (hand edits), and may be empty."""
    new: list[str]
    """Tokens to add, none of them already present."""
    unavailable: frozenset[int]
    max_length: int

    def add(self) -> dict[int, tuple[str, ...]]:
        return add_tokens(self.slots, self.new, self.max_length, unavailable=self.unavailable)


@st.composite
def layouts(draw: st.DrawFn, *, min_tokens: int = 0) -> Layout:
    """Distinct tokens spread over a few slot numbers (gaps allowed), some slots left empty."""
    numbers = sorted(draw(st.sets(st.integers(1, 8), min_size=1, max_size=5)))
    layout: Layout = {n: () for n in draw(st.sets(st.sampled_from(numbers), max_size=1))}
    for token in draw(st.lists(rendered_tokens, unique=True, min_size=min_tokens, max_size=15)):
        number = draw(st.sampled_from(numbers))
        layout[number] = (*layout.get(number, ()), token)
    return layout


@st.composite
def edits(draw: st.DrawFn, *, count: st.SearchStrategy[int] | None = None) -> Edit:
    slots = draw(layouts())
    present = {t for tokens in slots.values() for t in tokens}
    size = draw(st.integers(0, 6) if count is None else count)
    new = draw(
        st.lists(
            rendered_tokens.filter(lambda t: t not in present), unique=True, min_size=size, max_size=size
        )
    )
    shortest_possible = max((len(t) for t in new), default=1)
    max_length = draw(st.integers(shortest_possible, shortest_possible + 60))
    unavailable = frozenset(draw(st.sets(st.integers(1, 10), max_size=2)) - set(slots))
    return Edit(slots, new, unavailable, max_length)


def changed_slots(before: Layout, after: Layout) -> set[int]:
    return {n for n in after if before.get(n) != after[n]}


@given(edits())
def test_every_value_written_fits_in_max_length(edit: Edit) -> None:
    after = edit.add()
    for number in changed_slots(edit.slots, after):
        assert len(join_tokens(after[number])) <= edit.max_length


@given(edits())
def test_added_tokens_appear_exactly_once_and_nothing_else_is_lost(edit: Edit) -> None:
    after = edit.add()
    assert Counter(t for tokens in after.values() for t in tokens) == Counter(
        [*(t for tokens in edit.slots.values() for t in tokens), *edit.new]
    )


@given(edits())
def test_tokens_already_there_never_move_new_ones_are_appended(edit: Edit) -> None:
    after = edit.add()
    assert set(edit.slots) <= set(after)
    for number, tokens in edit.slots.items():
        assert after[number][: len(tokens)] == tokens


@given(edits(count=st.just(1)))
def test_adding_one_token_rewrites_one_key_and_a_new_key_only_when_no_slot_has_room(edit: Edit) -> None:
    after = edit.add()
    (changed,) = changed_slots(edit.slots, after)
    (token,) = edit.new
    room = [n for n in sorted(edit.slots) if len(join_tokens((*edit.slots[n], token))) <= edit.max_length]
    if room:
        assert changed == room[0], "the first slot with room takes it"
    else:
        assert changed not in edit.slots


@st.composite
def edits_with_room_for_all(draw: st.DrawFn) -> Edit:
    """An edit whose max_length leaves at least one existing slot room for every new token."""
    edit = draw(edits(count=st.integers(1, 6)))
    slots = edit.slots or {1: ()}
    pending = sorted(edit.new)
    needed = min(len(join_tokens((*tokens, *pending))) for tokens in slots.values())
    return Edit(slots, edit.new, edit.unavailable - set(slots), draw(st.integers(needed, needed + 40)))


@given(edits_with_room_for_all())
def test_all_new_tokens_share_the_first_slot_that_has_room_for_all(edit: Edit) -> None:
    pending = sorted(edit.new)
    room = [n for n in sorted(edit.slots) if len(join_tokens((*edit.slots[n], *pending))) <= edit.max_length]
    after = edit.add()
    assert changed_slots(edit.slots, after) == {room[0]}
    assert after[room[0]] == (*edit.slots[room[0]], *pending)


@given(edits(count=st.integers(1, 6)))
def test_a_new_slot_takes_the_smallest_number_neither_used_nor_unavailable(edit: Edit) -> None:
    after = edit.add()
    created = sorted(set(after) - set(edit.slots))
    assert not (set(created) & edit.unavailable)
    taken = set(edit.slots) | edit.unavailable
    free = [n for n in range(1, len(taken) + len(created) + 1) if n not in taken][: len(created)]
    assert created == free


@given(edits())
def test_adding_does_not_mutate_the_input(edit: Edit) -> None:
    snapshot = {n: tuple(tokens) for n, tokens in edit.slots.items()}
    edit.add()
    assert edit.slots == snapshot


@given(edits(count=st.integers(1, 4)), st.integers(1, 5))
def test_a_token_longer_than_a_whole_value_is_refused(edit: Edit, excess: int) -> None:
    too_long = "x" * (edit.max_length + excess)
    with pytest.raises(ValueTooLong, match="longer than"):
        add_tokens(edit.slots, [*edit.new, too_long], edit.max_length)


@st.composite
def removals(draw: st.DrawFn) -> tuple[Layout, set[str]]:
    slots = draw(layouts(min_tokens=1))
    present = sorted({t for tokens in slots.values() for t in tokens})
    gone = draw(st.sets(st.sampled_from(present), max_size=len(present)))
    if draw(st.booleans()):
        gone.add(draw(rendered_tokens))  # a token that is not there: removing it is a no-op
    return slots, gone


@given(removals())
def test_removing_leaves_every_other_slot_byte_identical(case: tuple[Layout, set[str]]) -> None:
    slots, gone = case
    after = remove_tokens(slots, gone)
    for number, tokens in slots.items():
        if not set(tokens) & gone:
            assert after[number] == tokens


@given(removals())
def test_removed_tokens_leave_their_slot_others_keep_their_order_and_emptied_slots_go(
    case: tuple[Layout, set[str]],
) -> None:
    slots, gone = case
    after = remove_tokens(slots, gone)
    assert set(after) <= set(slots)
    for number, tokens in slots.items():
        kept = tuple(t for t in tokens if t not in gone)
        if kept or not tokens:
            assert after[number] == kept
        else:
            assert number not in after, "a slot emptied by the removal is deleted"


@given(layouts(min_tokens=1), st.data())
def test_removing_one_token_rewrites_or_deletes_exactly_one_key(slots: Layout, data: st.DataObject) -> None:
    present = sorted({t for tokens in slots.values() for t in tokens})
    token = data.draw(st.sampled_from(present))
    after = remove_tokens(slots, [token])
    touched = {n for n in slots if after.get(n) != slots[n]}
    assert len(touched) == 1
    assert set(after) <= set(slots)


@given(edits())
def test_adding_then_removing_the_same_tokens_restores_the_layout(edit: Edit) -> None:
    restored = remove_tokens(edit.add(), edit.new)
    non_empty = {n: tokens for n, tokens in edit.slots.items() if tokens}
    assert {n: tokens for n, tokens in restored.items() if tokens} == non_empty


def straightforward_add(edit: Edit) -> dict[int, tuple[str, ...]]:
    """THE PACKING RULE written plainly, joining a candidate value afresh at every try: add_tokens keeps
    each slot's length instead and must lay tokens out exactly as this does."""
    layout = dict(edit.slots)
    taken = set(layout) | set(edit.unavailable)
    pending = sorted(set(edit.new))

    def fits(tokens: tuple[str, ...]) -> bool:
        return len(join_tokens(tokens)) <= edit.max_length

    first = next((n for n in sorted(layout) if fits((*layout[n], *pending))), None)
    if first is not None or not pending:
        return layout if first is None else {**layout, first: (*layout[first], *pending)}
    touched: list[int] = []
    for token in pending:
        untouched = [n for n in sorted(layout) if n not in touched]
        number = next((n for n in [*touched, *untouched] if fits((*layout[n], token))), None)
        if number is None:
            number = next(n for n in range(1, len(taken) + 2) if n not in taken)
            taken.add(number)
            layout[number] = ()
        layout[number] = (*layout[number], token)
        if number not in touched:
            touched.append(number)
    return layout


@given(edits(count=st.integers(0, 12)))
def test_the_layout_is_the_straightforward_packers_exactly(edit: Edit) -> None:
    if any(len(t) > edit.max_length for t in edit.new):
        return  # refused: pinned by test_a_token_longer_than_a_whole_value_is_refused
    assert edit.add() == straightforward_add(edit)


# -- the cases of the rule's docstring: one entry per row of its table, the row's why as its id -------------

# fmt: off
ADDITIONS = [  # slots, max_length, added, unavailable -> expected
    pytest.param({1: ("aa",)}, 11, ["cc", "bb"], [], {1: ("aa", "bb", "cc")},
                 id="all fit the first slot"),
    pytest.param({1: ("aa", "bb", "cc")}, 11, ["dd", "ee"], [], {1: ("aa", "bb", "cc", "dd"), 2: ("ee",)},
                 id="dd fits, ee no longer"),
    pytest.param({1: ("aa", "bb"), 2: ("cc",)}, 8, ["dd", "ee"], [], {1: ("aa", "bb"), 2: ("cc", "dd", "ee")},
                 id="the first slot fitting them all"),
    pytest.param({1: ("aaaaaaa",), 2: ("bbbb",)}, 9, ["cc", "d"], [],
                 {1: ("aaaaaaa",), 2: ("bbbb", "cc", "d")}, id="d joins the slot cc rewrote, not slot 1"),
    pytest.param({1: ("aaaaaaa",), 3: ("bbbbbbb",)}, 9, ["cc"], [],
                 {1: ("aaaaaaa",), 3: ("bbbbbbb",), 2: ("cc",)}, id="smallest free number"),
    pytest.param({}, 11, ["aa"], [1], {2: ("aa",)},
                 id="never a frozen key's number"),
]
REMOVALS = [  # from 1: aa,bb  2: cc, removed -> expected
    pytest.param(["aa"], {1: ("bb",), 2: ("cc",)},
                 id="the rest stay in place"),
    pytest.param(["cc"], {1: ("aa", "bb")},
                 id="an empty slot is deleted"),
]
TOO_LONG = [  # slots, added, max_length
    pytest.param({1: ("aa",)}, ["abcdefgh"], 5,
                 id="can never be written"),
]
OVER_QUOTA = [  # slots, max_length, added, new_keys -> expected, left_out
    pytest.param({1: ("aaaaaaa",)}, 9, ["cc", "d"], 0, {1: ("aaaaaaa", "d")}, ("cc",),
                 id="over quota: what fits"),
]
# fmt: on


def test_each_row_of_the_rules_docstring_is_a_case_below_in_its_order() -> None:
    rows = table_rows(packing.__doc__, starts_row="max")
    cases = [*ADDITIONS, *REMOVALS, *TOO_LONG, *OVER_QUOTA]
    assert [case.id for case in cases] == [row["why"] for row in rows]


@pytest.mark.parametrize(("slots", "max_length", "added", "unavailable", "expected"), ADDITIONS)
def test_the_additions_of_the_rules_docstring(
    slots: Layout, max_length: int, added: list[str], unavailable: list[int], expected: Layout
) -> None:
    assert add_tokens(slots, added, max_length, unavailable=unavailable) == expected


@pytest.mark.parametrize(("gone", "expected"), REMOVALS)
def test_the_removals_of_the_rules_docstring(gone: list[str], expected: Layout) -> None:
    assert remove_tokens({1: ("aa", "bb"), 2: ("cc",)}, gone) == expected


@pytest.mark.parametrize(("slots", "added", "max_length"), TOO_LONG)
def test_the_over_long_token_of_the_rules_docstring(slots: Layout, added: list[str], max_length: int) -> None:
    with pytest.raises(ValueTooLong):
        add_tokens(slots, added, max_length)


@pytest.mark.parametrize(("slots", "max_length", "added", "new_keys", "expected", "left_out"), OVER_QUOTA)
def test_the_over_quota_row_of_the_rules_docstring(
    slots: Layout,
    max_length: int,
    added: list[str],
    new_keys: int,
    expected: Layout,
    left_out: tuple[str, ...],
) -> None:
    assert add_tokens_within(slots, added, max_length, new_keys=new_keys) == (expected, left_out)


def test_new_tokens_are_appended_together_to_the_first_key_with_room_for_all() -> None:
    slots = {1: ("web--load-0-",), 2: ("db--load-1-",)}
    assert add_tokens(slots, ["b--load-0-", "a--load-0-"], max_length=40) == {
        1: ("web--load-0-", "a--load-0-", "b--load-0-"),
        2: ("db--load-1-",),
    }


def test_a_token_that_fits_nowhere_opens_the_smallest_free_key() -> None:
    slots = {1: ("x" * 20,), 3: ("y" * 20,)}
    assert add_tokens(slots, ["app--load-0-"], max_length=25) == {
        1: ("x" * 20,),
        3: ("y" * 20,),
        2: ("app--load-0-",),
    }


def test_a_key_holding_a_value_we_never_edit_is_not_reused_for_a_new_slot() -> None:
    assert add_tokens({}, ["app--load-0-"], max_length=254, unavailable=[1, 2]) == {3: ("app--load-0-",)}


def test_spilled_tokens_prefer_keys_this_edit_already_rewrites() -> None:
    # No key has room for all three. "a"*15 goes to key 2, "b"*12 fits only key 3; "c"*3 would fit
    # keys 1 and 2, and goes to 2, already being rewritten: two keys change, not three.
    slots = {1: ("p" * 20,), 2: ("q" * 10,), 3: ("r" * 5,)}
    after = add_tokens(slots, ["c" * 3, "b" * 12, "a" * 15], max_length=30)
    assert after == {1: ("p" * 20,), 2: ("q" * 10, "a" * 15, "c" * 3), 3: ("r" * 5, "b" * 12)}


def test_an_over_long_hand_set_value_is_left_as_it_is() -> None:
    slots = {1: ("z" * 300,)}
    assert add_tokens(slots, ["app--load-0-"], max_length=254) == {1: ("z" * 300,), 2: ("app--load-0-",)}


def test_a_token_longer_than_any_value_is_refused() -> None:
    with pytest.raises(ValueTooLong, match="longer than 10 characters"):
        add_tokens({}, ["app--load-0-"], max_length=10)


def test_removing_the_last_token_of_a_key_deletes_it_and_leaves_the_others() -> None:
    slots = {1: ("app--load-0-",), 2: ("web--load-0-", "legacy")}
    assert remove_tokens(slots, ["app--load-0-", "web--load-0-"]) == {2: ("legacy",)}


def test_a_key_that_was_already_empty_is_not_deleted_by_an_unrelated_removal() -> None:
    assert remove_tokens({1: (), 2: ("app--load-0-",)}, ["app--load-0-"]) == {1: ()}
