"""plan_changes against the straightforward planner it replaced: each alias' index rule fed from a
scan of every server's tokens (O(aliases x servers)), then the same per-server packing. The fast path
(one pass building, per label, only the servers that hold it) must decide exactly the same: the same
writes, in the same order, and the same refusals, in the same order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from hypothesis import given
from hypothesis import strategies as st
from landb_strategies import Scenario, scenarios

from landb_webhook.landb.indices import assign_indices
from landb_webhook.landb.names import LoadToken
from landb_webhook.landb.plan import Plan, Refusal, ServerState, plan_changes, writes_per_server


def straightforward_plan(
    servers: Sequence[ServerState],
    wanted: Mapping[str, frozenset[str]],
    *,
    floor: int,
    max_length: int,
    quota: int,
    preferred: Mapping[str, Mapping[str, int]] | None,
) -> Plan:
    aliases = {s.server_id: s.aliases for s in servers}
    order = sorted(servers, key=lambda s: (s.server_name, s.server_id))
    plain: dict[str, ServerState] = {}
    for server in order:
        for label, _ in aliases[server.server_id].plain_aliases():
            plain.setdefault(label, server)
    adds: dict[str, list[LoadToken]] = defaultdict(list)
    removes: dict[str, list[tuple[str, LoadToken]]] = defaultdict(list)
    refusals: list[Refusal] = []
    plain_refusals: list[Refusal] = []
    for label in sorted(wanted):
        pinned = {
            sid: [t.index for t in found.frozen_tokens() if t.label == label]
            for sid, found in aliases.items()
        }
        mine_of = {
            sid: [(text, t) for _, text, t in found.editable_tokens() if t.label == label]
            for sid, found in aliases.items()
        }
        held = {sid: [t.index for _, t in mine_of[sid]] + pinned[sid] for sid in aliases}
        targets = [s.server_id for s in order if s.server_id in wanted[label]]
        assigned = assign_indices(
            targets, held, pinned=pinned, floor=floor, preferred=(preferred or {}).get(label)
        )
        for server in order:
            mine = mine_of[server.server_id]
            index = assigned.get(server.server_id)
            if index is None:
                removes[server.server_id].extend(mine)
                if pinned[server.server_id]:
                    refusals.append(Refusal(label, "frozen", "held in a key or form we never edit", server))
                continue
            if index in pinned[server.server_id]:
                keeping = None
            else:
                keeping = next((text for text, token in mine if token.index == index), None)
                if keeping is None and label in plain:
                    holder = plain[label].node_name
                    reason = f"plain (CNAME) alias {label} is set on {holder}: no A record may join it"
                    plain_refusals.append(Refusal(label, "plain_alias", reason, server))
                elif keeping is None:
                    adds[server.server_id].append(LoadToken(label, index))
            removes[server.server_id].extend((text, token) for text, token in mine if text != keeping)

    return writes_per_server(
        order, adds, removes, refusals, plain_refusals, max_length=max_length, quota=quota
    )


@st.composite
def preferences(draw: st.DrawFn, scenario: Scenario) -> dict[str, dict[str, int]]:
    """The N some returning carriers last held, for some labels (some of them taken, some free)."""
    ids = [s.server_id for s in scenario.servers]
    if not ids or not scenario.wanted:
        return {}
    return draw(
        st.dictionaries(
            st.sampled_from(sorted(scenario.wanted)),
            st.dictionaries(st.sampled_from(ids), st.integers(0, 6), max_size=4),
            max_size=3,
        )
    )


@given(st.data(), scenarios(quota="any"))
def test_the_plan_is_the_straightforward_planners_exactly(data: st.DataObject, scenario: Scenario) -> None:
    preferred = data.draw(preferences(scenario))
    limits = {"floor": scenario.floor, "max_length": scenario.max_length, "quota": scenario.quota}

    expected = straightforward_plan(scenario.servers, scenario.wanted, preferred=preferred, **limits)
    assert plan_changes(scenario.servers, scenario.wanted, preferred=preferred, **limits) == expected
