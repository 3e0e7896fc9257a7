"""The planner on named scenarios an operator would recognise (landb/plan.py).

Each expected write follows from the rules in the module docstrings, worked out by hand; the
properties in tests/property check the same rules on generated fleets.
"""

from __future__ import annotations

from collections.abc import Mapping

from landb_webhook.landb.plan import (
    MetadataWrite,
    Plan,
    ServerState,
    carriers,
    frozen_carriers,
    plain_aliases,
    plan_changes,
)

PROJECT_KEYS = {"landb-mainuser": "ingress-admins", "landb-responsible": "jdoe", "cern-services": "web"}


def server(server_id: str, name: str, **metadata: str) -> ServerState:
    """A server whose keyword arguments are metadata keys (``landb_alias2`` -> ``landb-alias2``)."""
    keys = {key.replace("_", "-"): value for key, value in metadata.items()}
    return ServerState(server_id, name, name, {**PROJECT_KEYS, **keys})


def apply(
    servers: list[ServerState], plan: Plan, phases: tuple[str, ...] = ("make_write", "break_write")
) -> list[ServerState]:
    """Every make write, then every break write, with Nova's merge POST and DELETE semantics."""
    state = {s.server_id: dict(s.metadata) for s in servers}
    for phase in phases:
        for server_plan in plan.servers:
            write: MetadataWrite = getattr(server_plan, phase)
            metadata = state[server_plan.server.server_id]
            metadata.update(write.upserts)
            for key in write.deletes:
                del metadata[key]
    return [ServerState(s.server_id, s.server_name, s.node_name, state[s.server_id]) for s in servers]


def writes(
    plan: Plan,
) -> dict[str, tuple[Mapping[str, str], tuple[str, ...], Mapping[str, str], tuple[str, ...]]]:
    """server id -> (make upserts, make deletes, break upserts, break deletes)."""
    return {
        p.server.server_id: (
            dict(p.make_write.upserts),
            p.make_write.deletes,
            dict(p.break_write.upserts),
            p.break_write.deletes,
        )
        for p in plan.servers
    }


def test_new_ingress_node_gets_smallest_free_index_and_nothing_else_changes() -> None:
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-"),
        server("b", "node-2", landb_alias="app--load-1-"),
        server("c", "node-3"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b", "c"})})
    assert writes(plan) == {"c": ({"landb-alias": "app--load-2-"}, (), {}, ())}
    assert plan.refusals == ()


def test_new_node_fills_the_gap_left_by_a_removed_one() -> None:
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-"),
        server("c", "node-3", landb_alias="app--load-2-"),
        server("d", "node-4"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"a", "c", "d"})})
    assert writes(plan) == {"d": ({"landb-alias": "app--load-1-"}, (), {}, ())}


def test_node_losing_label_loses_aliases_others_untouched() -> None:
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-,web--load-0-"),
        server("b", "node-2", landb_alias="app--load-1-", landb_alias2="web--load-1-"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"a"}), "web": frozenset({"a", "b"})})
    assert writes(plan) == {"b": ({}, (), {}, ("landb-alias",))}
    after = apply(fleet, plan)
    assert after[1].metadata == {**PROJECT_KEYS, "landb-alias2": "web--load-1-"}


def test_withdrawing_a_label_keeps_plain_aliases_and_other_labels_in_place() -> None:
    fleet = [server("a", "node-1", landb_alias="legacy-cname,app--load-0-,web--load-3-")]
    plan = plan_changes(fleet, {"app": frozenset()})
    assert writes(plan) == {"a": ({}, (), {"landb-alias": "legacy-cname,web--load-3-"}, ())}


