"""Properties of alias names and ``--load-N-`` tokens (landb/names.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from landb_strategies import DOMAIN, valid_labels

from landb_webhook.landb.names import (
    LOAD_MARKER,
    MAX_LABEL_LENGTH,
    InvalidName,
    LoadToken,
    dns_name_for,
    label_for,
    parse_token,
    validate_label,
)

domains = st.sampled_from((DOMAIN, "example.org"))
short_labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,25}[a-z0-9])?", fullmatch=True).filter(
    lambda label: LOAD_MARKER not in label
)
"""Short enough that adding a character or two cannot break the length rule instead of the one tested."""
too_long_labels = st.from_regex(r"[a-z0-9][a-z0-9-]{62,90}[a-z0-9]", fullmatch=True)
indices = st.integers(0, 10**6)
REFUSAL_KINDS = {
    "empty",
    "too_long",
    "invalid_characters",
    "other_zone",
    "wildcard",
    "multi_label",
    "load_marker",
}
"""The fixed words metrics label refusals with (never the input: it would explode label cardinality)."""
NOT_LABEL_CHARACTERS = "_!@#$%^&()+=~/\\'\" ,;:"


@given(valid_labels, domains)
def test_label_and_dns_name_round_trip(label: str, domain: str) -> None:
    assert label_for(dns_name_for(label, domain), domain) == label


@given(valid_labels, st.sampled_from(("upper", "trailing-dot", "spaces")))
def test_label_for_ignores_case_a_trailing_dot_and_surrounding_blanks(label: str, variant: str) -> None:
    name = {
        "upper": f"{label.upper()}.CERN.CH",
        "trailing-dot": f"{label}.cern.ch.",
        "spaces": f"  {label}.cern.ch\n",
    }[variant]
    assert label_for(name, DOMAIN) == label


@given(st.text(max_size=80), domains)
def test_label_for_returns_a_valid_label_naming_the_same_host_or_says_why_not(name: str, domain: str) -> None:
    try:
        label = label_for(name, domain)
    except InvalidName as exc:
        assert str(exc), "the operator needs a reason"
        assert exc.kind in REFUSAL_KINDS
        return
    assert validate_label(label) == label
    assert dns_name_for(label, domain) == name.strip().rstrip(".").lower()
    assert name.isascii()


@given(valid_labels, st.sampled_from("\u212a\u0130\u017f\u00e9"))
def test_non_ascii_letters_are_refused_even_those_lower_casing_makes_ascii(label: str, letter: str) -> None:
    with pytest.raises(InvalidName, match="not ASCII") as refused:
        label_for(f"{letter}{label}.cern.ch", DOMAIN)
    assert refused.value.kind == "invalid_characters"


@given(valid_labels, st.sampled_from(("example.org", "cern.ch.evil.org", "xcern.ch", "ch", "cern.com")))
def test_names_outside_the_zone_are_refused_naming_the_zone(label: str, other: str) -> None:
    with pytest.raises(InvalidName, match=r"not in the cern\.ch zone") as refused:
        label_for(f"{label}.{other}", DOMAIN)
    assert refused.value.kind == "other_zone"


def test_the_zone_apex_is_not_an_alias() -> None:
    with pytest.raises(InvalidName, match="zone"):
        label_for("cern.ch", DOMAIN)


@given(valid_labels, valid_labels)
def test_multi_label_names_are_refused_as_not_a_single_label(first: str, second: str) -> None:
    with pytest.raises(InvalidName, match="more than one label") as refused:
        label_for(f"{first}.{second}.cern.ch", DOMAIN)
    assert refused.value.kind == "multi_label"


@given(st.one_of(st.just(""), valid_labels))
def test_wildcards_are_refused_as_wildcards(rest: str) -> None:
    with pytest.raises(InvalidName, match="wildcard") as refused:
        label_for(f"*{rest}.cern.ch", DOMAIN)
    assert refused.value.kind == "wildcard"


def test_a_wildcard_above_a_subdomain_is_refused_as_a_wildcard() -> None:
    with pytest.raises(InvalidName, match="wildcard"):
        label_for("*.apps.cern.ch", DOMAIN)


@given(short_labels, st.sampled_from(NOT_LABEL_CHARACTERS), short_labels)
def test_labels_with_characters_outside_a_z_0_9_hyphen_are_refused(head: str, bad: str, tail: str) -> None:
    with pytest.raises(InvalidName, match=re.escape("only a-z, 0-9 and '-'")) as refused:
        label_for(f"{head}{bad}{tail}.cern.ch", DOMAIN)
    assert refused.value.kind == "invalid_characters"


@given(short_labels, st.sampled_from(("leading", "trailing")))
def test_labels_starting_or_ending_with_a_hyphen_are_refused(label: str, where: str) -> None:
    name = f"-{label}" if where == "leading" else f"{label}-"
    with pytest.raises(InvalidName, match="neither start nor end with '-'") as refused:
        label_for(f"{name}.cern.ch", DOMAIN)
    assert refused.value.kind == "invalid_characters"


@given(short_labels, indices, st.one_of(st.just(""), short_labels), st.booleans())
@example("x", 7, "", False)
def test_a_label_holding_a_load_suffix_is_refused_not_written_with_a_second_one(
    head: str, index: int, tail: str, upper: bool
) -> None:
    """``x--load-7.cern.ch`` would be written as ``x--load-7--load-0-``: which suffix LanDB reads is a
    guess."""
    marker = LOAD_MARKER.upper() if upper else LOAD_MARKER
    label = f"{head}{marker}{index}{'-' + tail if tail else ''}"
    assume(len(label) <= 63)  # a longer one is refused for its length first (the test below)
    with pytest.raises(InvalidName, match=re.escape("load-balancing suffix")) as refused:
        label_for(f"{label}.cern.ch", DOMAIN)
    assert refused.value.kind == "load_marker"


@given(too_long_labels)
def test_labels_over_63_characters_are_refused_with_their_length(label: str) -> None:
    with pytest.raises(
        InvalidName, match=rf"is {len(label)} characters, more than {MAX_LABEL_LENGTH}"
    ) as refused:
        label_for(f"{label}.cern.ch", DOMAIN)
    assert refused.value.kind == "too_long"


@given(st.from_regex(r"[a-z0-9][a-z0-9-]{61}[a-z0-9]", fullmatch=True))
def test_a_label_of_exactly_63_characters_is_accepted(label: str) -> None:
    assert label_for(f"{label}.cern.ch", DOMAIN) == label


@given(valid_labels, indices)
def test_token_render_and_parse_round_trip(label: str, index: int) -> None:
    token = LoadToken(label, index)
    assert parse_token(token.render()) == token
    assert token.render() == f"{label}--load-{index}-"


@given(valid_labels, indices, st.sampled_from(("load", "LOAD", "Load", "lOaD")), st.booleans())
def test_the_load_suffix_and_the_label_are_case_insensitive(
    label: str, index: int, infix: str, upper_label: bool
) -> None:
    text = f"{label.upper() if upper_label else label}--{infix}-{index}-"
    assert parse_token(text) == LoadToken(label, index)


def test_the_odd_case_token_from_the_cern_docs_parses() -> None:
    assert parse_token("App--LOAD-3-") == LoadToken("app", 3)


@given(valid_labels)
def test_a_plain_alias_is_a_cname_not_a_load_token(label: str) -> None:
    assert parse_token(label) is None


@pytest.mark.parametrize(
    "text",
    [
        "app--load-",
        "app--load-x-",
        "app--load-1",
        "--load-1-",
        "-app--load-1-",
        "app_x--load-1-",
        "app--load--1-",
    ],
)
def test_unknown_forms_are_not_load_tokens(text: str) -> None:
    assert parse_token(text) is None


@given(too_long_labels, indices)
def test_a_token_whose_label_is_too_long_is_not_a_load_token(label: str, index: int) -> None:
    assert parse_token(f"{label}--load-{index}-") is None


@given(st.text(max_size=255))
@example("\u212aapp--load-1-")  # KELVIN SIGN: lower-casing it first made this "kapp"
def test_parse_token_never_raises_and_only_yields_valid_labels(text: str) -> None:
    token = parse_token(text)
    if token is not None:
        assert text.isascii(), "a token is only what LanDB reads as one: ASCII text"
        assert validate_label(token.label) == token.label
        assert parse_token(token.render()) == token


@given(valid_labels, indices, st.sampled_from("\u212a\u0130\u017f\u00e9"), st.booleans())
@example("app", 1, "\u212a", True)
def test_a_token_with_a_non_ascii_letter_is_no_token_even_if_lower_casing_makes_it_ascii(
    label: str, index: int, letter: str, in_front: bool
) -> None:
    text = f"{letter}{label}--load-{index}-" if in_front else f"{label}{letter}--load-{index}-"
    assert parse_token(text) is None
