"""From "these servers must carry these aliases" to per-server metadata writes.

THE APPLY ORDERING lives here as data: every server's change is split into a *make* write (phase 1,
additions only) and a *break* write (phase 2, removals only). The executor writes every make before
any break, so an alias that exists before and after never has zero carriers (design invariant 3).
Writes touch only slot keys (``landb-alias``, ``landb-alias<k>``); every other key, frozen alias keys
included, is left as it is (invariant 4). A plain (CNAME) alias is never written, and no ``--load-N-``
token is added for a name LanDB already holds as a plain alias anywhere we can see: one name cannot be a
CNAME and A records at once.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from landb_webhook.landb.indices import assign_indices
from landb_webhook.landb.metadata import ServerAliases, Slots, join_tokens, read_aliases, slot_key
from landb_webhook.landb.names import LoadToken, dns_name_for
from landb_webhook.landb.packing import ValueTooLong, add_tokens, remove_tokens

T = TypeVar("T")


@dataclass(frozen=True)
class ServerState:
    """A server as the planner sees it: the node it backs and its current metadata."""

    server_id: str
    server_name: str
    node_name: str
    metadata: Mapping[str, str]

    @functools.cached_property
    def aliases(self) -> ServerAliases:
        """Read once: Records and AdjustEndpoints look at every server's aliases several times."""
        return read_aliases(self.metadata)


@dataclass(frozen=True)
class MetadataWrite:
    """One merge POST of ``upserts`` and one DELETE per key in ``deletes``.

    The POST lands before any of the DELETEs (packing may move a kept token out of a key being deleted
    into one being rewritten); the DELETEs are independent of each other and may run side by side."""

    upserts: Mapping[str, str] = field(default_factory=dict)
    deletes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


@dataclass(frozen=True)
class ServerPlan:
    server: ServerState
    added: tuple[LoadToken, ...]
    removed: tuple[LoadToken, ...]
    make: MetadataWrite
    """Phase 1: additions, written before any removal anywhere."""
    brk: MetadataWrite
    """Phase 2: removals, written once every make has landed."""


@dataclass(frozen=True)
class Refusal:
    """A change the rules forbid; it is not written, the rest of the plan still is."""

    label: str
    server: ServerState
    reason: str
    kind: str = "capacity"
    """``frozen`` (held in a form we never edit), ``plain_alias`` (the name is a CNAME alias) or
    ``capacity`` (value length, metadata quota): a fixed word for metrics, and to tell them apart."""


@dataclass(frozen=True)
class Plan:
    servers: tuple[ServerPlan, ...] = ()
    refusals: tuple[Refusal, ...] = ()


def carriers(servers: Iterable[ServerState]) -> dict[str, set[str]]:
    """Alias label -> ids of the servers LanDB publishes it for (any key, ours or frozen)."""
    return _holders(servers, ServerAliases.load_labels)


def frozen_carriers(servers: Iterable[ServerState]) -> dict[str, set[str]]:
    """Alias label -> ids of the servers holding it in a form we never edit: they carry it regardless."""
    return _holders(servers, ServerAliases.frozen_labels)


def _holders(
    servers: Iterable[ServerState], labels: Callable[[ServerAliases], Iterable[str]]
) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for server in servers:
        for label in labels(server.aliases):
            found[label].add(server.server_id)
    return dict(found)


def plain_aliases(servers: Iterable[ServerState], domain: str) -> dict[str, set[str]]:
    """Plain (CNAME) alias label -> the host names LanDB points it at: the interface a per-interface value
    names, else the server's own name in ``domain``."""
    found: dict[str, set[str]] = defaultdict(set)
    for server in servers:
        for label, interface in server.aliases.plain_aliases():
            host = interface or dns_name_for(server.server_name, domain)
            found[label].add(host.lower().rstrip("."))
    return dict(found)


