"""From "these servers must carry these aliases" to per-server metadata writes.

Every server's change is split into a *make* write (phase 1, additions only) and a *break* write (phase
2, removals only): the data of THE APPLY ORDERING, whose rule and cases are in
provider/apply/applier.py (every
make write lands before any break write, so an alias that exists before and after never has zero
carriers: design invariant 3). The removals of aliases leaving DNS altogether (``leaving``: no carrier
after, nothing to protect) are a *leave* write of their own, written before the make write, and the make
write is packed on what it leaves: room they free serves this plan's additions, so a plan lands what the
same changes would land split into the withdrawals, then the rest. Which N each carrier gets is the
index rule (landb/indices.py), how tokens are laid out over the keys the packing rule (landb/packing.py).

Writes touch only slot keys (``landb-alias``, ``landb-alias<k>``); every other key, frozen alias keys
included, is left as it is (invariant 4). A plain (CNAME) alias is never written, and no ``--load-N-``
token is added for a name LanDB already holds as a plain alias anywhere we can see: one name cannot be a
CNAME and A records at once.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import NamedTuple

from landb_webhook.landb.holders import Holders
from landb_webhook.landb.indices import HeldIndex, indices_for_alias
from landb_webhook.landb.metadata import ServerAliases, Slots, join_tokens, read_aliases, slot_key
from landb_webhook.landb.names import LoadToken, dns_name_for
from landb_webhook.landb.packing import ValueTooLong, add_tokens_within, remove_tokens


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
    make_write: MetadataWrite
    """Phase 1: additions, written before any removal anywhere (but the leave writes)."""
    break_write: MetadataWrite
    """Phase 2: removals, written once every make write has landed."""
    leave_write: MetadataWrite = field(default_factory=MetadataWrite)
    """Before phase 1: removals of aliases leaving DNS altogether, written before this server's make write,
    which is packed on what it leaves (their tokens are in ``removed`` too)."""
    left: tuple[LoadToken, ...] = ()
    """The tokens the leave write removes (also in ``removed``): what it lands on its own."""


class Refusal(NamedTuple):
    """A change not written, and why; the rest of the apply still is. Every stage of an apply refuses with
    this one value (provider.apply.refusals tells them all), the plan one per (alias, server).

    A tuple, not a frozen dataclass: a cluster over its quota refuses 400,000 of them in every loop."""

    label: str
    kind: str
    """A fixed word, for metrics and to tell them apart: the plan's are ``frozen`` (held in a form we never
    edit), ``plain_alias`` (the name is a CNAME alias) or ``capacity`` (value length, metadata quota)."""
    reason: str
    server: ServerState | None = None
    """The server that cannot take it (the plan's); None: refused wherever it would go."""


def metadata_after(plan: ServerPlan) -> dict[str, str]:
    """The server's metadata once both of its writes landed: each POST merges, then its DELETEs remove."""
    metadata = dict(plan.server.metadata)
    for write in (plan.leave_write, plan.make_write, plan.break_write):
        metadata.update(write.upserts)
        for key in write.deletes:
            metadata.pop(key, None)
    return metadata


@dataclass(frozen=True)
class Plan:
    servers: tuple[ServerPlan, ...] = ()
    refusals: tuple[Refusal, ...] = ()

    def added_indices(self) -> Iterator[HeldIndex]:
        """(alias label, server id, N) of each token the plan adds: what ``LostIndices.record`` forgets."""
        return ((t.label, p.server.server_id, t.index) for p in self.servers for t in p.added)

    def removed_indices(self) -> Iterator[HeldIndex]:
        """(alias label, server id, N) of each token the plan removes: what ``LostIndices.record`` keeps."""
        return ((t.label, p.server.server_id, t.index) for p in self.servers for t in p.removed)


def carriers(servers: Iterable[ServerState]) -> dict[str, set[str]]:
    """Alias label -> ids of the servers LanDB publishes it for (any key, ours or frozen)."""
    return _holders(servers, ServerAliases.load_labels)


def carriers_since(
    before: Mapping[str, set[str]], was: Sequence[ServerState], now: Sequence[ServerState]
) -> dict[str, set[str]]:
    """``carriers(now)``, made from ``before``, which is ``carriers(was)``: only the servers whose aliases
    are not the very ones read before are looked at. A write changes a few servers, or one value on each;
    every token of the cluster was read again for it. ``before`` is left as it is."""
    if len({s.server_id for s in was}) != len(was) or len({s.server_id for s in now}) != len(now):
        return carriers(now)  # two nodes on one server: a label may come from either
    old = {s.server_id: s.aliases for s in was}
    new = {s.server_id: s.aliases for s in now}
    found = dict(before)
    copied: set[str] = set()

    def entry(label: str) -> set[str]:
        if label not in copied:
            copied.add(label)
            found[label] = set(found.get(label, ()))
        return found[label]

    for sid in old.keys() | new.keys():
        held_before, held = old.get(sid), new.get(sid)
        if held is held_before:
            continue
        labels_before = held_before.label_set if held_before is not None else frozenset()
        labels = held.label_set if held is not None else frozenset()
        for label in labels_before - labels:
            entry(label).discard(sid)
        for label in labels - labels_before:
            entry(label).add(sid)
    for label in copied:
        if not found[label]:
            del found[label]
    return found


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
    reserved: int = 0,
    preferred: Mapping[str, Mapping[str, int]] | None = None,
    holders: Holders | None = None,
    leaving: Set[str] = frozenset(),
) -> Plan:
    """Plan the writes that make exactly ``wanted[label]`` (server ids) carry each label in ``wanted``.

    Labels absent from ``wanted`` are not looked at; ``wanted[label]`` empty withdraws the label.
    An addition that cannot be written (value length, quota, a plain alias of the same name) is refused,
    and its label then loses no token anywhere in this plan. ``preferred[label][server id]`` is the N a
    returning carrier last held. ``holders``: an index of earlier servers to make theirs from, reading
    only the servers changed since (``landb.holders``). ``leaving``: the labels leaving DNS altogether
    (withdrawn, not moving to a load balancer): their removals are leave writes, before the make writes.
    ``reserved``: keys of the ``quota`` no addition may take (kept for other writers): a server takes new
    keys only while it holds fewer than ``quota - reserved``; removals are never held back by it.
    """
    aliases = {s.server_id: s.aliases for s in servers}
    order = sorted(servers, key=lambda s: (s.server_name, s.server_id))
    position = {s.server_id: n for n, s in enumerate(order)}
    held_by = (holders or Holders()).of(aliases)
    editable, frozen = held_by.editable, held_by.pinned
    plain: dict[str, ServerState] = {}
    for server in order:
        for label, _ in aliases[server.server_id].plain_aliases():
            plain.setdefault(label, server)
    adds: dict[str, list[LoadToken]] = defaultdict(list)
    removes: dict[str, list[tuple[str, LoadToken]]] = defaultdict(list)
    leaves: dict[str, list[tuple[str, LoadToken]]] = defaultdict(list)
    refusals: list[Refusal] = []
    plain_refusals: list[Refusal] = []

    for label in sorted(wanted):
        own, pinned = editable.get(label, {}), frozen.get(label, {})
        last = (preferred or {}).get(label)
        decided = indices_for_alias(
            wanted[label],
            _Indices(own),
            pinned,
            position,
            floor=floor,
            preferred=last,
            held_once=held_by.held_once(label),
        )
        for sid in sorted(decided, key=position.__getitem__):
            server = order[position[sid]]
            mine = own.get(sid, ())
            index = decided[sid]
            if index is None:
                gone = leaves if label in leaving and not wanted[label] else removes
                gone[sid].extend((text, LoadToken(label, n)) for text, _, n in mine)
                if pinned.get(sid):
                    refusals.append(Refusal(label, "frozen", "held in a key or form we never edit", server))
                continue
            if index in pinned.get(sid, ()):
                keeping = None  # carried in a form we never edit: no token of ours is needed
            else:
                keeping = next((text for text, _, n in mine if n == index), None)
                if keeping is None and label in plain:
                    holder = plain[label].node_name
                    reason = f"plain (CNAME) alias {label} is set on {holder}: no A record may join it"
                    plain_refusals.append(Refusal(label, "plain_alias", reason, server))
                elif keeping is None:
                    adds[sid].append(LoadToken(label, index))
            removes[sid].extend((text, LoadToken(label, n)) for text, _, n in mine if text != keeping)

    return writes_per_server(
        order,
        adds,
        removes,
        refusals,
        plain_refusals,
        max_length=max_length,
        quota=quota,
        reserved=reserved,
        leaves=leaves,
    )


