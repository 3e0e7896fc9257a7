"""Properties of the per-server plan (landb/plan.py: plan_changes), checked by applying it.

A plan is applied the way the executor and Nova do it (landb_replay): every make write (a merge POST of
its upserts, then a DELETE per key), then every break write. The design invariants, in the domain's
terms: convergence, zero churn, make before break, nothing foreign lost, minimal writes, sticky
indices, unique indices, quota, floor.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import example, given
from hypothesis import strategies as st
from landb_replay import (
    all_tokens,
    apply_plan,
    apply_write,
    blocked_by_a_plain_alias,
    by_id,
    editable_texts,
    frozen_holders,
    is_token_of,
    non_alias_items,
    plain_holders,
    refusals_of,
    slot_texts,
)
from landb_strategies import GENEROUS_QUOTA, Scenario, scenarios

from landb_webhook.landb.metadata import read_aliases, slot_number
from landb_webhook.landb.plan import Plan, Refusal, ServerState, carriers, metadata_after, plan_changes


def is_frozen_refusal(refusal: Refusal) -> bool:
    """Refused because the label sits in a key or form we never edit (not for quota or length)."""
    return refusal.kind == "frozen" and "never edit" in refusal.reason


def addition_refusals(plan: Plan) -> set[tuple[str, str]]:
    """Additions refused: for capacity (the whole server's) or for a plain alias (that label's)."""
    return refusals_of(plan, "capacity", "plain_alias")


# -- convergence and zero churn ------------------------------------------------------------


@given(scenarios())
def test_after_applying_exactly_the_wanted_servers_carry_each_label(scenario: Scenario) -> None:
    """Besides the wanted servers, only servers holding the label in a form we never edit carry it --
    unless the name is a plain (CNAME) alias somewhere and a carrier had to be added: then nothing moves."""
    plan = scenario.plan()
    before, found = carriers(scenario.servers), carriers(apply_plan(scenario.servers, plan))
    blocked = blocked_by_a_plain_alias(plan)
    for label, wanted in scenario.wanted.items():
        expected = (wanted & scenario.visible_ids()) | frozen_holders(scenario.servers, label)
        if label in blocked:
            expected = before.get(label, set())
        assert found.get(label, set()) == expected, label


@given(scenarios())
def test_refusals_are_the_unwanted_frozen_holders_and_the_new_carriers_of_a_plain_alias(
    scenario: Scenario,
) -> None:
    plan = scenario.plan()
    frozen = {
        (label, server_id)
        for label, wanted in scenario.wanted.items()
        for server_id in frozen_holders(scenario.servers, label) - wanted
    }
    assert refusals_of(plan, "frozen") == frozen
    assert all(is_frozen_refusal(r) for r in plan.refusals if r.kind == "frozen")
    assert refusals_of(plan, "capacity") == set(), "the quota is generous and every token fits a value"
    before = carriers(scenario.servers)
    for label, wanted in scenario.wanted.items():
        refused = {sid for name, sid in refusals_of(plan, "plain_alias") if name == label}
        if not plain_holders(scenario.servers, label):
            assert refused == set()
            continue
        newcomers = (wanted & scenario.visible_ids()) - before.get(label, set())
        assert newcomers <= refused <= wanted, label


@given(scenarios(quota="any"))
def test_no_load_token_is_ever_added_for_a_name_held_as_a_plain_alias(scenario: Scenario) -> None:
    """LanDB cannot publish one name as a CNAME and as A records: the plain alias stays, alone."""
    plain = {label for label in scenario.wanted if plain_holders(scenario.servers, label)}
    for server_plan in scenario.plan().servers:
        assert not {t.label for t in server_plan.added} & plain


@given(scenarios())
def test_a_converged_fleet_plans_nothing(scenario: Scenario) -> None:
    after = apply_plan(scenario.servers, scenario.plan())
    again = scenario.plan(after)
    assert again.servers == ()


@given(scenarios())
def test_each_wanted_server_ends_with_one_spelling_of_one_token_per_label_in_its_slots(
    scenario: Scenario,
) -> None:
    """Hand-edited extras (another N, another spelling of the same token) go; unwanted servers keep none
    (unless the name is blocked by a plain alias: then nothing moves)."""
    plan = scenario.plan()
    after = by_id(apply_plan(scenario.servers, plan))
    for label, wanted in scenario.wanted.items():
        if label in blocked_by_a_plain_alias(plan):
            continue
        for server_id, server in after.items():
            spellings = set(editable_texts(server, label))
            assert len(spellings) <= (1 if server_id in wanted else 0), (label, server_id, spellings)


# -- nothing foreign is lost -----------------------------------------------------------------


@given(scenarios(quota="any"))
def test_writes_touch_only_slot_keys_never_foreign_or_frozen_ones(scenario: Scenario) -> None:
    plan = scenario.plan()
    for server_plan in plan.servers:
        frozen = read_aliases(server_plan.server.metadata).frozen
        for write in (server_plan.make_write, server_plan.break_write):
            for key in (*write.upserts, *write.deletes):
                assert slot_number(key) is not None, key
                assert key not in frozen, f"{key} holds {frozen.get(key)!r}, which we never edit"


@given(scenarios(quota="any"))
def test_foreign_keys_and_frozen_values_survive_byte_for_byte(scenario: Scenario) -> None:
    after = by_id(apply_plan(scenario.servers, scenario.plan()))
    for server in scenario.servers:
        assert non_alias_items(after[server.server_id]) == non_alias_items(server)
        assert read_aliases(after[server.server_id].metadata).frozen == read_aliases(server.metadata).frozen


@given(scenarios(quota="any"))
def test_tokens_of_labels_not_wanted_and_plain_aliases_never_move_or_vanish(scenario: Scenario) -> None:
    after = by_id(apply_plan(scenario.servers, scenario.plan()))
    for server in scenario.servers:
        now = slot_texts(after[server.server_id])
        for number, tokens in slot_texts(server).items():
            untouchable = tuple(t for t in tokens if not is_token_of(t, scenario.wanted))
            assert tuple(t for t in now.get(number, ()) if not is_token_of(t, scenario.wanted)) == untouchable


# -- minimal writes ------------------------------------------------------------------------


@given(scenarios(quota="any"))
def test_every_write_changes_each_key_it_touches(scenario: Scenario) -> None:
    plan = scenario.plan()
    for server_plan in plan.servers:
        assert server_plan.make_write or server_plan.break_write
        state = dict(server_plan.server.metadata)
        for write in (server_plan.make_write, server_plan.break_write):
            for key, value in write.upserts.items():
                assert state.get(key) != value, f"{key} rewritten with its own value"
            state = apply_write(state, write)
        assert read_aliases(state).slots != read_aliases(server_plan.server.metadata).slots


@given(scenarios(quota="any"))
def test_servers_with_nothing_to_do_get_no_plan(scenario: Scenario) -> None:
    planned = {p.server.server_id for p in scenario.plan().servers}
    for server in scenario.servers:
        involved = any(server.server_id in wanted for wanted in scenario.wanted.values()) or any(
            t.label in scenario.wanted for _, _, t in read_aliases(server.metadata).editable_tokens()
        )
        if not involved:
            assert server.server_id not in planned
    assert len(planned) == len(scenario.plan().servers), "one ServerPlan per server at most"


@given(scenarios(), st.randoms(use_true_random=False))
def test_the_plan_does_not_depend_on_the_order_servers_are_listed(
    scenario: Scenario, rnd: random.Random
) -> None:
    shuffled = list(scenario.servers)
    rnd.shuffle(shuffled)

    def summary(plan: Plan) -> tuple[object, ...]:
        return (
            sorted(
                (p.server.server_id, p.make_write, p.break_write, p.added, p.removed) for p in plan.servers
            ),
            sorted((r.label, r.server.server_id, r.reason) for r in plan.refusals),
        )

    assert summary(scenario.plan(shuffled)) == summary(scenario.plan())


# -- quota -------------------------------------------------------------------------------------


@given(scenarios(quota="tight"))
def test_a_make_write_never_takes_a_server_over_its_quota(scenario: Scenario) -> None:
    for server_plan in scenario.plan().servers:
        if server_plan.make_write:
            assert len(apply_write(server_plan.server.metadata, server_plan.make_write)) <= scenario.quota


@given(scenarios(quota="tight"), st.integers(0, 6))
def test_a_reserve_of_keys_plans_as_that_much_smaller_a_quota_and_says_so(
    scenario: Scenario, reserved: int
) -> None:
    """The reserve (LANDB_RESERVED_METADATA_KEYS) is the quota less those keys, for every write and every
    refusal; only a refusal's sentence differs, naming the real quota and the reserve."""
    kept = plan_changes(
        scenario.servers,
        scenario.wanted,
        floor=scenario.floor,
        max_length=scenario.max_length,
        quota=scenario.quota + reserved,
        reserved=reserved,
    )
    assert kept.servers == scenario.plan().servers
    assert [r[:2] + r[3:] for r in kept.refusals] == [r[:2] + r[3:] for r in scenario.plan().refusals]
    for refusal in kept.refusals:
        if "quota" in refusal.reason and reserved:
            assert f"quota is {scenario.quota + reserved}, {reserved} of them kept free" in refusal.reason