def plan_changes(
    servers: Sequence[ServerState],
    wanted: Mapping[str, frozenset[str]],
    *,
    floor: int = 0,
    max_length: int = 254,
    quota: int = 128,
    preferred: Mapping[str, Mapping[str, int]] | None = None,
) -> Plan:
    """Plan the writes that make exactly ``wanted[label]`` (server ids) carry each label in ``wanted``.

    Labels absent from ``wanted`` are not looked at; ``wanted[label]`` empty withdraws the label.
    An addition that cannot be written (value length, quota, a plain alias of the same name) is refused,
    and its label then loses no token anywhere in this plan. ``preferred[label][server id]`` is the N a
    returning carrier last held.
    """
    aliases = {s.server_id: s.aliases for s in servers}
    # Each server's tokens parsed and grouped by label once: a plan for every alias of a large
    # cluster (a node joining changes all their targets) would otherwise re-parse them per alias.
    editable = {
        sid: _by_label((t, (text, t)) for _, text, t in found.editable_tokens())
        for sid, found in aliases.items()
    }
    frozen = {sid: _by_label((t, t.index) for t in found.frozen_tokens()) for sid, found in aliases.items()}
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
        pinned = {sid: frozen[sid].get(label, []) for sid in aliases}
        held = {sid: [t.index for _, t in editable[sid].get(label, [])] + pinned[sid] for sid in aliases}
        targets = [s.server_id for s in order if s.server_id in wanted[label]]
        assigned = assign_indices(
            targets, held, pinned=pinned, floor=floor, preferred=(preferred or {}).get(label)
        )
        for server in order:
            mine = editable[server.server_id].get(label, [])
            index = assigned.get(server.server_id)
            if index is None:
                removes[server.server_id].extend(mine)
                if pinned[server.server_id]:
                    refusals.append(Refusal(label, server, "held in a key or form we never edit", "frozen"))
                continue
            if index in pinned[server.server_id]:
                keeping = None  # carried in a form we never edit: no token of ours is needed
            else:
                keeping = next((text for text, token in mine if token.index == index), None)
                if keeping is None and label in plain:
                    holder = plain[label].node_name
                    reason = f"plain (CNAME) alias {label} is set on {holder}: no A record may join it"
                    plain_refusals.append(Refusal(label, server, reason, "plain_alias"))
                elif keeping is None:
                    adds[server.server_id].append(LoadToken(label, index))
            removes[server.server_id].extend((text, token) for text, token in mine if text != keeping)

    phase1 = {
        s.server_id: _additions(s, aliases[s.server_id], adds[s.server_id], max_length, quota) for s in order
    }
    # A label whose new carrier cannot be written keeps every token it has, on every server: removing
    # its old carriers would break it with nothing made in their place (design invariant 3).
    held_back = {r.label for additions in phase1.values() for r in additions.refusals}
    held_back |= {r.label for r in plain_refusals}
    refusals.extend(plain_refusals)

    plans: list[ServerPlan] = []
    for server in order:
        additions = phase1[server.server_id]
        refusals.extend(additions.refusals)
        kept = [(text, token) for text, token in removes[server.server_id] if token.label not in held_back]
        plan = _server_plan(server, aliases[server.server_id], additions, kept)
        if plan is not None:
            plans.append(plan)
    return Plan(servers=tuple(plans), refusals=tuple(refusals))


def _by_label(items: Iterable[tuple[LoadToken, T]]) -> dict[str, list[T]]:
    grouped: dict[str, list[T]] = defaultdict(list)
    for token, item in items:
        grouped[token.label].append(item)
    return grouped


class _Additions(NamedTuple):
    slots: Slots
    """The server's slots once phase 1 has landed."""
    added: tuple[LoadToken, ...]
    refusals: list[Refusal]


def _additions(
    server: ServerState, found: ServerAliases, adds: list[LoadToken], max_length: int, quota: int
) -> _Additions:
    """Phase 1 for one server: all of its additions, or none of them with a refusal for each."""
    try:
        grown = add_tokens(
            found.slots, (t.render() for t in adds), max_length, unavailable=found.frozen_slot_numbers()
        )
    except ValueTooLong as exc:
        return _Additions(found.slots, (), [Refusal(t.label, server, str(exc)) for t in adds])
    keys_after = len(server.metadata) - len(found.slots) + len(grown)
    if keys_after > quota:
        reason = f"needs {keys_after} metadata keys, the server quota is {quota}"
        return _Additions(found.slots, (), [Refusal(t.label, server, reason) for t in adds])
    return _Additions(grown, tuple(sorted(adds)), [])


def _server_plan(
    server: ServerState,
    found: ServerAliases,
    additions: _Additions,
    removes: list[tuple[str, LoadToken]],
) -> ServerPlan | None:
    shrunk = remove_tokens(additions.slots, (text for text, _ in removes))
    make, brk = _write(found.slots, additions.slots), _write(additions.slots, shrunk)
    if not make and not brk:
        return None
    removed = tuple(sorted({token for _, token in removes}))
    return ServerPlan(server, additions.added, removed, make, brk)


def _write(before: Slots, after: Slots) -> MetadataWrite:
    upserts = {
        slot_key(n): join_tokens(tokens)
        for n, tokens in sorted(after.items())
        if before.get(n) != tokens or n not in before
    }
    deletes = tuple(slot_key(n) for n in sorted(before) if n not in after)
    return MetadataWrite(upserts=upserts, deletes=deletes)
