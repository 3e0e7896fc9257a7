"""THE NAME POLICY (landb/name_policy.py): the rows of its docstring, what a bad policy says, and the rule
on generated names and policies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.landb.name_policy import InvalidPolicy, NamePolicy

ROWS = [
    ("login", "team-a", "", "login", False, "1: reserved, whoever asks"),
    ("cern-portal", "", "", "cern-*", False, "1: a reserved prefix"),
    ("xn--80ak6aa9", "team-a", "", "", False, "2: xn-- not allowed"),
    ("xn--80ak6aa9", "team-a", "team-a=xn--*", "", True, "2: its rule names xn--"),
    ("xn--80ak6aa9", "team-a", "team-a=*", "", False, "2: * alone names no xn--"),
    ("team-a-shop", "team-a", "*={namespace}-*", "", True, "3: its namespace's prefix"),
    ("team-b-shop", "team-a", "*={namespace}-*", "", False, "3: another namespace's prefix"),
    ("www", "web", "*={namespace}-*;web=www", "", True, "3: its own rule wins over *"),
    ("shop", "team-a", "web=www", "", True, "4: no rule for team-a"),
    ("shop", "", "*={namespace}-*", "", True, "4: a name of no namespace"),
]


@pytest.mark.parametrize(("label", "namespace", "policy", "reserved", "allowed", "rule"), ROWS)
def test_the_cases_of_the_rules_docstring(
    label: str, namespace: str, policy: str, reserved: str, allowed: bool, rule: str
) -> None:
    assert (NamePolicy.parse(policy, reserved).refusal(label, namespace) is None) is allowed, rule


def test_a_refusal_says_why_and_names_the_setting() -> None:
    policy = NamePolicy.parse("*={namespace}-*", "login")
    assert policy.refusal("login", "team-a") == "the name is reserved (LANDB_RESERVED_NAMES: login)"
    assert (
        policy.refusal("shop", "team-a") == "namespace team-a may publish only team-a-* (LANDB_NAME_POLICY)"
    )
    assert "xn--" in (policy.refusal("xn--p1ai", "team-a") or "")


@pytest.mark.parametrize(
    ("policy", "reserved", "says"),
    [
        ("team-a", "", "a rule is <namespace or *>=<patterns>"),
        ("Team_A=x", "", "'Team_A' is not a namespace name nor *"),
        ("team-a=", "", "no pattern"),
        ("team-a=a.b", "", "'a.b' is not a pattern"),
        ("team-a=*x", "", "'*x' is not a pattern"),
        ("team-a=x;team-a=y", "", "namespace team-a has two rules"),
        ("", "www,a b", "'a b' is not a pattern"),
    ],
)
def test_a_policy_that_does_not_read_is_refused_naming_the_wrong_part(
    policy: str, reserved: str, says: str
) -> None:
    with pytest.raises(InvalidPolicy, match=says.replace("*", r"\*")):
        NamePolicy.parse(policy, reserved)


labels = st.from_regex(r"(xn--)?[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True)
namespaces = st.sampled_from(["team-a", "team-b", "web", ""])
patterns = st.one_of(labels, labels.map(lambda label: label[:3] + "*"), st.just("{namespace}-*"))


@given(labels, namespaces, st.lists(patterns, min_size=1, max_size=3), st.lists(patterns, max_size=2))
def test_a_name_is_allowed_exactly_when_no_rule_refuses_it(
    label: str, namespace: str, allowed: list[str], reserved: list[str]
) -> None:
    """Against a straightforward reading of the four rules."""
    policy = NamePolicy.parse(f"team-a={','.join(allowed)}", ",".join(reserved))

    def match(pattern: str) -> bool:
        pattern = pattern.replace("{namespace}", namespace)
        return label.startswith(pattern[:-1]) if pattern.endswith("*") else label == pattern

    own = allowed if namespace == "team-a" else None
    expected = not any(match(p) for p in reserved)
    if label.startswith("xn--"):
        expected = expected and own is not None and any(p.startswith("xn--") and match(p) for p in own)
    if own is not None:
        expected = expected and any(match(p) for p in own)
    assert (policy.refusal(label, namespace) is None) is expected


@given(labels, namespaces)
def test_without_a_policy_only_xn_labels_are_refused(label: str, namespace: str) -> None:
    assert (NamePolicy().refusal(label, namespace) is None) is (not label.startswith("xn--"))
