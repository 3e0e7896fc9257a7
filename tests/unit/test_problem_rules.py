"""The problem rules (provider/status/problems.py): the cases of its docstring's table, one entry per row, the
row's why as its id, and what the report and the gauge make of the rules' answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from landb_webhook.provider.status import problems as problem_rules
from landb_webhook.provider.status.problems import Holder, problems
from support.rule_tables import table_rows

# fmt: off
CASES = [  # holders (node, Ns, ingress), plain holders, the problems as (rule, nodes, Ns); the id: why
    pytest.param([("a", [0], True), ("b", [1], True)], [], [],
                 id="ingress nodes, one N each, each its own"),
    pytest.param([("a", [0], True), ("b", [1], True)], [], [],  # b's 1 in a frozen key: a holder's N alike
                 id="an N we never edit is an N like another"),
    pytest.param([("a", [0], True), ("w", [1], False)], [], [(1, ("w",), (1,))],
                 id="w is sent requests it does not serve"),
    pytest.param([("a", [0], True), ("b", [0], True)], [], [(2, ("a", "b"), (0,))],
                 id="LanDB needs one N per carrier"),
    pytest.param([("a", [0, 1], True), ("b", [2], True)], [], [(3, ("a",), (0, 1))],
                 id="a carrier holds one token of a name"),
    pytest.param([("a", [0, 0], True)], [], [(3, ("a",), (0, 0))],
                 id="the same N in two keys is two tokens"),
    pytest.param([("a", [0], True)], ["p"], [(4, ("p",), ())],
                 id="a CNAME and A records for one name"),
    pytest.param([], ["p"], [],
                 id="a plain alias alone is LanDB's, not ours to judge"),
]
# fmt: on


def test_each_row_of_the_rules_docstring_is_a_case_below_in_its_order() -> None:
    rows = table_rows(problem_rules.__doc__, starts_row="why")
    assert [case.id for case in CASES] == [row["why"] for row in rows]


@pytest.mark.parametrize(("holders", "plain", "expected"), CASES)
def test_the_cases_of_the_rules_docstring(
    holders: list[Holder], plain: list[str], expected: list[tuple[int, tuple[str, ...], tuple[int, ...]]]
) -> None:
    assert [(p.rule, p.nodes, p.indices) for p in problems(holders, plain)] == expected


def test_each_holder_of_a_shared_n_is_named_with_the_first_and_the_first_problem_ends_the_reading() -> None:
    holders = [("a", [0], True), ("w", [1], False), ("b", [0], True), ("c", [0], True)]
    assert [(p.kind, p.nodes) for p in problems(holders)] == [
        ("not_ingress", ("w",)),
        ("shared_index", ("a", "b")),
        ("shared_index", ("a", "c")),
    ]

    read: list[str] = []

    def reading() -> Iterator[Holder]:
        for holder in holders:
            read.append(holder[0])
            yield holder

    assert any(problems(reading()))
    assert read == ["a", "w"]
