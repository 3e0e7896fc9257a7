"""Properties of the holder index (landb/holders.py): made from an earlier one, it is the index of the
servers given, and only the servers whose aliases changed are read again."""

from __future__ import annotations

import gc
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st
from landb_strategies import fleets

from landb_webhook.landb.holders import Holders
from landb_webhook.landb.metadata import ServerAliases, read_aliases, slot_key
from landb_webhook.landb.plan import ServerState, carriers, carriers_since


def indexed_afresh(aliases: Mapping[str, ServerAliases]) -> tuple[object, object]:
    """The index written plainly: every token of every server."""
    editable: dict[str, dict[str, list[tuple[str, str, int]]]] = {}
    pinned: dict[str, dict[str, list[int]]] = {}
    for sid, found in aliases.items():
        for text, label, index in found.editable_load():
            editable.setdefault(label, {}).setdefault(sid, []).append((text, label, index))
        for token in found.frozen_tokens():
            pinned.setdefault(token.label, {}).setdefault(sid, []).append(token.index)
    return editable, pinned


def as_read(holders: Holders) -> tuple[object, object]:
    return (
        {
            label: {sid: list(tokens) for sid, tokens in by_server.items()}
            for label, by_server in holders.editable.items()
        },
        {label: dict(by_server) for label, by_server in holders.pinned.items()},
    )


def aliases_of(fleet: list[ServerState]) -> dict[str, ServerAliases]:
    return {server.server_id: server.aliases for server in fleet}


@given(fleets(), fleets(), st.data())
def test_an_index_made_from_an_earlier_one_is_the_index_of_the_servers_given(
    earlier: list[ServerState], later: list[ServerState], data: st.DataObject
) -> None:
    """Some servers stay as they were (the same state), some change, some come and some go."""
    kept = data.draw(
        st.lists(st.sampled_from(earlier), unique_by=lambda s: s.server_id) if earlier else st.just([])
    )
    kept_ids = {server.server_id for server in kept}
    now = [*kept, *(s for s in later if s.server_id not in kept_ids)]
    first = Holders().of(aliases_of(earlier))
    before = as_read(first)

    made = first.of(aliases_of(now))

    assert as_read(made) == indexed_afresh(aliases_of(now))
    for label, by_server in made.editable.items():
        indices = [index for tokens in by_server.values() for _, _, index in tokens]
        one_each = len(indices) == len(by_server) == len(set(indices))
        assert made.held_once(label) == (set(indices) if one_each else None), label
    assert as_read(first) == before == indexed_afresh(aliases_of(earlier)), "the earlier index is unchanged"


def test_only_the_aliases_of_the_values_that_changed_are_listed_again() -> None:
    """A server whose one value changed (an alias withdrawn) is listed again for that value's aliases
    only, every other server and alias is kept as it was: the index follows the change, not the cluster."""
    labels = [f"app{i:03d}" for i in range(100)]

    def metadata(n: int, without: str = "") -> dict[str, str]:
        values = [labels[k : k + 10] for k in range(0, 100, 10)]
        return {
            slot_key(slot + 1): ",".join(f"{label}--load-{n}-" for label in value if label != without)
            for slot, value in enumerate(values)
        }

    cluster = {f"id-{n}": read_aliases(metadata(n)) for n in range(50)}
    index = Holders().of(cluster)
    changed = {**cluster, "id-0": read_aliases(metadata(0, without="app033")), "id-new": read_aliases({})}

    again = index.of(changed)

    assert as_read(again) == indexed_afresh(changed)
    relisted = {
        (label, sid)
        for label, by_server in index.editable.items()
        for sid, tokens in by_server.items()
        if again.editable.get(label, {}).get(sid) is not tokens
    }
    assert relisted == {(label, "id-0") for label in labels[30:40]}
    assert index.of(cluster) is index, "nothing changed: the same index"


@given(fleets(), fleets(), st.data())
def test_carriers_made_from_earlier_ones_are_the_carriers_of_the_servers_given(
    earlier: list[ServerState], later: list[ServerState], data: st.DataObject
) -> None:
    """Records works the carriers out after every write from the last ones, reading only the servers whose
    aliases changed; the earlier answer, shared with whoever read it, is left as it was."""
    kept = data.draw(
        st.lists(st.sampled_from(earlier), unique_by=lambda s: s.server_id) if earlier else st.just([])
    )
    kept_ids = {server.server_id for server in kept}
    now = [*kept, *(s for s in later if s.server_id not in kept_ids)]
    first = carriers(earlier)
    before = {label: set(ids) for label, ids in first.items()}

    assert carriers_since(first, earlier, now) == carriers(now)
    assert first == before


@given(fleets(), fleets())
def test_the_index_holds_the_parsed_values_own_tokens_not_copies(
    earlier: list[ServerState], later: list[ServerState]
) -> None:
    """One copy of each parsed value: every token the index lists is the tuple the parsed slot value holds
    (``SlotValue.load``), whether the index was made afresh or from an earlier one; copies as (text, N)
    were ~17 MB at 300 nodes x 1,000 aliases."""
    made = Holders().of(aliases_of(earlier)).of(aliases_of(later))
    own = {id(token) for server in later for value in server.aliases.values.values() for token in value.load}

    listed = [
        token for by_server in made.editable.values() for tokens in by_server.values() for token in tokens
    ]

    assert all(id(token) in own for token in listed)
    assert len(listed) == sum(len(value.load) for s in later for value in s.aliases.values.values())


def test_the_index_of_a_large_cluster_adds_nothing_for_the_garbage_collector_to_walk() -> None:
    """Each full collection walks every container it tracks: as lists, the index of 500 nodes x 1,000
    aliases added 500,000 of them, ~0.3 s to every full collection of the sidecar."""
    cluster = {
        f"id-{n}": read_aliases({"landb-alias": ",".join(f"app{i}--load-{n}-" for i in range(20))})
        for n in range(30)
    }
    index = Holders().of(cluster)
    for _ in range(2):  # a collection untracks a tuple whose items it found untracked: (text, N), then theirs
        gc.collect()

    entries = [tokens for by_server in index.editable.values() for tokens in by_server.values()]
    assert len(entries) == 600
    assert not any(gc.is_tracked(tokens) for tokens in entries)
