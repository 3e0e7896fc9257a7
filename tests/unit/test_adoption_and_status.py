"""The pure rules behind ``status`` and ``adopt``: what needs a human, which names can be handed to
external-dns as they are, and the exact claim external-dns' txt registry writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.backends import Node, Server
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import slot_key
from landb_webhook.landb.plan import plan_changes
from landb_webhook.provider.ownership.adopt import adoptable, plan_adoption
from landb_webhook.provider.read.departed import Remembered
from landb_webhook.provider.read.health import HealthPolicy, Placement
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.read.txt_registry import (
    InvalidOwnerId,
    claim_record,
    owned_name,
    owner_of,
    txt_record_name,
    validate_owner_id,
)
from landb_webhook.provider.status.analysis import StatusAnalysis, analyse
from landb_webhook.provider.status.problems import count_needing_attention, names_to_judge

DOMAIN = "cern.ch"
POLICY = HealthPolicy(grace_seconds=300.0, cordoned_carry=True)
"""How every analysis here judges the nodes: 5 minutes of grace, a cordoned node still carries."""


def inventory(
    metadata: Mapping[str, Mapping[str, str]], *, workers: tuple[str, ...] = (), orphans: tuple[str, ...] = ()
) -> Inventory:
    """Nodes named like their servers; ``workers`` are not ingress nodes, ``orphans`` have no server."""
    names = [*metadata, *orphans]
    nodes = tuple(
        Node(name, f"id-{name}" if name in metadata else None, (f"10.0.0.{i}",), name not in workers)
        for i, name in enumerate(names, 1)
    )
    servers = {name: Server(f"id-{name}", name, dict(values)) for name, values in metadata.items()}
    return Inventory(nodes=nodes, servers=servers, taken_at=0.0)


# -- the claim -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "suffix", "expected"),
    [
        ("", "", "a-app.cern.ch"),  # external-dns' default: the record type in front
        ("txt-", "", "txt-a-app.cern.ch"),
        ("TXT.", "", "txt.a-app.cern.ch"),  # lower-cased, as external-dns does
        ("%{record_type}-", "", "a-app.cern.ch"),  # the template places the type instead
        ("", "-%{record_type}", "app-a.cern.ch"),
        ("", "-owner", "a-app-owner.cern.ch"),
    ],
)
def test_the_claim_name_is_where_external_dns_looks_for_it(prefix: str, suffix: str, expected: str) -> None:
    assert txt_record_name("app.cern.ch", "A", prefix=prefix, suffix=suffix) == expected


def test_a_prefix_and_a_suffix_together_are_refused_as_external_dns_refuses_them() -> None:
    with pytest.raises(ValueError, match="cannot both be set"):
        txt_record_name("app.cern.ch", "A", prefix="p-", suffix="-s")


def test_the_claim_is_the_txt_registrys_record_for_an_owner_without_resource() -> None:
    claim = claim_record("app.cern.ch", "cluster-a")
    assert claim == Endpoint(
        dns_name="a-app.cern.ch",
        record_type="TXT",
        targets=('"heritage=external-dns,external-dns/owner=cluster-a"',),
        labels=(("ownedRecord", "app.cern.ch"),),
    )
    assert owned_name(claim) == "app.cern.ch"
    assert owner_of(claim) == "cluster-a"


@pytest.mark.parametrize(
    ("value", "owner"),
    [
        ('"heritage=external-dns,external-dns/owner=a,external-dns/resource=ingress/ns/x"', "a"),
        ("heritage=external-dns,external-dns/owner=b", "b"),  # without the quotes
        ('"heritage=other,external-dns/owner=a"', None),  # another heritage is not external-dns'
        ('"external-dns/owner=a"', None),  # no heritage: not a claim
        ('"heritage=external-dns"', None),  # a claim without owner
        ('"Zm9vYmFyCg=="', None),  # encrypted with --txt-encrypt-aes-key
    ],
)
def test_the_owner_is_read_as_external_dns_reads_it(value: str, owner: str | None) -> None:
    assert owner_of(Endpoint("a-x.cern.ch", "TXT", (value,))) == owner


@pytest.mark.parametrize("owner", ["", "a,b", 'a"b', "a b", "a\tb"])
def test_an_owner_id_a_claim_cannot_hold_is_refused(owner: str) -> None:
    with pytest.raises(InvalidOwnerId):
        validate_owner_id(owner)


# -- the analysis ------------------------------------------------------------------------------------------


def test_a_tidy_cluster_needs_nobody() -> None:
    status = analyse(
        inventory({"n0": {"landb-alias": "app--load-0-"}, "n1": {"landb-alias": "app--load-1-"}}),
        [claim_record("app.cern.ch", "c")],
        domain=DOMAIN,
        health=POLICY,
        quota=128,
    )
    assert status.attention() == []
    (app,) = status.names
    assert (app.dns_name, app.claimed, app.owners, app.problems) == ("app.cern.ch", True, ("c",), ())
    assert [(h.node, h.index, h.key) for h in app.holdings] == [
        ("n0", 0, "landb-alias"),
        ("n1", 1, "landb-alias"),
    ]


def test_no_ingress_node_at_all_needs_a_human() -> None:
    status = analyse(inventory({"n0": {}}, workers=("n0",)), [], domain=DOMAIN, health=POLICY)
    assert status.attention() == ["no node matches the ingress selector: no alias can be placed"]


def test_the_key_quota_is_reported_above_eighty_percent_only() -> None:
    at_eighty = {f"k{i}": "v" for i in range(8)}
    above = {f"k{i}": "v" for i in range(9)}
    status = analyse(inventory({"n0": at_eighty, "n1": above}), [], domain=DOMAIN, health=POLICY, quota=10)
    assert [(u.node, u.keys, u.quota) for u in status.servers_near_quota] == [("n1", 9, 10)]
    assert (
        analyse(inventory({"n1": above}), [], domain=DOMAIN, health=POLICY).servers_near_quota == ()
    )  # quota not read


def test_every_kind_of_trouble_is_a_problem_of_its_name() -> None:
    status = analyse(
        inventory(
            {
                "n0": {"landb-alias": "dup--load-0-,twice--load-1-,twice--load-2-"},
                "n1": {"landb-alias": "dup--load-0-", "landb-alias1": "eth0.cern.ch:pinned--load-5-"},
                "w0": {"landb-alias": "stray--load-0-"},
            },
            workers=("w0",),
            orphans=("ghost",),
        ),
        [],
        domain=DOMAIN,
        health=POLICY,
    )
    problems = {name.label: name.problems for name in status.names}
    assert problems["pinned"] == ()  # a frozen form alone is information, not trouble
    assert problems["dup"] == ("N=0 is held by 2 nodes (n0, n1): LanDB needs one N per carrier",)
    assert problems["twice"] == ("node n0 holds it 2 times (N=1, 2)",)
    assert problems["stray"] == ("carried by w0, which is not an ingress node (N=0 in landb-alias)",)
    assert [(d.label, d.index, d.nodes) for d in status.duplicate_indices] == [("dup", 0, ("n0", "n1"))]
    assert [(h.label, h.node) for h in status.non_ingress_holdings] == [("stray", "w0")]
    assert [(f.node, f.key) for f in status.frozen_forms] == [("n1", "landb-alias1")]
    assert status.nodes_without_server == ("ghost",)
    assert len(status.attention()) == 4


def test_a_carrier_that_is_not_ready_or_is_being_deleted_needs_a_human_an_idle_one_does_not() -> None:
    found = inventory(
        {"n0": {"landb-alias": "app--load-0-"}, "n1": {"landb-alias": "app--load-1-"}, "n2": {}}
    )
    sick = {"n0": {"ready": False}, "n1": {"deleting": True, "unschedulable": True}, "n2": {"ready": False}}
    found = replace(found, nodes=tuple(replace(node, **sick[node.name]) for node in found.nodes))

    status = analyse(found, [], domain=DOMAIN, health=POLICY)

    assert status.attention() == [
        "node n0 is NotReady and still carries app: LanDB sends it a share of their requests",
        "node n1 is Ready,deleting,cordoned and still carries app: LanDB sends it a share of their requests",
    ]
    assert [h.ready for h in status.names[0].holdings] == [False, False]


# -- adoption ----------------------------------------------------------------------------------------------


def test_adoption_claims_clean_names_and_says_where_the_next_loop_adds_them() -> None:
    status = analyse(
        inventory(
            {"n0": {"landb-alias": "app--load-0-,web--load-3-"}, "n1": {"landb-alias": "app--load-1-"}}
        ),
        [],
        domain=DOMAIN,
        health=POLICY,
    )
    adoption = plan_adoption(status, owner_id="c", domain=DOMAIN)
    assert [(d.label, d.reason) for d in adoption.claims] == [
        ("app", ""),
        ("web", "the next loop adds it to n1"),
    ]
    assert adoption.records() == [claim_record("app.cern.ch", "c"), claim_record("web.cern.ch", "c")]
    assert adoption.left == ()


def test_adoption_leaves_claimed_missing_and_troubled_names_with_their_reason() -> None:
    status = analyse(
        inventory(
            {
                "n0": {"landb-alias": "mine--load-0-,theirs--load-0-,dup--load-0-"},
                "n1": {"landb-alias": "dup--load-0-"},
            }
        ),
        [claim_record("mine.cern.ch", "c"), claim_record("theirs.cern.ch", "other")],
        domain=DOMAIN,
        health=POLICY,
    )
    adoption = plan_adoption(status, owner_id="c", labels={"mine", "theirs", "dup", "absent"}, domain=DOMAIN)
    assert adoption.claims == ()
    reasons = {d.label: d.reason for d in adoption.left}
    assert reasons["mine"] == "already claimed by this owner"
    assert reasons["theirs"] == "already claimed by other"
    assert reasons["absent"] == "no node carries it"
    assert reasons["dup"].startswith("N=0 is held by 2 nodes (n0, n1)")
    assert not any(adoptable(name) for name in status.names)


def test_a_plain_alias_is_shown_and_a_name_held_both_ways_needs_a_human_neither_is_adopted() -> None:
    status = analyse(
        inventory({"n0": {"landb-alias": "mixed--load-0-,cname"}, "n1": {"landb-alias": "mixed"}}),
        [],
        domain=DOMAIN,
        health=POLICY,
    )
    cname, mixed = status.names
    assert (cname.label, cname.holdings, cname.plain_nodes, cname.problems) == ("cname", (), ("n0",), ())
    assert mixed.plain_nodes == ("n1",)
    assert mixed.problems == (
        "also held as a plain (CNAME) alias by n1: LanDB would publish a CNAME and A records for one name",
    )
    adoption = plan_adoption(status, owner_id="c", domain=DOMAIN)
    assert adoption.claims == ()
    reasons = {d.label: d.reason for d in adoption.left}
    assert reasons["cname"] == "only a plain (CNAME) alias (n0): no A record to adopt"
    assert reasons["mixed"].startswith("also held as a plain (CNAME) alias by n1")


def test_adoption_under_a_selector_that_matches_no_node_names_the_selector_not_the_carriers() -> None:
    """LANDB_INGRESS_SELECTOR=role=ingres: every carrier looks like a non-ingress node, but fixing the
    carriers by hand would be the wrong repair."""
    status = analyse(
        inventory(
            {
                "n0": {"landb-alias": "app--load-0-,mine--load-0-"},
                "n1": {"landb-alias": "app--load-1-"},
                "n2": {},
            },
            workers=("n0", "n1", "n2"),
        ),
        [claim_record("mine.cern.ch", "c")],
        domain=DOMAIN,
        health=POLICY,
    )

    adoption = plan_adoption(status, owner_id="c", domain=DOMAIN, ingress_selector="role=ingres")

    assert adoption.claims == ()
    assert {d.label: d.reason for d in adoption.left} == {
        "app": "the ingress selector role=ingres matches none of the 3 nodes: fix LANDB_INGRESS_SELECTOR, "
        "then run adopt again",
        "mine": "already claimed by this owner",
    }


def test_adoption_refuses_an_owner_id_a_claim_cannot_hold() -> None:
    with pytest.raises(InvalidOwnerId):
        plan_adoption(analyse(inventory({}), [], domain=DOMAIN, health=POLICY), owner_id="a,b", domain=DOMAIN)


# -- the promise: the loop after adoption neither removes nor renumbers -------------------------------------

LABELS = ("app", "web", "db")
KEYS = ("landb-alias", "landb-alias2", "landb-alias1")  # landb-alias1 is a key the webhook never edits


NOW = 10_000.0
HEALTH = st.sampled_from(
    [
        {},
        {"ready": False, "ready_changed_at": NOW - 30},  # within the grace period
        {"ready": False, "ready_changed_at": NOW - 3_000},  # past it
        {"ready": False},  # since an unknown time: past it
        {"deleting": True, "deleting_since": NOW - 3_000},
        {"controller_ready": False, "controller_changed_at": NOW - 3_000},
        {"unschedulable": True},
    ]
)


@st.composite
def fleets(draw: st.DrawFn) -> Inventory:
    count = draw(st.integers(1, 4))
    metadata: dict[str, dict[str, str]] = {}
    for i in range(count):
        tokens = draw(
            st.lists(st.tuples(st.sampled_from(LABELS), st.integers(0, 4), st.sampled_from(KEYS)), max_size=4)
        )
        values: dict[str, list[str]] = {}
        for label, index, key in tokens:
            values.setdefault(key, []).append(f"{label}--load-{index}-")
        metadata[f"n{i}"] = {key: ",".join(texts) for key, texts in values.items()}
    workers = draw(st.sets(st.sampled_from(sorted(metadata))))
    fleet = inventory(metadata, workers=tuple(sorted(workers)))
    nodes = tuple(replace(node, **draw(HEALTH)) for node in fleet.nodes)
    return replace(fleet, nodes=nodes)


@given(fleets())
def test_the_first_loop_after_adoption_removes_and_renumbers_no_carrier(found: Inventory) -> None:
    adoption = plan_adoption(analyse(found, [], domain=DOMAIN, health=POLICY), owner_id="c", domain=DOMAIN)
    adopted = {decision.label for decision in adoption.claims}

    # What external-dns asks once the names are its own: every adopted name on the nodes the carrier
    # rule places it on, unhealthy ones past their grace period left out.
    placement = Placement(
        ingress=found.ingress_server_ids(),
        eligible=found.eligible_server_ids(found.verdicts(POLICY, NOW)),
        current=found.carriers(),
    )
    wanted = {label: placement.carriers_of(label) for label in adopted}
    plan = plan_changes(found.server_states(), wanted, quota=128)

    removed = [(p.server.node_name, t) for p in plan.servers for t in p.removed if t.label in adopted]
    assert removed == []
    assert [r for r in plan.refusals if r.label in adopted] == []


def test_a_name_on_an_unhealthy_carrier_is_left_with_the_reason() -> None:
    found = inventory({"n0": {"landb-alias": "app--load-0-"}, "n1": {"landb-alias": "app--load-1-"}})
    sick = replace(found.nodes[0], ready=False, ready_changed_at=NOW - 3_000)
    found = replace(found, nodes=(sick, found.nodes[1]))

    adoption = plan_adoption(analyse(found, [], domain=DOMAIN, health=POLICY), owner_id="c", domain=DOMAIN)

    assert adoption.claims == ()
    [left] = adoption.left
    assert left.reason == (
        "carried by an unhealthy node: n0 (not Ready); external-dns would take it off that node once its "
        "grace period ends: adopt it when the node is healthy, or take the alias off it first"
    )


# -- the analysis kept between Records: it costs the change, not the cluster ---------------------------------

PLAIN = st.sampled_from(["", ",app", ",cname"])


@st.composite
def loops(draw: st.DrawFn) -> list[tuple[Inventory, list[Endpoint]]]:
    """Successive reads of one cluster: servers n0..n3 change, come and go, and so do the claims."""
    found = []
    for _ in range(draw(st.integers(1, 4))):
        fleet = draw(fleets())
        plain = {node.name: draw(PLAIN) for node in fleet.nodes}
        servers = {
            name: replace(server, metadata={"landb-alias": "x--load-0-" + plain[name], **server.metadata})
            for name, server in fleet.servers.items()
        }
        owners = draw(st.dictionaries(st.sampled_from(LABELS), st.sampled_from(["c", "d"])))
        claims = [claim_record(f"{label}.{DOMAIN}", owner) for label, owner in sorted(owners.items())]
        found.append((replace(fleet, servers=servers), claims))
    return found


@given(loops())
def test_the_analysis_kept_between_loops_is_the_analysis_made_afresh(
    found: list[tuple[Inventory, list[Endpoint]]],
) -> None:
    kept = StatusAnalysis(domain=DOMAIN, health=POLICY)
    for fleet, claims in found:
        assert kept.analyse(fleet, claims, quota=4) == analyse(
            fleet, claims, domain=DOMAIN, quota=4, health=POLICY
        )


def _slots(n: int, names: list[str], per_value: int = 5) -> dict[str, str]:
    """Server n's tokens of ``names``, ``per_value`` to a slot value, as the planner packs them."""
    tokens = [f"{label}--load-{n}-" for label in names]
    return {
        slot_key(k + 1): ",".join(tokens[i : i + per_value])
        for k, i in enumerate(range(0, len(tokens), per_value))
    }


