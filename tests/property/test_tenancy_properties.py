"""ONE TEAM CANNOT HURT ANOTHER (provider/ownership/tenancy.py): the caps, owner first, load balancers by
namespace; the cases of its docstring's table, then properties over generated requests."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.backends import LoadBalancer
from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.ownership.tenancy import (
    chosen_asker,
    may_publish_on,
    over_caps,
    service_of,
    with_owner,
)

A_SITE = "ingress/team-a/site"
B_GRAB = "ingress/team-b/grab"
NODES = ("10.0.0.1", "10.0.0.2")
VIP_B = "188.184.30.10"


def asking(resource: str | None, *targets: str, name: str = "site.cern.ch") -> Endpoint:
    labels = (("resource", resource),) if resource else ()
    return Endpoint(name, "A", targets, labels=labels)


def lb(name: str, description: str = "", lb_id: str = "lb-1") -> LoadBalancer:
    return LoadBalancer(lb_id, name, VIP_B, description=description)


# -- the docstring's table ---------------------------------------------------------------------------


def test_an_ingress_of_10001_names_keeps_the_cap_owned_names_first() -> None:
    names = [f"n{i:05d}" for i in range(10_001)]
    owned = {"n09999": B_GRAB, "n10000": B_GRAB}

    [excess] = over_caps({B_GRAB: names}, owned, per_resource=200, per_namespace=1000)

    assert (excess.resource, excess.reason, excess.limit, excess.asked) == (
        B_GRAB,
        "resource_cap",
        200,
        10_001,
    )
    assert len(excess.dropped) == 9_801
    kept = set(names) - set(excess.dropped)
    assert {"n09999", "n10000"} <= kept and "n00197" in kept and "n00198" not in kept


def test_a_namespace_over_its_cap_loses_the_excess_of_its_largest_requester() -> None:
    asks = {
        "ingress/team-b/one": [f"a{i}" for i in range(400)],
        "ingress/team-b/two": [f"b{i}" for i in range(400)],
        "ingress/team-b/big": [f"c{i}" for i in range(450)],
        "ingress/team-a/site": [f"d{i}" for i in range(900)],  # over its own cap only
    }

    excesses = over_caps(asks, {}, per_resource=500, per_namespace=1000)

    assert {(e.resource, e.reason, len(e.dropped)) for e in excesses} == {
        ("ingress/team-a/site", "resource_cap", 400),
        ("ingress/team-b/big", "namespace_cap", 116),  # 450 -> 400, then 334 of the 1,000 left
        ("ingress/team-b/one", "namespace_cap", 67),
        ("ingress/team-b/two", "namespace_cap", 67),
    }


def test_endpoints_without_a_resource_are_never_capped() -> None:
    assert over_caps({"": [f"n{i}" for i in range(5000)]}, {}, per_resource=10, per_namespace=10) == []


def test_the_owner_keeps_its_name_in_either_order_and_a_merged_endpoint_keeps_the_owner() -> None:
    a, b = asking(A_SITE, *NODES), asking(B_GRAB, VIP_B)
    assert chosen_asker([a, b], A_SITE) == 0
    assert chosen_asker([b, a], A_SITE) == 1
    merged = asking(B_GRAB, *NODES, VIP_B)
    assert with_owner(merged, A_SITE).label("resource") == A_SITE
    assert with_owner(asking(None, *NODES), A_SITE).label("resource") is None


def test_an_object_of_the_owners_namespace_asking_keeps_its_own_resource() -> None:
    """An Ingress moved to an HTTPRoute of the same namespace: the route is who asks now (its events)."""
    route = A_SITE.replace("ingress/", "httproute/", 1)
    assert with_owner(asking(route, *NODES), A_SITE).label("resource") == route


def test_without_a_claim_the_smallest_targets_then_the_smallest_resource_keep_it() -> None:
    a, b = asking(A_SITE, "10.0.0.9"), asking(B_GRAB, "10.0.0.1")
    assert chosen_asker([a, b], None) == 1
    assert chosen_asker([b, a], "service/gone/x") == 0
    c = asking("ingress/team-c/x", "10.0.0.1")
    assert chosen_asker([c, b], None) == 1


def test_load_balancers_by_namespace() -> None:
    ccm = lb("kube_service_landb_e2e_team-b_shop")
    described = lb("renamed", "Kubernetes external service team-b/shop from cluster landb")
    by_hand = lb("my-lb")
    assert service_of(ccm) == ("team-b", "shop") == service_of(described)
    assert service_of(by_hand) is None

    assert not may_publish_on(set(), B_GRAB, A_SITE)(ccm)  # team-a owns the name: team-b's LB refused
    assert may_publish_on(set(), B_GRAB, None)(ccm)
    assert may_publish_on(set(), "service/team-b/shop", "service/team-b/other")(described)
    assert not may_publish_on(set(), A_SITE, None)(by_hand)
    assert may_publish_on({"my-lb"}, A_SITE, None)(by_hand)
    assert may_publish_on({"lb-1"}, A_SITE, None)(by_hand)
    assert may_publish_on(set(), None, None)(by_hand)  # the operator's own source


# -- properties --------------------------------------------------------------------------------------

resources = st.sampled_from(
    [
        "ingress/team-a/site",
        "ingress/team-a/api",
        "ingress/team-b/grab",
        "service/team-b/shop",
        "ingress/team-c/x",
        "",
    ]
)
names = st.sampled_from([f"n{i}" for i in range(40)])


@given(
    asks=st.dictionaries(resources, st.lists(names, max_size=40)),
    owned=st.dictionaries(names, resources),
    per_resource=st.integers(1, 30),
    per_namespace=st.integers(1, 60),
)
def test_after_the_caps_every_resource_and_namespace_fits_and_only_the_largest_lost(
    asks: dict[str, list[str]], owned: dict[str, str], per_resource: int, per_namespace: int
) -> None:
    excesses = {
        e.resource: e for e in over_caps(asks, owned, per_resource=per_resource, per_namespace=per_namespace)
    }
    kept = {r: set(n) - set(excesses[r].dropped if r in excesses else ()) for r, n in asks.items()}
    assert "" not in excesses
    by_namespace: dict[str, int] = {}
    for resource, names_kept in kept.items():
        if resource:
            assert len(names_kept) <= per_resource
            by_namespace[resource.split("/")[1]] = by_namespace.get(resource.split("/")[1], 0) + len(
                names_kept
            )
        # owned names are kept before any other
        lost_owned = {n for n in set(asks[resource]) - names_kept if owned.get(n) == resource}
        assert not lost_owned or all(owned.get(n) == resource for n in names_kept)
    assert all(count <= per_namespace for count in by_namespace.values())
    for resource, excess in excesses.items():
        namespace = resource.split("/")[1]
        if excess.reason == "namespace_cap":
            # nothing else in its namespace was left with more than this one
            peers = [r for r in kept if r and r.split("/")[1] == namespace]
            assert by_namespace[namespace] == per_namespace
            assert all(len(kept[r]) <= len(kept[resource]) + 1 for r in peers)


@given(
    st.lists(
        st.tuples(resources, st.lists(st.sampled_from(["10.0.0.1", "10.0.0.2", VIP_B]), max_size=3)),
        min_size=1,
        max_size=5,
        unique_by=lambda t: t[0],
    ),
    st.none() | resources,
    st.randoms(use_true_random=False),
)
def test_who_keeps_a_name_never_depends_on_the_order_of_the_askers(
    askers: list[tuple[str, list[str]]], owner: str | None, random: st.SearchStrategy[object]
) -> None:
    candidates = [asking(resource or None, *targets) for resource, targets in askers]
    shuffled = list(candidates)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    kept = candidates[chosen_asker(candidates, owner)]
    assert shuffled[chosen_asker(shuffled, owner)] == kept
    if owner and owner in {e.label("resource") for e in candidates}:
        assert kept.label("resource") == owner
