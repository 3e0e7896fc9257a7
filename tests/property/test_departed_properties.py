"""Properties of DEPARTED SERVERS (provider/read/departed.py): whom the webhook remembers, and when a server
whose node left the cluster counts as cleaned."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from landb_replay import apply_plan, non_alias_items
from landb_strategies import LABEL_POOL, GeneratedMetadata, server_metadata

from landb_webhook.landb.metadata import read_aliases
from landb_webhook.landb.plan import ServerState, plan_changes
from landb_webhook.provider.read.departed import (
    Remembered,
    from_json,
    holds_owned,
    owned_slot_labels,
    remembered_after,
    to_json,
)

owned_sets = st.frozensets(st.sampled_from(LABEL_POOL))


def state(metadata: GeneratedMetadata, server_id: str = "gone") -> ServerState:
    return ServerState(server_id, "vm", "node-gone", metadata.metadata)


def remembered(server_id: str) -> Remembered:
    return Remembered(server_id, f"node-{server_id}", ("192.0.2.1",))


@given(server_metadata(), owned_sets)
def test_a_departed_server_is_kept_exactly_while_a_plan_would_still_take_something_off_it(
    metadata: GeneratedMetadata, owned: frozenset[str]
) -> None:
    """The planner, asked to take every owned alias off the server, writes to it iff it is remembered."""
    gone = state(metadata)
    plan = plan_changes([gone], dict.fromkeys(owned, frozenset()))
    kept = remembered_after({"gone": remembered("gone")}, {}, {"gone": gone}, owned.__contains__)
    assert ("gone" in kept) == bool(plan.servers) == holds_owned(gone, owned.__contains__)


@given(server_metadata(), owned_sets)
def test_cleaning_leaves_no_owned_slot_token_and_everything_else_as_it_was(
    metadata: GeneratedMetadata, owned: frozenset[str]
) -> None:
    gone = state(metadata)
    labels = owned_slot_labels(gone, owned.__contains__)
    [after] = apply_plan([gone], plan_changes([gone], dict.fromkeys(labels, frozenset())))

    assert not holds_owned(after, owned.__contains__)
    assert remembered_after({"gone": remembered("gone")}, {}, {"gone": after}, owned.__contains__) == {}
    before_aliases, after_aliases = read_aliases(gone.metadata), read_aliases(after.metadata)
    assert after_aliases.frozen == before_aliases.frozen  # keys and forms we never edit
    assert Counter(after_aliases.plain_aliases()) == Counter(before_aliases.plain_aliases())
    assert non_alias_items(after) == non_alias_items(gone)
    unowned = [t for t in before_aliases.editable_tokens() if t[2].label not in owned]
    assert [t[1:] for t in after_aliases.editable_tokens()] == [t[1:] for t in unowned]


@given(st.sets(st.sampled_from("abcdef")), st.sets(st.sampled_from("abcdef")), st.data())
def test_who_is_remembered(remembered_ids: set[str], carrying_ids: set[str], data: st.DataObject) -> None:
    """Carriers always; a departed server while it holds owned tokens, or while it could not be read;
    never one Nova no longer has."""
    departed = sorted(remembered_ids - carrying_ids)
    read = data.draw(st.sets(st.sampled_from(departed))) if departed else set()
    answers = {i: data.draw(st.sampled_from(["404", "owned", "clean"])) for i in sorted(read)}
    states = {
        i: None if answer == "404" else ServerState(i, "vm", "n", {"landb-alias": f"{answer}--load-0-"})
        for i, answer in answers.items()
    }
    kept = remembered_after(
        {i: remembered(i) for i in remembered_ids},
        {i: remembered(i) for i in carrying_ids},
        states,
        lambda label: label == "owned",
    )
    expected = carrying_ids | {i for i in departed if i not in read or answers[i] == "owned"}
    assert set(kept) == expected


remembered_servers = st.dictionaries(
    st.from_regex(r"[0-9a-f-]{1,36}", fullmatch=True),
    st.tuples(st.text(max_size=20), st.lists(st.from_regex(r"[0-9.]{7,15}", fullmatch=True), max_size=3)),
    max_size=5,
).map(lambda entries: {i: Remembered(i, node, tuple(ips)) for i, (node, ips) in entries.items()})


@given(remembered_servers)
def test_the_remembered_servers_survive_their_json_form(found: dict[str, Remembered]) -> None:
    assert from_json(to_json(found)) == found


@pytest.mark.parametrize(
    "text",
    ["[]", '{"a": {}}', '{"a": {"node": 1, "internalIPs": []}}', '{"a": {"node": "n", "internalIPs": "x"}}'],
)
def test_a_list_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a list of servers carrying our aliases"):
        from_json(text)