def test_after_one_servers_write_only_the_value_it_changed_and_its_names_are_analysed_again() -> None:
    """Records analyses the cluster after each write; at 500 servers x 1,000 names analysing every token
    again cost ~6 s of CPU for one server's change."""
    names = [f"app{i}" for i in range(20)]
    metadata = {f"n{n}": _slots(n, names) for n in range(10)}  # 4 values a server
    claims = [claim_record(f"{label}.{DOMAIN}", "c") for label in names]
    kept = StatusAnalysis(domain=DOMAIN, health=POLICY)
    kept.analyse(inventory(metadata), claims)
    assert (kept.values_analysed, kept.names_analysed) == (40, 20)

    kept.analyse(inventory(metadata), list(claims))  # read again, nothing changed
    assert (kept.values_analysed, kept.names_analysed) == (40, 20)

    written = {**metadata, "n3": {**metadata["n3"], "landb-alias2": "app5--load-3-,new--load-3-"}}
    status = kept.analyse(inventory(written), claims)
    # n3's second value; the names whose holdings it changed: app6..app9 let go, new (app5 is as it was)
    assert (kept.values_analysed, kept.names_analysed) == (41, 20 + 5)
    assert status == analyse(inventory(written), claims, domain=DOMAIN, health=POLICY)


def test_a_value_written_on_every_server_costs_those_values_and_their_names_not_every_holding() -> None:
    """The -1 alias event at 500 x 1,000 writes one value on each of the 500 servers: rebuilding each
    server's thousand holdings took ~8 s of CPU in one Records."""
    names = [f"app{i}" for i in range(20)]
    metadata = {f"n{n}": _slots(n, names) for n in range(10)}
    claims = [claim_record(f"{label}.{DOMAIN}", "c") for label in names]
    kept = StatusAnalysis(domain=DOMAIN, health=POLICY)
    kept.analyse(inventory(metadata), claims)

    kept_in_third = ["app10", "app11", "app13", "app14"]  # app12 is let go
    without = {
        f"n{n}": {
            **metadata[f"n{n}"],
            "landb-alias3": ",".join(f"{label}--load-{n}-" for label in kept_in_third),
        }
        for n in range(10)
    }
    smaller = [c for c in claims if c.dns_name != f"app12.{DOMAIN}"]
    status = kept.analyse(inventory(without), smaller)

    # a value a server; of its names only app12's holdings changed, and it has none left
    assert (kept.values_analysed, kept.names_analysed) == (40 + 10, 20)
    assert status.name("app12") is None
    assert status == analyse(inventory(without), smaller, domain=DOMAIN, health=POLICY)


