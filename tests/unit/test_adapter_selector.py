"""The ingress label selector: Kubernetes' own grammar and semantics, matched locally."""

from __future__ import annotations

import pytest

from landb_webhook.adapters.selector import InvalidSelector, LabelSelector

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
        "role>1",
        "role=ingress;os=linux",
    ],
)
def test_malformed_selectors_are_refused_with_the_selector_in_the_message(selector: str) -> None:
    with pytest.raises(InvalidSelector, match="label selector"):
        LabelSelector.parse(selector)


def test_prefixed_keys_and_63_character_names_are_valid() -> None:
    key = "example.cern.ch/" + "n" * 63
    assert LabelSelector.parse(f"{key}=yes").matches({key: "yes"})
