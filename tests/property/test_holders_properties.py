"""Properties of the holder index (landb/holders.py): made from an earlier one, it is the index of the
servers given, and only the servers whose aliases changed are read again."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st
from landb_strategies import fleets

from landb_webhook.landb.holders import Holders
from landb_webhook.landb.metadata import ServerAliases
from landb_webhook.landb.plan import ServerState


def indexed_afresh(aliases: Mapping[str, ServerAliases]) -> tuple[object, object]:
    """The index written plainly: every token of every server."""
    editable: dict[str, dict[str, list[tuple[str, int]]]] = {}
    pinned: dict[str, dict[str, list[int]]] = {}
    for sid, found in aliases.items():
        for text, label, index in found.editable_load():
            editable.setdefault(label, {}).setdefault(sid, []).append((text, index))
        for token in found.frozen_tokens():
            pinned.setdefault(token.label, {}).setdefault(sid, []).append(token.index)
    return editable, pinned


def as_read(holders: Holders) -> tuple[object, object]:
    return (
        {label: dict(by_server) for label, by_server in holders.editable.items()},
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
        indices = [index for tokens in by_server.values() for _, index in tokens]
        one_each = len(indices) == len(by_server) == len(set(indices))
        assert made.held_once(label) == (set(indices) if one_each else None), label
    assert as_read(first) == before == indexed_afresh(aliases_of(earlier)), "the earlier index is unchanged"


class CountedAliases(ServerAliases):
    """A server's aliases that count how often their tokens are read."""

    reads = 0

    def editable_load(self):  # type: ignore[no-untyped-def]
        CountedAliases.reads += 1
        return super().editable_load()


def test_only_the_servers_whose_aliases_changed_are_read_again() -> None:
    """A node joining a 500-node cluster: the index reads one server, not 501."""
    cluster = {f"id-{n}": CountedAliases({}, {}) for n in range(500)}
    index = Holders().of(cluster)
    assert CountedAliases.reads == 500
    joined = {**cluster, "id-new": CountedAliases({}, {})}

    again = index.of(joined)

    assert CountedAliases.reads == 501
    assert again.indexed.keys() == joined.keys()
    assert index.of(cluster) is index, "nothing changed: the same index"