def test_a_change_of_claims_analyses_no_holdings_again() -> None:
    names = [f"app{i}" for i in range(20)]
    metadata = {f"n{n}": _slots(n, names) for n in range(10)}
    claims = [claim_record(f"{label}.{DOMAIN}", "c") for label in names]
    kept = StatusAnalysis(domain=DOMAIN, health=POLICY)
    kept.analyse(inventory(metadata), claims)

    other = [claim_record(f"app3.{DOMAIN}", "d"), *claims[4:]]  # app3 changes hands, app0..app2 let go
    status = kept.analyse(inventory(metadata), other)

    assert (kept.values_analysed, kept.names_analysed) == (40, 20)
    assert status == analyse(inventory(metadata), other, domain=DOMAIN, health=POLICY)
    owners = {name.label: name.owners for name in status.names}
    assert (owners["app0"], owners["app3"], owners["app4"]) == ((), ("d",), ("c",))


@given(loops())
def test_the_count_records_reports_is_the_names_the_analysis_finds_a_problem_with(
    found: list[tuple[Inventory, list[Endpoint]]],
) -> None:
    """Both ask the same rules (provider/status/problems.py); what is checked is the gauge's fast path: no
    name it calls certainly fine has a problem, and its holders read from the holder index are the
    Holdings'."""
    for fleet, claims in found:
        with_problems = {
            name.label for name in analyse(fleet, claims, domain=DOMAIN, health=POLICY).names if name.problems
        }
        assert with_problems <= {label for label, _, _ in names_to_judge(fleet, domain=DOMAIN)}
        flagged = len(with_problems)
        assert count_needing_attention(fleet, domain=DOMAIN) == flagged


