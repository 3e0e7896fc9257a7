"""THE CAP OF NAMES PER NAMESPACE (provider/apply/namespace_cap.py): the rows of its docstring, then the
rule against a straightforward count on generated clusters."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.apply.namespace_cap import over_cap
from landb_webhook.provider.ownership.tenancy import namespace_of, namespaces

WHOSE = {**{f"a{i}": "team-a" for i in range(10)}, **{f"b{i}": "team-b" for i in range(10)}}


@pytest.mark.parametrize(
    ("published", "withdraw", "publish", "refused", "row"),
    [
        ({"a0"}, set(), {"a1", "a2"}, {}, "the namespace stays within the cap"),
        ({"a0"}, set(), {"a3", "a1", "a2"}, {"team-a": ["a3"]}, "past the cap: the first in sorted order go"),
        ({"a0", "a1", "a2", "a3"}, set(), {"a4"}, {"team-a": ["a4"]}, "over the cap already: nothing more"),
        ({"a0", "a1", "a2"}, {"a0", "a1"}, {"a3", "a4"}, {}, "withdrawals make room"),
        ({"a0", "a1", "a2"}, set(), {"a0", "a1", "x"}, {}, "updates are no creation; no namespace: no cap"),
        ({"b0", "b1", "b2"}, set(), {"a0", "a1", "a2", "b3"}, {"team-b": ["b3"]}, "each namespace its own"),
    ],
)
def test_the_cases_of_the_rules_docstring(
    published: set[str], withdraw: set[str], publish: set[str], refused: dict[str, list[str]], row: str
) -> None:
    assert over_cap(3, WHOSE, published=published, withdraw=withdraw, publish=publish) == refused, row


@given(
    st.sets(st.sampled_from(sorted(WHOSE))),
    st.sets(st.sampled_from(sorted(WHOSE))),
    st.sets(st.sampled_from([*WHOSE, "x0", "x1"])),
    st.integers(1, 12),
)
def test_no_namespace_ends_past_the_cap_through_its_creations_and_nothing_published_is_refused(
    published: set[str], withdraw: set[str], publish: set[str], cap: int
) -> None:
    withdraw &= published
    publish -= withdraw
    refused = over_cap(cap, WHOSE, published=published, withdraw=withdraw, publish=publish)
    refused_names = {label for labels in refused.values() for label in labels}
    assert refused_names <= publish - published
    after = (published - withdraw) | (publish - refused_names)
    counts = Counter(WHOSE.get(label, "") for label in after)
    staying = Counter(WHOSE.get(label, "") for label in published - withdraw)
    for namespace, labels in refused.items():
        assert labels == sorted(labels)
        assert counts[namespace] == max(cap, staying[namespace])  # filled exactly to the cap, no further
    for namespace in ("team-a", "team-b"):
        assert counts[namespace] <= max(cap, staying[namespace])


@pytest.mark.parametrize(
    ("resource", "namespace"),
    [
        ("ingress/team-a/web", "team-a"),
        ("httproute/team-b/api", "team-b"),
        (None, None),
        ("", None),
        ("ingress/team-a", None),
        ("ingress//web", None),
        ("a/b/c/d", None),
    ],
)
def test_a_resource_names_its_namespace_or_none(resource: str | None, namespace: str | None) -> None:
    assert namespace_of(resource) == namespace


def test_the_claims_resource_wins_over_an_endpoints() -> None:
    claim = Endpoint(
        "a-web.cern.ch",
        "TXT",
        ('"heritage=external-dns,external-dns/owner=o,external-dns/resource=ingress/team-a/web"',),
        labels=(("ownedRecord", "web.cern.ch"),),
    )
    asking = Endpoint("web.cern.ch", "A", ("192.0.2.1",), labels=(("resource", "ingress/team-b/web"),))
    other = Endpoint("api.cern.ch", "A", ("192.0.2.1",), labels=(("resource", "ingress/team-b/api"),))
    label_of = lambda name: name.removesuffix(".cern.ch")  # noqa: E731
    assert namespaces([claim], [asking, other], label_of) == {"web": "team-a", "api": "team-b"}