def test_hand_set_duplicate_index_is_repaired_make_before_break() -> None:
    # Someone copied node-1's alias onto node-2 by hand: both publish app--load-0-.
    fleet = [
        server("b", "node-2", landb_alias="app--load-0-"),
        server("a", "node-1", landb_alias="app--load-0-"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b"})})
    # node-1 comes first in name order and keeps 0; node-2 takes 1 before it gives 0 up.
    assert writes(plan) == {
        "b": ({"landb-alias": "app--load-0-,app--load-1-"}, (), {"landb-alias": "app--load-1-"}, ())
    }
    assert carriers(apply(fleet, plan, phases=("make_write",)))["app"] == {"a", "b"}
    assert carriers(apply(fleet, plan))["app"] == {"a", "b"}


def test_a_duplicate_is_repaired_on_the_server_holding_two_indices_with_one_write() -> None:
    # node-1 sorts first, but it holds 5 as well: it keeps 5 and drops 0; node-2, whose only N is 0,
    # is not renumbered. One break write in all, instead of a new N for node-2 and two servers written.
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-,app--load-5-"),
        server("b", "node-2", landb_alias="app--load-0-"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b"})})
    assert writes(plan) == {"a": ({}, (), {"landb-alias": "app--load-5-"}, ())}
    after = {s.server_id: s for s in apply(fleet, plan)}
    assert after["a"].metadata["landb-alias"] == "app--load-5-"
    assert after["b"].metadata["landb-alias"] == "app--load-0-"


def test_a_shared_index_goes_to_the_first_server_by_name_then_by_id() -> None:
    fleet = [
        server("id-9", "node-a", landb_alias="app--load-0-"),
        server("id-1", "node-b", landb_alias="app--load-0-"),
        server("id-5", "node-a", landb_alias="app--load-0-"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"id-9", "id-1", "id-5"})})
    added = {p.server.server_id: [t.render() for t in p.added] for p in plan.servers}
    assert added == {"id-9": ["app--load-1-"], "id-1": ["app--load-2-"]}


def test_moving_an_alias_to_another_node_adds_before_it_removes() -> None:
    fleet = [server("a", "node-1", landb_alias="app--load-0-"), server("b", "node-2")]
    plan = plan_changes(fleet, {"app": frozenset({"b"})})
    # 0 is still held by node-1 while the move is in flight, so node-2 must not take it.
    assert writes(plan) == {
        "a": ({}, (), {}, ("landb-alias",)),
        "b": ({"landb-alias": "app--load-1-"}, (), {}, ()),
    }


def test_per_interface_value_is_never_rewritten() -> None:
    per_interface = "host.cern.ch:legacy--load-0-,legacy;host-eth1.cern.ch:other--load-2-"
    fleet = [server("a", "node-1", landb_alias=per_interface)]
    plan = plan_changes(fleet, {"app": frozenset({"a"}), "legacy": frozenset({"a"})})
    # landb-alias is taken by a form we never edit, so the new token opens landb-alias2.
    assert writes(plan) == {"a": ({"landb-alias2": "app--load-0-"}, (), {}, ())}
    after = apply(fleet, plan)
    assert after[0].metadata["landb-alias"] == per_interface
    assert carriers(after) == {"legacy": {"a"}, "other": {"a"}, "app": {"a"}}


def test_alias_in_a_frozen_key_of_an_unwanted_server_is_refused_and_left_alone() -> None:
    fleet = [
        server("a", "node-1", landb_alias1="app--load-0-"),
        server("b", "node-2", landb_alias="app--load-1-"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"b"})})
    assert plan.servers == ()
    assert [(r.label, r.server.server_id) for r in plan.refusals] == [("app", "a")]
    assert "never edit" in plan.refusals[0].reason


def test_odd_case_token_is_kept_verbatim() -> None:
    fleet = [server("a", "node-1", landb_alias="App--LOAD-3-"), server("b", "node-2")]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b"})})
    assert writes(plan) == {"b": ({"landb-alias": "app--load-0-"}, (), {}, ())}