def writes_per_server(
    order: Sequence[ServerState],
    adds: Mapping[str, list[LoadToken]],
    removes: Mapping[str, list[tuple[str, LoadToken]]],
    refusals: list[Refusal],
    plain_refusals: list[Refusal],
    *,
    max_length: int,
    quota: int,
    reserved: int = 0,
    leaves: Mapping[str, list[tuple[str, LoadToken]]] | None = None,
) -> Plan:
    """Each server's leave, make and break writes from the removals of leaving labels, the additions and
    the other removals every label asked of it: packed once per server, with all of its additions
    together, on what its leave write left.

    The second half of ``plan_changes``, public because the straightforward planner it is checked against
    (tests/property/test_plan_reference.py) shares it on purpose: the reference restates the per-alias
    half, the index rule fed from a scan of every server, and packs with this one."""
    leaves = leaves or {}
    # A server asked for nothing is not written: skipping it keeps a one-alias change from packing
    # and comparing every value of the cluster.
    order = [s for s in order if s.server_id in adds or s.server_id in removes or s.server_id in leaves]
    left = {s.server_id: _leave(s, s.aliases, leaves.get(s.server_id, [])) for s in order}
    phase1 = {
        s.server_id: _additions(
            s, left[s.server_id], adds.get(s.server_id, []), max_length, quota, reserved=reserved
        )
        for s in order
    }
    # A label whose new carrier cannot be written keeps every token it has, on every server: removing
    # its old carriers would break it with nothing made in their place (design invariant 3).
    held_back = {r.label for additions in phase1.values() for r in additions.refusals}
    held_back |= {r.label for r in plain_refusals}
    refusals = [*refusals, *plain_refusals]

    plans: list[ServerPlan] = []
    for server in order:
        additions = phase1[server.server_id]
        refusals.extend(additions.refusals)
        gone = removes.get(server.server_id, [])
        kept = [(text, token) for text, token in gone if token.label not in held_back]
        plan = _server_plan(server, left[server.server_id], additions, kept)
        if plan is not None:
            plans.append(plan)
    return Plan(servers=tuple(plans), refusals=tuple(refusals))


