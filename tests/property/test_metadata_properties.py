"""Properties of reading ``landb-alias*`` keys (landb/metadata.py)."""

from __future__ import annotations

import gc
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from landb_strategies import GeneratedMetadata, load_tokens, per_interface_values, server_metadata

from landb_webhook.landb.metadata import (
    PARSED_VALUES,
    ServerAliases,
    is_alias_key,
    read_aliases,
    read_slot_value,
    slot_key,
    slot_number,
    split_tokens,
)
from landb_webhook.landb.names import parse_plain_alias, parse_token

slot_numbers = st.integers(1, 10_000)


@given(slot_numbers)
def test_slot_key_and_slot_number_are_inverse(number: int) -> None:
    assert slot_number(slot_key(number)) == number


@given(st.text(max_size=20).map(lambda tail: "landb-alias" + tail))
def test_every_slot_key_spells_its_number_one_way(key: str) -> None:
    number = slot_number(key)
    if number is not None:
        assert slot_key(number) == key


def test_slot_one_is_the_bare_key_and_the_next_is_two() -> None:
    assert (slot_key(1), slot_key(2), slot_key(10)) == ("landb-alias", "landb-alias2", "landb-alias10")


@pytest.mark.parametrize(
    "key",
    ["landb-alias1", "landb-alias0", "landb-alias02", "landb-alias-extra", "landb-alias ", "landb-alias2x"],
)
def test_alias_keys_outside_the_convention_are_not_slots(key: str) -> None:
    assert is_alias_key(key)
    assert slot_number(key) is None


@pytest.mark.parametrize("number", [0, -1])
def test_there_is_no_slot_below_one(number: int) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        slot_key(number)


@given(server_metadata())
def test_every_alias_key_is_read_either_as_a_slot_or_as_frozen(generated: GeneratedMetadata) -> None:
    metadata = generated.metadata
    found = read_aliases(metadata)
    slot_keys = {slot_key(n) for n in found.slots}
    assert slot_keys.isdisjoint(found.frozen)
    assert slot_keys | set(found.frozen) == {k for k in metadata if k.startswith("landb-alias")}


@given(server_metadata())
def test_frozen_values_are_kept_verbatim_and_slots_hold_their_tokens(generated: GeneratedMetadata) -> None:
    metadata = generated.metadata
    found = read_aliases(metadata)
    assert all(found.frozen[key] == metadata[key] for key in found.frozen)
    for number, tokens in found.slots.items():
        assert tokens == split_tokens(metadata[slot_key(number)])


@given(server_metadata())
def test_keys_that_are_not_alias_keys_are_ignored(generated: GeneratedMetadata) -> None:
    metadata = generated.metadata
    aliases_only = {k: v for k, v in metadata.items() if k.startswith("landb-alias")}
    assert read_aliases(metadata) == read_aliases(aliases_only)


@given(server_metadata())
def test_every_load_token_in_any_alias_key_or_form_is_read(generated: GeneratedMetadata) -> None:
    assert Counter(read_aliases(generated.metadata).load_tokens()) == Counter(generated.expected_tokens)


@given(server_metadata())
def test_every_plain_alias_in_any_alias_key_or_form_is_read_and_nothing_else_is(
    generated: GeneratedMetadata,
) -> None:
    plain = [label for label, _ in read_aliases(generated.metadata).plain_aliases()]
    assert Counter(plain) == Counter(text.strip() for text in generated.expected_plain_aliases())


@given(st.sampled_from(["landb-alias", "landb-alias2", "landb-alias1", "landb-alias-extra"]), st.data())
def test_a_per_interface_value_is_frozen_in_any_key_and_its_aliases_are_read(
    key: str, data: st.DataObject
) -> None:
    value, expected = data.draw(per_interface_values(load_tokens()))
    found = read_aliases({key: value})
    assert found.slots == {}
    assert found.frozen == {key: value}
    assert Counter(found.load_tokens()) == Counter(expected)


def test_landb_alias1_is_frozen_even_with_a_plain_value() -> None:
    found = read_aliases({"landb-alias1": "app--load-0-", "landb-alias": "web--load-1-"})
    assert found.frozen == {"landb-alias1": "app--load-0-"}
    assert found.slots == {1: ("web--load-1-",)}
    assert found.frozen_slot_numbers() == frozenset()


def test_frozen_slot_numbers_are_the_slot_keys_holding_frozen_forms() -> None:
    found = read_aliases(
        {"landb-alias": "host.cern.ch:a--load-0-", "landb-alias3": "h.cern.ch:b", "landb-alias2": "c"}
    )
    assert found.frozen_slot_numbers() == {1, 3}


def test_an_empty_value_is_an_empty_slot() -> None:
    assert read_aliases({"landb-alias2": ""}).slots == {2: ()}


def _everything_read(found: ServerAliases) -> tuple[object, ...]:
    return (
        dict(found.slots),
        dict(found.frozen),
        sorted(found.frozen_slot_numbers()),
        list(found.editable_tokens()),
        list(found.frozen_tokens_by_key()),
        list(found.plain_aliases()),
        list(found.load_tokens()),
        list(found.load_labels()),
        list(found.frozen_labels()),
    )