def test_two_nodes_on_one_server_are_counted_as_two_holders() -> None:
    found = inventory({"n0": {"landb-alias": "app--load-0-"}, "n1": {"landb-alias": "web--load-1-"}})
    twin = replace(found.nodes[1], name="n0-twin")
    found = replace(
        found, nodes=(*found.nodes, twin), servers={**found.servers, "n0-twin": found.servers["n1"]}
    )

    [web] = [name for name in analyse(found, [], domain=DOMAIN, health=POLICY).names if name.problems]
    assert web.problems == ("N=1 is held by 2 nodes (n0-twin, n1): LanDB needs one N per carrier",)
    assert count_needing_attention(found, domain=DOMAIN) == 1


def test_a_departed_server_holding_a_name_is_not_one_of_its_holders() -> None:
    """The server of a node that left still holds its tokens until the next apply moves them: ``status``
    lists it apart, and the names it holds are judged by the nodes' holdings alone, as the count is."""
    found = inventory({"n0": {"landb-alias": "app--load-0-"}, "n1": {"landb-alias": "app--load-1-"}})
    gone = Server("id-n2", "n2", {"landb-alias": "app--load-0-,web--load-0-,web--load-1-"})
    found = replace(found, departed=((Remembered("id-n2", "n2", ("10.0.0.9",)), gone),))

    status = analyse(found, [], domain=DOMAIN, health=POLICY)
    assert [(name.label, name.problems) for name in status.names] == [("app", ())]
    assert [d.node for d in status.departed_servers] == ["n2"]
    assert count_needing_attention(found, domain=DOMAIN) == 0