class _Indices(Mapping[str, list[int]]):
    """Server id -> the Ns of its tokens of one alias, read from its (text, label, N) tokens only when
    asked: the index rule's fast path asks only who holds the alias (``keys``, a set for set differences)."""

    def __init__(self, tokens: Mapping[str, Sequence[tuple[str, str, int]]]) -> None:
        self._tokens = tokens

    def __getitem__(self, server_id: str) -> list[int]:
        return [index for _, _, index in self._tokens[server_id]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def keys(self) -> KeysView[str]:
        return self._tokens.keys()


class _Left(NamedTuple):
    """A server once its leave write landed."""

    found: ServerAliases
    slots: Slots
    keys: int
    """Its metadata keys then: the leave write deletes the keys it empties."""
    removed: tuple[tuple[str, LoadToken], ...]
    write: MetadataWrite


def _leave(server: ServerState, found: ServerAliases, leaving: list[tuple[str, LoadToken]]) -> _Left:
    """Before phase 1: the removals of labels leaving DNS, on their own (they free room for the additions:
    the make write is packed on what this leaves)."""
    if not leaving:
        return _Left(found, found.slots, len(server.metadata), (), MetadataWrite())
    slots = remove_tokens(found.slots, (text for text, _ in leaving))
    write = _write(found.slots, slots)
    return _Left(found, slots, len(server.metadata) - len(write.deletes), tuple(leaving), write)


class _Additions(NamedTuple):
    slots: Slots
    """The server's slots once phase 1 has landed."""
    added: tuple[LoadToken, ...]
    refusals: list[Refusal]


def _additions(
    server: ServerState, left: _Left, adds: list[LoadToken], max_length: int, quota: int, *, reserved: int
) -> _Additions:
    """Phase 1 for one server, on what its leave write left: the additions that fit within its metadata
    quota less the ``reserved`` keys, in sorted order, and a refusal for each of the others (a server over
    that by others' keys takes none: the reserve is theirs, and past the quota Nova refuses any write)."""
    free_keys = quota - reserved - left.keys
    of_quota = f"the server quota is {quota}" + (
        f", {reserved} of them kept free for others" if reserved else ""
    )
    if free_keys < 0:
        reason = f"holds {left.keys} metadata keys, {of_quota}"
        return _Additions(left.slots, (), [Refusal(t.label, "capacity", reason, server) for t in adds])
    rendered = {t.render(): t for t in adds}
    try:
        packed = add_tokens_within(
            left.slots, rendered, max_length, unavailable=left.found.frozen_slot_numbers(), new_keys=free_keys
        )
    except ValueTooLong as exc:
        return _Additions(left.slots, (), [Refusal(t.label, "capacity", str(exc), server) for t in adds])
    if not packed.left_out:
        return _Additions(packed.layout, tuple(sorted(adds)), [])
    reason = f"no room left in its metadata keys, {of_quota}"
    left_out = set(packed.left_out)
    return _Additions(
        packed.layout,
        tuple(sorted(t for text, t in rendered.items() if text not in left_out)),
        [Refusal(rendered[text].label, "capacity", reason, server) for text in packed.left_out],
    )


def _server_plan(
    server: ServerState,
    left: _Left,
    additions: _Additions,
    removes: list[tuple[str, LoadToken]],
) -> ServerPlan | None:
    shrunk = remove_tokens(additions.slots, (text for text, _ in removes))
    make_write, break_write = _write(left.slots, additions.slots), _write(additions.slots, shrunk)
    if not make_write and not break_write and not left.write:
        return None
    removed = tuple(sorted({token for _, token in (*left.removed, *removes)}))
    leaving = tuple(sorted({token for _, token in left.removed}))
    return ServerPlan(server, additions.added, removed, make_write, break_write, left.write, leaving)


def _write(before: Slots, after: Slots) -> MetadataWrite:
    upserts = {
        slot_key(n): join_tokens(tokens)
        for n, tokens in sorted(after.items())
        if before.get(n) != tokens or n not in before
    }
    deletes = tuple(slot_key(n) for n in sorted(before) if n not in after)
    return MetadataWrite(upserts=upserts, deletes=deletes)