def test_floor_applies_to_new_tokens_only() -> None:
    fleet = [server("a", "node-1", landb_alias="app--load-0-"), server("b", "node-2")]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b"})}, floor=10)
    assert writes(plan) == {"b": ({"landb-alias": "app--load-10-"}, (), {}, ())}


def test_full_value_spills_into_the_next_key() -> None:
    fleet = [server("a", "node-1", landb_alias="web--load-0-,db--load-0-")]
    plan = plan_changes(fleet, {"app": frozenset({"a"})}, max_length=25)
    assert writes(plan) == {"a": ({"landb-alias2": "app--load-0-"}, (), {}, ())}


def test_a_new_key_over_quota_is_refused_and_the_old_carrier_keeps_the_alias() -> None:
    full = {f"user-{i}": "x" for i in range(3)}
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-"),
        ServerState("b", "node-2", "node-2", {**full, "landb-alias": "web--load-0-"}),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"b"})}, max_length=20, quota=4)
    assert plan.servers == ()
    assert [(r.label, r.server.server_id) for r in plan.refusals] == [("app", "b")]
    assert "quota is 4" in plan.refusals[0].reason


def test_over_its_quota_a_server_gets_the_additions_that_fit_and_a_refusal_for_each_other() -> None:
    """One key left, three aliases that need two: the first two (in order) fill the key, the third is
    refused, rather than the three refused for want of room for the last."""
    full = {f"user-{i}": "x" for i in range(3)}
    fleet = [ServerState("a", "node-1", "node-1", full)]
    wanted = {label: frozenset({"a"}) for label in ("app", "db", "web")}
    plan = plan_changes(fleet, wanted, max_length=25, quota=4)
    assert writes(plan) == {"a": ({"landb-alias": "app--load-0-,db--load-0-"}, (), {}, ())}
    assert [(r.label, r.server.server_id) for r in plan.refusals] == [("web", "a")]
    assert "quota is 4" in plan.refusals[0].reason


def test_a_token_longer_than_a_value_is_refused() -> None:
    fleet = [server("a", "node-1")]
    plan = plan_changes(fleet, {"app": frozenset({"a"})}, max_length=10)
    assert plan.servers == ()
    assert [(r.label, r.server.server_id) for r in plan.refusals] == [("app", "a")]


def test_converged_cluster_plans_nothing() -> None:
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-,web--load-4-"),
        server("b", "node-2", landb_alias="App--Load-7-", landb_alias2="web--load-1-"),
    ]
    assert plan_changes(fleet, {"app": frozenset({"a", "b"}), "web": frozenset({"a", "b"})}) == Plan()


def test_foreign_keys_are_never_written_even_when_they_look_like_aliases() -> None:
    fleet = [
        ServerState("a", "node-1", "node-1", {"Landb-Alias": "app--load-0-", "owner": "app--load-1-"}),
    ]
    plan = plan_changes(fleet, {"app": frozenset()})
    assert plan == Plan()


def test_two_spellings_of_the_kept_token_collapse_to_the_first_one() -> None:
    fleet = [server("a", "node-1", landb_alias="App--Load-0-", landb_alias2="app--load-0-,web--load-0-")]
    plan = plan_changes(fleet, {"app": frozenset({"a"})})
    assert writes(plan) == {"a": ({}, (), {"landb-alias2": "web--load-0-"}, ())}


def test_an_index_held_in_a_form_we_never_edit_wins_over_a_token_of_ours() -> None:
    """node-1 sorts first, but node-2's 0 sits in a per-interface value nobody may rewrite: node-1 moves."""
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-"),
        server("b", "node-2", landb_alias2="node-2.cern.ch:app--load-0-"),
    ]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b"})})
    assert writes(plan) == {
        "a": ({"landb-alias": "app--load-0-,app--load-1-"}, (), {"landb-alias": "app--load-1-"}, ())
    }
    assert carriers(apply(fleet, plan)) == {"app": {"a", "b"}}