# Values as the planner writes them (read without a regular expression per token), and one character
# away from that: a label of 64 characters, ending in '-', holding '--load-', upper case, a blank, an
# empty token, a non-ASCII digit.
_tokens_as_written = st.builds(
    "{}--load-{}-".format,
    st.one_of(
        st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True),
        st.sampled_from(("a" * 63, "x--load-7")),
    ),
    st.integers(0, 600),
)
_near_misses = st.sampled_from(
    (
        f"{'a' * 64}--load-1-",
        "app---load-1-",
        "-app--load-1-",
        "App--load-1-",
        "app--LOAD-1-",
        "app--load--",
        "app--load-\u0661-",
        "--load-1-",
        " app--load-1-",
        "",
        "app",
    )
)
values_as_written_and_near_misses = st.tuples(
    st.lists(_tokens_as_written, min_size=1, max_size=8),
    st.one_of(st.none(), st.tuples(st.integers(0, 8), _near_misses)),
    st.sampled_from(("", "", ",", " ")),
).map(
    lambda drawn: (
        ",".join(
            drawn[0]
            if drawn[1] is None
            else [*drawn[0][: drawn[1][0]], drawn[1][1], *drawn[0][drawn[1][0] :]]
        )
        + drawn[2]
    )
)

# Values as hand-edited servers carry them, and any text at all: non-ASCII letters that lower-case to
# ASCII ones (KELVIN SIGN), separators and colons, blanks.
slot_value_texts = st.one_of(
    server_metadata().map(lambda generated: ",".join(generated.metadata.values())),
    values_as_written_and_near_misses,
    st.text(alphabet=st.sampled_from("aZ9-,:; \u212a\u0130"), max_size=40),
    st.text(max_size=40),
)


@given(slot_value_texts)
def test_a_slot_value_reads_as_its_tokens_parsed_one_by_one(value: str) -> None:
    """Parsed slot values are kept (a cache): what is kept is exactly what parsing the value says."""
    texts = split_tokens(value)
    expected_load = tuple(
        (text, token.label, token.index) for text in texts if (token := parse_token(text)) is not None
    )
    expected_plain = tuple(label for text in texts if (label := parse_plain_alias(text)) is not None)
    for _ in range(2):  # the second read is answered from the cache
        read = read_slot_value(value)
        expected_labels = tuple(label for _, label, _ in expected_load)
        assert (read.texts, read.load, read.labels, read.plain) == (
            texts,
            expected_load,
            expected_labels,
            expected_plain,
        )


@given(server_metadata())
def test_a_server_reads_the_same_with_or_without_its_values_kept(generated: GeneratedMetadata) -> None:
    held = read_aliases(generated.metadata)
    kept = _everything_read(read_aliases(generated.metadata))  # the values ``held`` holds: kept
    assert kept == _everything_read(held)
    del held
    gc.collect()
    assert _everything_read(read_aliases(generated.metadata)) == kept  # parsed again


def _a_cluster(servers: int, aliases: int, *, prefix: str) -> list[dict[str, str]]:
    """Every server carries every alias, with its own N: no two values alike, as in a real cluster."""
    labels = [f"{prefix}-{i}" for i in range(aliases)]
    per_value = 10
    return [
        {
            slot_key(k + 1): ",".join(
                f"{label}--load-{n}-" for label in labels[k * per_value : (k + 1) * per_value]
            )
            for k in range(-(-aliases // per_value))
        }
        for n in range(servers)
    ]


def test_a_cluster_with_more_values_than_any_fixed_cache_has_each_parsed_once() -> None:
    """Records reads the values of every server in a cycle; a cache smaller than the cluster dropped each
    one just before it was read again (52,000 values at 500 nodes x 1,000 aliases, 8,192 kept)."""
    cluster = _a_cluster(100, 1000, prefix="cycle")  # 10,000 values
    before = PARSED_VALUES.parsed
    held = [read_aliases(metadata) for metadata in cluster]
    assert PARSED_VALUES.parsed - before == 10_000
    for _ in range(2):
        again = [read_aliases(metadata) for metadata in cluster]
        assert PARSED_VALUES.parsed - before == 10_000, "read again: nothing parsed again"
        assert [found.slots for found in again] == [found.slots for found in held]


def test_values_no_server_holds_any_more_are_not_kept() -> None:
    """The kept values are the cluster's own: memory follows the cluster, not every value ever read."""
    gc.collect()
    baseline = len(PARSED_VALUES)
    held = [read_aliases(metadata) for metadata in _a_cluster(10, 100, prefix="gone")]
    assert len(PARSED_VALUES) == baseline + 100
    del held
    gc.collect()
    assert len(PARSED_VALUES) == baseline


@given(server_metadata())
def test_the_labels_of_a_server_are_those_of_its_tokens(generated: GeneratedMetadata) -> None:
    found = read_aliases(generated.metadata)
    assert list(found.load_labels()) == [token.label for token in found.load_tokens()]
    assert list(found.frozen_labels()) == [token.label for token in found.frozen_tokens()]