@given(scenarios(quota="tight"))
def test_a_label_refused_anywhere_loses_no_token_anywhere(scenario: Scenario) -> None:
    plan = scenario.plan()
    refused = {label for label, _ in addition_refusals(plan)}
    after = by_id(apply_plan(scenario.servers, plan))
    for server in scenario.servers:
        for label in refused:
            assert Counter(editable_texts(after[server.server_id], label)) >= Counter(
                editable_texts(server, label)
            )


@given(scenarios(quota="tight"))
def test_over_its_quota_a_server_gets_what_fits_and_a_refusal_for_the_rest(scenario: Scenario) -> None:
    """A refused addition is not written there; what is written stays within the quota; and an addition
    is refused for room only when no key was left for it once the others that fit went in."""
    plan = scenario.plan()
    refused = refusals_of(plan, "capacity")
    planned = {p.server.server_id: p for p in plan.servers}
    for server in scenario.servers:
        sid = server.server_id
        server_plan = planned.get(sid)
        made = apply_write(server.metadata, server_plan.make_write) if server_plan else dict(server.metadata)
        if server_plan is not None:
            assert not {(t.label, sid) for t in server_plan.added} & refused
            if server_plan.make_write:
                assert len(made) <= scenario.quota
        if any(r.server.server_id == sid and "quota" in r.reason for r in plan.refusals):
            assert len(made) >= scenario.quota, "a key was left free, yet an addition was refused"


