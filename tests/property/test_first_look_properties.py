"""Properties of DNS FIRST (landb/first_look.py): which names are asked before their first write, and what
each answer decides; the cases of its docstring, row by row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.landb import first_look
from landb_webhook.landb.first_look import NOT_ASKED, FirstLook, decide, elsewhere, new_names
from landb_webhook.landb.propagation import Addresses, Alias, Answer, NoAnswer, NoName
from support.rule_tables import table_rows

LABELS = [f"name{i}" for i in range(8)]
labels = st.frozensets(st.sampled_from(LABELS))
OURS = frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"})
ips = st.frozensets(st.sampled_from([*OURS, "192.0.2.9", "192.0.2.10"]), min_size=1, max_size=4)
answers: st.SearchStrategy[Answer] = st.one_of(
    ips.map(Addresses),
    st.sampled_from([Alias("web.cern.ch."), NoName(), NoAnswer("timed out")]),
)


@given(labels, labels, labels)
def test_only_names_neither_claimed_nor_carried_are_asked(
    publish: frozenset[str], claimed: frozenset[str], carried: frozenset[str]
) -> None:
    asked = new_names(publish, claimed, carried)

    assert asked == publish - claimed - carried


@given(labels, st.dictionaries(st.sampled_from(LABELS), answers), labels)
def test_every_name_asked_is_written_refused_or_held_back_exactly_once(
    asked: frozenset[str], found: dict[str, Answer], takeover: frozenset[str]
) -> None:
    decided = decide(asked, found, OURS, takeover)

    parts = [decided.written, set(decided.refused), set(decided.held_back)]
    assert set().union(*parts) == asked
    assert sum(map(len, parts)) == len(asked)
    assert set(decided.taking_over) <= decided.written & takeover
    assert decided.kept_back == asked - decided.written


@given(labels, st.dictionaries(st.sampled_from(LABELS), answers), labels)
def test_each_answer_decides_by_the_rule(
    asked: frozenset[str], found: dict[str, Answer], takeover: frozenset[str]
) -> None:
    decided = decide(asked, found, OURS, takeover)

    for label in asked:
        answer = found.get(label, NOT_ASKED)
        listed = label in takeover
        if listed:
            assert label in decided.written
            assert (label in decided.taking_over) == (
                not isinstance(answer, NoAnswer) and elsewhere(answer, OURS)
            )
        elif isinstance(answer, NoAnswer):
            assert decided.held_back[label] == answer
        elif isinstance(answer, NoName) or (isinstance(answer, Addresses) and answer.ips <= OURS):
            assert label in decided.written
        else:
            assert decided.refused[label] == answer


@given(labels, st.dictionaries(st.sampled_from(LABELS), answers))
def test_listing_a_name_for_take_over_only_ever_turns_a_refusal_or_a_hold_into_a_write(
    asked: frozenset[str], found: dict[str, Answer]
) -> None:
    alone = decide(asked, found, OURS)
    listed = decide(asked, found, OURS, asked)

    assert listed.written == asked
    assert alone.written <= listed.written
    assert set(listed.taking_over) == set(alone.refused)


# -- the cases of the rule's docstring: one entry per row of its table -----------------------------------

# fmt: off
ROWS = [  # the answer for ``app`` -> what it decides, not listed and listed
    pytest.param(NoName(), "written", "written", id="NXDOMAIN, or the name with no A record"),
    pytest.param(Addresses(frozenset({"10.0.0.1", "10.0.0.2"})), "written", "written",
                 id="only addresses in ours"),
    pytest.param(Addresses(frozenset({"10.0.0.1", "192.0.2.9"})), "refused", "taking over",
                 id="another address (alone or beside ours), or a CNAME"),
    pytest.param(None, "held back", "written",
                 id="nothing: the resolver failed, or not in time"),
]
# fmt: on


def test_each_row_of_the_rules_docstring_is_a_case_below_in_its_order() -> None:
    rows = table_rows(first_look.__doc__, starts_row="DNS answers for a new name")
    assert [case.id for case in ROWS] == [row["DNS answers for a new name"] for row in rows]


def _outcome(decided: FirstLook) -> str:
    if "app" in decided.taking_over:
        return "taking over"
    if "app" in decided.written:
        return "written"
    return "refused" if "app" in decided.refused else "held back"


@pytest.mark.parametrize(("answer", "alone", "listed"), ROWS)
def test_the_cases_of_the_rules_docstring(answer: Answer | None, alone: str, listed: str) -> None:
    found = {} if answer is None else {"app": answer}

    assert _outcome(decide({"app"}, found, OURS)) == alone
    assert _outcome(decide({"app"}, found, OURS, {"app"})) == listed
    assert _outcome(decide({"app"}, {"app": NoAnswer("timed out")}, OURS)) == "held back"
    assert _outcome(decide({"app"}, {"app": Alias("web.cern.ch.")}, OURS)) == "refused"
