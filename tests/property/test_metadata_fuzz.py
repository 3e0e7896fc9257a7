"""Fuzzing the metadata value parser with arbitrary text: what a hand edit, another tool or a
corrupted value can leave in a server's metadata must never make the reader raise, and what it
reads must survive being written back.

Cases hypothesis found are pinned with ``@example`` (the corpus of this file).
"""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from landb_webhook.landb.metadata import join_tokens, read_aliases, slot_key, split_tokens
from landb_webhook.landb.names import parse_token

_alias_keys = st.one_of(
    st.integers(1, 12).map(slot_key),
    st.text(max_size=8).map(lambda tail: "landb-alias" + tail),
    st.text(max_size=20),
)
_values = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.one_of(
            st.text(max_size=20), st.from_regex(r"[A-Za-z0-9\u212a-]{1,8}--[lL][oO][aA][dD]-[0-9]{1,4}-")
        ),
        max_size=12,
    ).map(",".join),
)
_metadata = st.dictionaries(_alias_keys, _values, max_size=8)


@given(st.text(max_size=300))
@example("\u212a--load-1-")  # KELVIN SIGN lower-cases to an ASCII k
@example("app--load-007-")
@example("app--load-99999999999999999999999-")
def test_a_token_is_read_only_from_ascii_text_that_spells_it(text: str) -> None:
    token = parse_token(text)
    if token is not None:
        assert text.strip().isascii(), "a token LanDB may not read as we do must not count as carried"
        assert re.fullmatch(rf"{token.label}--load-0*{token.index}-", text.strip().lower())
        assert parse_token(token.render()) == token


@given(_metadata)
@example({"landb-alias": "a:b;c"})
@example({"landb-alias": ",,, ,"})
@example({"landb-alias2": "\x00app--load-1-"})
def test_reading_arbitrary_metadata_never_raises_and_rewriting_a_slot_changes_nothing(
    metadata: dict[str, str],
) -> None:
    first = read_aliases(metadata)
    tokens = list(first.load_tokens())
    rewritten = {
        **{key: value for key, value in metadata.items() if key in first.frozen},
        **{slot_key(number): join_tokens(texts) for number, texts in first.slots.items()},
    }
    second = read_aliases(rewritten)
    assert second.slots == first.slots, "parse -> render -> parse is a fixpoint"
    assert second.frozen == first.frozen, "frozen values are kept verbatim"
    assert list(second.load_tokens()) == tokens


@given(_values)
def test_split_and_join_of_a_value_are_a_fixpoint(value: str) -> None:
    tokens = split_tokens(value)
    assert split_tokens(join_tokens(tokens)) == tokens
    assert all(token and token == token.strip() and "," not in token for token in tokens)