@given(scenarios(quota="tight"))
def test_quota_refusals_are_only_for_servers_that_would_exceed_it(scenario: Scenario) -> None:
    generous = Scenario(
        scenario.servers, scenario.wanted, scenario.floor, scenario.max_length, GENEROUS_QUOTA
    )
    unconstrained = {p.server.server_id: p for p in generous.plan().servers}
    for _, server_id in refusals_of(scenario.plan(), "capacity"):
        server_plan = unconstrained[server_id]
        assert len(apply_write(server_plan.server.metadata, server_plan.make_write)) > scenario.quota


QUOTA_CHAIN = Scenario(
    [
        ServerState(
            "x", "node-x", "node-x", {"landb-alias": "app--load-0-," + "p" * 240, "cern-services": "v"}
        ),
        ServerState(
            "y", "node-y", "node-y", {"landb-alias": "db--load-0-," + "q" * 240, "cern-services": "v"}
        ),
    ],
    {"web": frozenset({"x"}), "app": frozenset({"y"}), "db": frozenset()},
    floor=0,
    max_length=254,
    quota=2,
)
"""A chain of quota dependencies: web fits on x only once x has dropped app, which waits until app is on
y, which fits only once y has dropped db. Three rounds write; the fourth plans nothing."""


def rounds_until_nothing_to_write(scenario: Scenario, limit: int) -> int:
    """How many rounds (plan, then apply it all) write something before a plan has nothing to write."""
    fleet = list(scenario.servers)
    for writing in range(limit + 1):
        plan = scenario.plan(fleet)
        if not plan.servers:
            return writing
        fleet = apply_plan(fleet, plan)
    raise AssertionError(f"still planning after {limit} rounds: {plan}")


def test_a_chain_of_quota_dependencies_takes_one_round_per_label() -> None:
    assert rounds_until_nothing_to_write(QUOTA_CHAIN, limit=10) == 3


@given(scenarios(quota="tight"))
@example(QUOTA_CHAIN)
def test_planning_writes_in_at_most_one_round_per_wanted_label_even_under_quota(scenario: Scenario) -> None:
    """Not two rounds: a refused addition (quota, value length) may fit once a removal on its server has
    landed, and that removal may itself wait for its label's addition elsewhere (make before break). Such
    a chain passes through distinct labels -- a label waiting on itself never writes -- and every round
    lands at least the next label of every chain, so a plan has nothing left to write after one round
    per wanted label (at least one round when something is to be written)."""
    rounds_until_nothing_to_write(scenario, limit=max(1, len(scenario.wanted)))


