"""The ingress label selector: Kubernetes' own grammar and semantics, matched locally."""

from __future__ import annotations

import pytest

from landb_webhook.selector import (
    AnySelector,
    InvalidSelector,
    LabelSelector,
    is_valid_label_key,
    is_valid_label_value,
)

INGRESS = {"role": "ingress", "kubernetes.io/os": "linux"}
WORKER = {"role": "worker", "kubernetes.io/os": "linux"}
UNLABELLED: dict[str, str] = {}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("role=ingress", INGRESS, True),
        ("role=ingress", WORKER, False),
        ("role=ingress", UNLABELLED, False),
        ("role==ingress", INGRESS, True),
        ("role = ingress", INGRESS, True),
        ("role!=ingress", INGRESS, False),
        ("role!=ingress", WORKER, True),
        ("role!=ingress", UNLABELLED, True),  # absent label: != matches, as in Kubernetes
        ("role", WORKER, True),
        ("role", UNLABELLED, False),
        ("!role", UNLABELLED, True),
        ("!role", INGRESS, False),
        ("role in (ingress, edge)", INGRESS, True),
        ("role in (edge,gateway)", INGRESS, False),
        ("role in (ingress)", UNLABELLED, False),
        ("role notin (ingress,edge)", WORKER, True),
        ("role notin (ingress,edge)", INGRESS, False),
        ("role notin (ingress)", UNLABELLED, True),
        ("role=ingress,kubernetes.io/os=linux", INGRESS, True),
        ("role=ingress,kubernetes.io/os=windows", INGRESS, False),
        ("role in (ingress,worker),!node.kubernetes.io/exclude", WORKER, True),
        ("role=", {"role": ""}, True),
        ("role=", INGRESS, False),
        ("", UNLABELLED, True),  # the empty selector selects everything
        ("  ", INGRESS, True),
        # < and > compare integers; an absent or non-integer label never matches either way
        ("rank>1", {"rank": "2"}, True),
        ("rank>1", {"rank": "1"}, False),
        ("rank > 1", {"rank": "10"}, True),  # numerically, not as text ("10" < "2")
        ("rank<2", {"rank": "10"}, False),
        ("rank<0", {"rank": "-3"}, True),
        ("rank>-5", {"rank": "-3"}, True),
        ("rank<8", {"rank": "007"}, True),  # "007" is 7, as Go's ParseInt reads it
        ("rank>1", UNLABELLED, False),
        ("rank<1", UNLABELLED, False),
        ("rank>1", {"rank": "high"}, False),
        ("rank<1", {"rank": "high"}, False),
        ("role=ingress,rank>1", {"role": "ingress", "rank": "3"}, True),
    ],
)
def test_selector_semantics_follow_kubernetes(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.parse(selector).matches(labels) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "role=ingress,",  # trailing comma
        ",role=ingress",
        "role in (ingress",
        "role in ingress)",
        "role in ingress",
        "role=in gress",
        "role=-bad",
        "-role=ingress",
        "role===x",  # "=x" is not a valid label value
        "ro le=ingress",
        "x" * 64 + "=y",  # a name longer than 63 characters
        "role=" + "v" * 64,
        "Bad_Prefix/role=ingress",
        "role>one",  # < and > take an integer
        "role<",
        "role>=1",  # there is no >= in the grammar
        "role>1>2",
        "ro le>1",
        "role=ingress;os=linux",
    ],
)
def test_malformed_selectors_are_refused_with_the_selector_in_the_message(selector: str) -> None:
    with pytest.raises(InvalidSelector, match="label selector"):
        LabelSelector.parse(selector)


def test_prefixed_keys_and_63_character_names_are_valid() -> None:
    key = "example.cern.ch/" + "n" * 63
    assert LabelSelector.parse(f"{key}=yes").matches({key: "yes"})


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("role", True),
        ("node.kubernetes.io/exclude", True),
        ("Role_1.x-y", True),
        ("n" * 63, True),
        ("n" * 64, False),
        ("p" * 253 + "/role", True),
        ("p" * 254 + "/role", False),
        ("a..b/role", False),  # the prefix is a DNS subdomain: no empty label
        ("Upper.case/role", False),
        ("/role", False),
        ("role/", False),
        ("-role", False),
        ("role\n", False),
        ("", False),
    ],
)
def test_label_key_rules(key: str, valid: bool) -> None:
    assert is_valid_label_key(key) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("ingress", True),
        ("v1.2_rc-3", True),
        ("v" * 63, True),
        ("v" * 64, False),
        ("-ingress", False),
        ("ingress.", False),
        ("in gress", False),
        ("ingress\n", False),
    ],
)
def test_label_value_rules(value: str, valid: bool) -> None:
    assert is_valid_label_value(value) is valid


ROLE_LABEL = {"node-role.kubernetes.io/ingress": ""}


@pytest.mark.parametrize(
    ("selectors", "labels", "expected"),
    [
        ("role=ingress;node-role.kubernetes.io/ingress", INGRESS, True),
        ("role=ingress;node-role.kubernetes.io/ingress", ROLE_LABEL, True),
        ("role=ingress;node-role.kubernetes.io/ingress", WORKER, False),
        ("role=ingress ; node-role.kubernetes.io/ingress", ROLE_LABEL, True),
        ("role=ingress,kubernetes.io/os=linux;role=edge", INGRESS, True),  # commas still AND
        ("role=ingress,kubernetes.io/os=windows;role=edge", INGRESS, False),
        ("role=ingress", INGRESS, True),
        ("", WORKER, True),
    ],
)
def test_selectors_separated_by_semicolons_match_when_any_does(
    selectors: str, labels: dict[str, str], expected: bool
) -> None:
    assert AnySelector.parse(selectors).matches(labels) is expected


@pytest.mark.parametrize("text", ["role=ingress;", ";role=ingress", "role=ingress;;role=edge", "a=b;c in (x"])
def test_an_empty_or_malformed_alternative_is_refused(text: str) -> None:
    with pytest.raises(InvalidSelector):
        AnySelector.parse(text)
