"""One server's aliases made into holdings, kept slot value by slot value: what ``StatusAnalysis``
(``provider/status/analysis.py``) analyses again of a server after a write, and no more."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from landb_webhook.backends import Node
from landb_webhook.landb.metadata import ServerAliases, slot_key
from landb_webhook.provider.read.health import HealthPolicy, judge
from landb_webhook.provider.status.values import FrozenForm, Holding


class ServerHoldings:
    """One server's holdings by label, kept slot value by slot value.

    A write changes a few of a server's values and leaves the others the very objects read before
    (``metadata.read_slot_value``): only the changed values' holdings are made again, and only the names
    they hold are reported changed: an event that writes one value on every server rebuilds one holding per
    server, not every holding of every server."""

    def __init__(self, node: Node, server_id: str, health: HealthPolicy) -> None:
        self.node = node
        self.server_id = server_id
        self._health = health
        self.aliases = ServerAliases()
        self.by_label: dict[str, tuple[Holding, ...]] = {}
        """label -> its holdings on this server, by N then key."""
        self.plain: frozenset[str] = frozenset()
        self.frozen_forms: tuple[FrozenForm, ...] = ()
        self._by_slot: dict[int, dict[str, list[Holding]]] = {}
        """slot number -> label -> the holdings its value makes, in order."""
        self._frozen: dict[str, list[Holding]] = {}
        self._slots_of: dict[str, set[int]] = defaultdict(set)
        self.values_analysed = 0
        """Slot values made into holdings (a frozen key or form counts as one)."""

    def same_node(self, node: Node, server_id: str) -> bool:
        return self.node == node and self.server_id == server_id

    def labels(self) -> set[str]:
        return self.by_label.keys() | self.plain

    def take(self, aliases: ServerAliases) -> set[str]:
        """Bring the holdings up to ``aliases``; the labels whose holdings or plain alias changed."""
        before = self.aliases
        if aliases is before:
            return set()
        self.aliases = aliases
        touched: set[str] = set()
        for number in before.values.keys() | aliases.values.keys():
            value = aliases.values.get(number)
            if value is not None and value is before.values.get(number):
                continue
            made = self._by_slot.pop(number, {})
            for label in made:
                self._slots_of[label].discard(number)
            touched |= made.keys()
            if value is not None:
                self.values_analysed += 1
                key = slot_key(number)
                made = self._by_slot[number] = self._holdings_of(
                    ((key, label, index) for _, label, index in value.load), frozen=False
                )
                for label in made:
                    self._slots_of[label].add(number)
                touched |= made.keys()
        if aliases.frozen != before.frozen:
            touched |= self._frozen.keys()
            self.values_analysed += len(aliases.frozen)
            self._frozen = self._holdings_of(
                (key, token.label, token.index) for key, token in aliases.frozen_tokens_by_key()
            )
            touched |= self._frozen.keys()
            self.frozen_forms = tuple(
                FrozenForm(self.node.name, self.server_id, key, value)
                for key, value in sorted(aliases.frozen.items())
            )
        changed = {label for label in touched if self._merge(label)}
        plain = frozenset(label for label, _ in aliases.plain_aliases())
        changed |= plain ^ self.plain
        self.plain = plain
        return changed

    def _holdings_of(
        self, tokens: Iterable[tuple[str, str, int]], *, frozen: bool = True
    ) -> dict[str, list[Holding]]:
        """label -> a holding per (key, label, N) of ``tokens``, in order."""
        node, server_id = self.node, self.server_id
        serving = node.ready and not node.deleting
        unhealthy = health_problems(node, self._health)
        made: dict[str, list[Holding]] = {}
        for key, label, index in tokens:
            holding = Holding(
                label, index, node.name, server_id, key, frozen, node.is_ingress, serving, unhealthy
            )
            if (held := made.get(label)) is None:
                made[label] = [holding]
            else:
                held.append(holding)
        return made

    def _merge(self, label: str) -> bool:
        """Make the label's holdings here again from its values; whether they changed."""
        parts = [self._by_slot[number][label] for number in self._slots_of.get(label, ())]
        if label in self._frozen:
            parts.append(self._frozen[label])
        if not parts:
            self._slots_of.pop(label, None)
            return self.by_label.pop(label, None) is not None
        held = parts[0] if len(parts) == 1 else [h for part in parts for h in part]
        merged = tuple(held) if len(held) == 1 else tuple(sorted(held, key=_by_index_then_key))
        if self.by_label.get(label) == merged:
            return False
        self.by_label[label] = merged
        return True


def _by_index_then_key(holding: Holding) -> tuple[int, str]:
    return holding.index, holding.key


def health_problems(node: Node, health: HealthPolicy) -> tuple[str, ...]:
    """The carrier rule's reasons, whatever the grace period (the time does not change them)."""
    return judge(node, health, now=0.0).problems if node.is_ingress else ()