@given(scenarios(quota="any"))
def test_load_tokens_change_only_by_what_the_plan_reports(scenario: Scenario) -> None:
    plan = scenario.plan()
    after = by_id(apply_plan(scenario.servers, plan))
    reported = {p.server.server_id: p for p in plan.servers}
    for server in scenario.servers:
        before_tokens, after_tokens = all_tokens(server), all_tokens(after[server.server_id])
        server_plan = reported.get(server.server_id)
        added = set(server_plan.added) if server_plan else set()
        removed = set(server_plan.removed) if server_plan else set()
        assert set(after_tokens - before_tokens) == added
        assert set(before_tokens - after_tokens) <= removed


@given(scenarios(quota="any"))
def test_the_metadata_an_apply_expects_is_what_nova_holds_once_its_writes_landed(scenario: Scenario) -> None:
    """The apply hands it to the next read (``InventoryReader.wrote``), which then parses nothing it wrote:
    it must be exactly what Nova answers, or that read would keep a state Nova does not hold."""
    plan = scenario.plan()
    after = by_id(apply_plan(scenario.servers, plan))
    for server_plan in plan.servers:
        assert metadata_after(server_plan) == after[server_plan.server.server_id].metadata


# -- the outcome does not depend on batching --------------------------------------------------------


def plan_of(scenario: Scenario, servers: list[ServerState], wanted: dict[str, frozenset[str]]) -> Plan:
    """The plan the apply makes: every label wanted nowhere leaves DNS (none moves to a load balancer)."""
    leaving = {label for label, carriers_wanted in wanted.items() if not carriers_wanted}
    return plan_changes(
        servers,
        wanted,
        floor=scenario.floor,
        max_length=scenario.max_length,
        quota=scenario.quota,
        leaving=leaving,
    )


QUOTA_FREED_BY_A_WITHDRAWAL = Scenario(
    [
        ServerState(
            "x",
            "node-x",
            "node-x",
            {
                "cern-services": "v",
                "landb-alias": "app--load-0-," + "p" * 60,
                "landb-alias2": "old--load-0-," + "r" * 60,
            },
        )
    ],
    {"old": frozenset(), "y": frozenset({"x"})},
    floor=0,
    max_length=80,
    quota=3,
)
"""Three keys held of three: ``y--load-0-`` fits only once ``old`` left ``landb-alias2``. Removals after
additions refused it in one apply, and landed it when the withdrawal came in an apply of its own."""


def test_room_a_withdrawal_frees_serves_an_addition_of_the_same_apply() -> None:
    plan = plan_of(
        QUOTA_FREED_BY_A_WITHDRAWAL, QUOTA_FREED_BY_A_WITHDRAWAL.servers, QUOTA_FREED_BY_A_WITHDRAWAL.wanted
    )
    assert plan.refusals == ()
    [server_plan] = plan.servers
    assert server_plan.leave_write.upserts == {"landb-alias2": "r" * 60}
    assert server_plan.make_write.upserts == {"landb-alias2": "r" * 60 + ",y--load-0-"}
    assert not server_plan.break_write


@given(scenarios(quota="tight"), st.integers(0, 2**10))
@example(QUOTA_FREED_BY_A_WITHDRAWAL, 1)
def test_what_lands_is_the_same_in_one_apply_and_with_withdrawals_sent_in_an_apply_before(
    scenario: Scenario, sent_first: int
) -> None:
    """external-dns batches as its loops fall: the withdrawal of a name and the creation of another may
    come in one apply or in two. Room a withdrawal frees serves the additions of its own apply (its leave
    writes go first), so one apply leaves Nova exactly as the withdrawals sent first (any part of them),
    then the rest: byte for byte, near the quota or not."""
    leaving = sorted(label for label, carriers_wanted in scenario.wanted.items() if not carriers_wanted)
    first = {label for bit, label in enumerate(leaving) if sent_first >> bit & 1}

    at_once = apply_plan(scenario.servers, plan_of(scenario, scenario.servers, scenario.wanted))

    before = apply_plan(
        scenario.servers, plan_of(scenario, scenario.servers, dict.fromkeys(first, frozenset()))
    )
    rest = {
        label: carriers_wanted for label, carriers_wanted in scenario.wanted.items() if label not in first
    }
    in_two = apply_plan(before, plan_of(scenario, before, rest))

    assert {s.server_id: s.metadata for s in at_once} == {s.server_id: s.metadata for s in in_two}