def test_a_name_held_as_a_plain_alias_gets_no_load_token_anywhere() -> None:
    """``app`` is a CNAME to node-1: ``app--load-N-`` anywhere would make one name a CNAME and A records."""
    fleet = [server("a", "node-1", landb_alias="app,web--load-0-"), server("b", "node-2")]
    plan = plan_changes(fleet, {"app": frozenset({"a", "b"}), "web": frozenset({"a", "b"})})
    assert writes(plan) == {"b": ({"landb-alias": "web--load-1-"}, (), {}, ())}
    assert sorted((r.label, r.server.server_id, r.kind) for r in plan.refusals) == [
        ("app", "a", "plain_alias"),
        ("app", "b", "plain_alias"),
    ]
    assert "plain (CNAME) alias app is set on node-1" in plan.refusals[0].reason


def test_a_plain_alias_blocks_the_move_of_its_load_tokens_but_not_their_withdrawal() -> None:
    # A hand edit left both forms: app on node-2 as a CNAME, app--load-0- on node-1 from us.
    fleet = [
        server("a", "node-1", landb_alias="app--load-0-"),
        server("b", "node-2", landb_alias2="eth0.cern.ch:app"),
        server("c", "node-3"),
    ]
    moving = plan_changes(fleet, {"app": frozenset({"c"})})
    assert writes(moving) == {}, "the new carrier is refused, so the old one keeps its token"
    assert [(r.server.server_id, r.kind) for r in moving.refusals] == [("c", "plain_alias")]
    withdrawn = plan_changes(fleet, {"app": frozenset()})
    assert writes(withdrawn) == {"a": ({}, (), {}, ("landb-alias",))}
    assert withdrawn.refusals == ()


def test_plain_aliases_point_at_the_server_or_at_the_interface_a_value_names() -> None:
    fleet = [
        server("a", "Node-1", landb_alias="App , web--load-0-", landb_alias1="legacy"),
        server("b", "node-2", landb_alias="node-2-eth1.cern.ch:app,other--load-1-;node-2.cern.ch:x_y"),
    ]
    assert plain_aliases(fleet, "cern.ch") == {
        "app": {"node-1.cern.ch", "node-2-eth1.cern.ch"},
        "legacy": {"node-1.cern.ch"},
    }
    assert frozen_carriers(fleet) == {"other": {"b"}}


def test_the_reserved_keys_are_never_taken_by_an_addition_and_the_refusal_says_so() -> None:
    """Quota 8, four kept free: a server holding three keys may open one more, no second."""
    full = {f"user-{i}": "x" for i in range(3)}
    fleet = [ServerState("a", "node-1", "node-1", full)]
    wanted = {label: frozenset({"a"}) for label in ("app", "db", "web")}
    plan = plan_changes(fleet, wanted, max_length=25, quota=8, reserved=4)
    assert writes(plan) == {"a": ({"landb-alias": "app--load-0-,db--load-0-"}, (), {}, ())}
    assert [(r.label, r.server.server_id) for r in plan.refusals] == [("web", "a")]
    assert plan.refusals[0].reason == (
        "no room left in its metadata keys, the server quota is 8, 4 of them kept free for others"
    )
    assert not plan_changes(fleet, wanted, max_length=25, quota=8, reserved=0).refusals


def test_a_server_already_in_the_reserve_takes_no_addition_but_loses_its_removals() -> None:
    full = {f"user-{i}": "x" for i in range(5)}
    fleet = [ServerState("a", "node-1", "node-1", {**full, "landb-alias": "old--load-0-"})]
    plan = plan_changes(fleet, {"app": frozenset({"a"}), "old": frozenset()}, quota=8, reserved=4)
    assert [r.reason for r in plan.refusals] == [
        "holds 6 metadata keys, the server quota is 8, 4 of them kept free for others"
    ]
    [server_plan] = plan.servers
    assert [t.label for t in server_plan.removed] == ["old"]
