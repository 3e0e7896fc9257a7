"""Who holds which alias: label -> server id -> its tokens of the label, kept up to date server by server.

Planning needs, for each alias it changes, every server's tokens of it. A node joining changes the carriers
of every alias, and indexing every token of the cluster for that took half of the apply at 500 nodes x
1,000 aliases, for one server that changed. An index is built once, then each new one is made from the last
by taking out and putting back only the servers whose aliases are not the very ones it indexed (a server
state keeps its aliases as read, and an unchanged server keeps its state: ``Inventory.carry_over``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from landb_webhook.landb.metadata import ServerAliases, SlotValue

K = TypeVar("K")
V = TypeVar("V")

Token = tuple[str, str, int]
"""(token text, label, N), as ``SlotValue.load`` holds it."""


@dataclass(frozen=True)
class Holders:
    """Never modified once made: one made from it copies what it changes (Records may read it meanwhile)."""

    editable: Mapping[str, Mapping[str, tuple[Token, ...]]] = field(default_factory=dict)
    """label -> server id -> (token text, label, N) of each of its editable tokens of the label, in slot
    order: the very tuples of the parsed values (``SlotValue.load``), not copies; at 300 nodes x 1,000
    aliases a copy of each, as (text, N), was 300,000 tuples, ~17 MB. Tuples of strings and numbers, which
    the garbage collector stops tracking: as lists, the index of 500 nodes x 1,000 aliases made every full
    collection walk 500,000 more objects (~0.3 s each)."""
    pinned: Mapping[str, Mapping[str, list[int]]] = field(default_factory=dict)
    """label -> server id -> the Ns it holds in keys or forms we never edit."""
    indexed: Mapping[str, ServerAliases] = field(default_factory=dict)
    """server id -> the aliases indexed for it."""
    counts: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    """label -> N -> how many editable tokens of the label hold it."""

    def held_once(self, label: str) -> Collection[int] | None:
        """The Ns of the label's editable tokens when every holder holds exactly one, each its own (the
        index rule's fast path), without a look at each holder; None when not."""
        counts = self.counts.get(label, {})
        holders = len(self.editable.get(label, ()))
        if len(counts) == holders and sum(counts.values()) == holders:
            return counts.keys()
        return None

    def of(self, aliases: Mapping[str, ServerAliases]) -> Holders:
        """The index of exactly ``aliases`` (server id -> its aliases), made from this one."""
        changed = [sid for sid, found in aliases.items() if self.indexed.get(sid) is not found]
        changed += [sid for sid in self.indexed if sid not in aliases]
        if not changed:
            return self
        editable = _Copied(self.editable)
        pinned = _Copied(self.pinned)
        counts = _Copied(self.counts)
        for sid in changed:
            before, now = self.indexed.get(sid), aliases.get(sid)
            gone, came = _values_changed(before, now)
            for label, tokens in gone.items():
                held = counts.entry(label)
                for _, _, index in tokens:
                    held[index] -= 1
                    if not held[index]:
                        del held[index]
            for label, tokens in came.items():
                held = counts.entry(label)
                for _, _, index in tokens:
                    held[index] = held.get(index, 0) + 1
            touched = gone.keys() | came.keys()
            # Many labels (a new server, a first publish): one pass over the server; a few: their values.
            if before is None:
                whole: Mapping[str, list[Token]] | None = came  # every value came
            elif now is not None and len(touched) > len(now.values):
                whole = _by_label(now.values[slot] for slot in sorted(now.values))
            else:
                whole = None
            for label in touched:
                tokens = whole.get(label, []) if whole is not None else _tokens_of(now, label)
                if tokens:
                    editable.entry(label)[sid] = tuple(tokens)
                else:
                    editable.entry(label).pop(sid, None)
            if before is None or now is None or before.frozen != now.frozen:
                for label in {token.label for token in before.frozen_tokens()} if before else ():
                    pinned.entry(label).pop(sid, None)
                for token in now.frozen_tokens() if now else ():
                    pinned.entry(token.label).setdefault(sid, []).append(token.index)
        return Holders(editable.result(), pinned.result(), dict(aliases), counts.result())


def _values_changed(
    before: ServerAliases | None, now: ServerAliases | None
) -> tuple[dict[str, list[Token]], dict[str, list[Token]]]:
    """The load tokens of the slot values ``before`` held and ``now`` does not, and the other way round,
    by label in slot order: a value read again is the very object read before
    (``metadata.read_slot_value``), so a server whose one value changed costs that value, not its thousand
    tokens."""
    old = before.values if before is not None else {}
    new = now.values if now is not None else {}
    gone = _by_label(old[slot] for slot in sorted(old) if new.get(slot) is not old[slot])
    came = _by_label(new[slot] for slot in sorted(new) if old.get(slot) is not new[slot])
    return gone, came


def _by_label(values: Iterable[SlotValue]) -> dict[str, list[Token]]:
    """Label -> each load token of ``values`` (the value's own tuple), in their order: one pass, grouped,
    so that each label's entries are looked up once per server rather than once per token."""
    tokens: dict[str, list[Token]] = {}
    for value in values:
        for token in value.load:
            if (held := tokens.get(token[1])) is None:
                tokens[token[1]] = [token]
            else:
                held.append(token)
    return tokens


def _tokens_of(found: ServerAliases | None, label: str) -> list[Token]:
    """Each of the server's editable tokens of ``label`` (the value's own tuple), in slot order."""
    if found is None:
        return []
    values = found.values
    return [
        token
        for slot in sorted(values)
        if label in values[slot].labels
        for token in values[slot].load
        if token[1] == label
    ]


class _Copied(Generic[K, V]):
    """A label -> server id map made from another without changing it: a label's entry is copied the first
    time it is changed, and an entry left empty goes."""

    def __init__(self, original: Mapping[str, Mapping[K, V]]) -> None:
        self._map: dict[str, Mapping[K, V]] = dict(original)
        self._copied: dict[str, dict[K, V]] = {}

    def entry(self, label: str) -> dict[K, V]:
        copy = self._copied.get(label)
        if copy is None:
            copy = self._copied[label] = dict(self._map.get(label, {}))
            self._map[label] = copy
        return copy

    def result(self) -> dict[str, Mapping[K, V]]:
        for label, copy in self._copied.items():
            if not copy:
                del self._map[label]
        return self._map
