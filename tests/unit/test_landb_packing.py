"""THE PACKING RULE on small layouts one can check by counting characters (landb/packing.py)."""

from __future__ import annotations

import pytest

from landb_webhook.landb.packing import ValueTooLong, add_tokens, remove_tokens


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
