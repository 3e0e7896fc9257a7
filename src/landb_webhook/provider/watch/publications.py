"""What the cluster publishes per name, and when we last wrote it: what the DNS watcher compares DNS with.

Records reports every alias with its carriers' IPs (ingress nodes, and the addresses of the load
balancers whose ``landb-alias=`` tags hold it); ApplyChanges says which names it wrote, on servers or
tags. A name whose carriers change without a write of ours (another replica wrote, a node left) counts
as written when Records first sees the change. The write times and former carriers are kept in the
webhook's state ConfigMap (``STATE_KEY``), stored by the apply that wrote them, so a restart or another
replica knows how long a name has been waiting for LanDB. Bounded: one entry per name the nodes or load
balancers carry, plus removed names until DNS has dropped them or ``retention`` has passed since their
removal. Thread-safe: the provider writes, the watcher reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from threading import Lock
from typing import Protocol

import structlog

from landb_webhook.landb.names import dns_name_for
from landb_webhook.landb.plan import Plan
from landb_webhook.landb.propagation import Published

log = structlog.get_logger(__name__)

STATE_KEY = "dns-writes"
"""Its key in the state store (ports.StateStore)."""
DEFAULT_RETENTION = 86400.0
"""Seconds a removed name is remembered at most (DNS normally drops it within two sync periods)."""


@dataclass(frozen=True)
class _Entry:
    ips: frozenset[str]
    former: frozenset[str] = frozenset()
    written_at: float | None = None
    awaiting_report: bool = False
    """Written since Records last reported its carriers: what DNS should answer is not known yet."""


@dataclass
class PublicationLog:
    retention: float = DEFAULT_RETENTION
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _reported_once: bool = False
    _dropped: dict[str, float | None] = field(default_factory=dict)
    """Removed names forgotten (DNS dropped them, or the retention passed), with their write time: a state
    stored before is not to bring them back. Kept while the stored state still holds them."""
    _tagged: dict[str, int] = field(default_factory=dict)
    """DNS name -> how many load balancers' tags carry it, at the last report (for log lines)."""
    _lock: Lock = field(default_factory=Lock)
    _listeners: list[Callable[[], None]] = field(default_factory=list)

    def on_change(self, listener: Callable[[], None]) -> None:
        """``listener()`` is called (outside the lock) when a report makes a name new, moved or removed, or
        makes a written name's carriers known: the DNS watch asks about it then, not at its next round."""
        self._listeners.append(listener)

    def reported(
        self, carried: Mapping[str, Iterable[str]], now: float, tagged: Mapping[str, int] | None = None
    ) -> None:
        """What Records found: every alias the nodes or load balancers carry (DNS name -> the carriers'
        IPs); ``tagged``: DNS name -> how many load balancers' tags carry it."""
        with self._lock:
            before = dict(self._entries)
            self._tagged = dict(tagged or {})
            entries, seen_before = self._entries, self._reported_once
            self._reported_once = True
            current = {name: frozenset(ips) for name, ips in carried.items()}
            for name, ips in current.items():
                found = entries.get(name)
                if found is None:
                    entries[name] = _Entry(ips, written_at=now if seen_before else None)
                elif found.ips != ips:
                    written = found.written_at if found.awaiting_report or not seen_before else now
                    entries[name] = _Entry(ips, (found.former | found.ips) - ips, written)
                elif found.awaiting_report:
                    entries[name] = replace(found, awaiting_report=False)
            for name, found in list(entries.items()):
                if name in current:
                    continue
                if found.ips:  # removed since the last report
                    written = found.written_at if found.awaiting_report else now
                    entries[name] = _Entry(frozenset(), found.former | found.ips, written)
                elif found.written_at is None or now - found.written_at > self.retention:
                    self._dropped[name] = entries.pop(name).written_at
                elif found.awaiting_report:
                    entries[name] = replace(found, awaiting_report=False)
            changed = entries != before
        if changed:
            for listener in self._listeners:
                listener()

    def written(self, names: Iterable[str], now: float) -> None:
        """ApplyChanges changed the carriers of these names (DNS names) at ``now``."""
        with self._lock:
            for name in names:
                found = self._entries.get(name, _Entry(frozenset()))
                self._entries[name] = replace(found, written_at=now, awaiting_report=True)

    def settled(self, name: str) -> None:
        """DNS answers the name as published: the former carriers no longer matter."""
        with self._lock:
            found = self._entries.get(name)
            if found is not None and found.former:
                self._entries[name] = replace(found, former=frozenset())

    def forget(self, name: str) -> None:
        """A removed name DNS no longer answers."""
        with self._lock:
            found = self._entries.get(name)
            if found is not None and not found.ips:
                self._dropped[name] = self._entries.pop(name).written_at

    def published(self) -> dict[str, Published]:
        """Every name whose carriers are known, removed ones included (with no IPs)."""
        with self._lock:
            return {
                name: Published(entry.ips, entry.former, entry.written_at, self._tagged.get(name, 0))
                for name, entry in self._entries.items()
                if not entry.awaiting_report
            }

    def known(self) -> set[str]:
        """Every name in the log, those written and not reported yet included: a name being rewritten is
        not forgotten meanwhile."""
        with self._lock:
            return set(self._entries)

    def written_at(self, name: str) -> float | None:
        with self._lock:
            found = self._entries.get(name)
            return found.written_at if found is not None else None

    def to_json(self) -> str:
        with self._lock:
            return to_json(self._entries)

    def merge_json(self, text: str) -> None:
        """Take what the state store holds where it is newer than what is in memory (another replica
        wrote since, or this process just started); anything else than to_json wrote is said and ignored."""
        try:
            stored = from_json(text)
        except ValueError as error:
            log.warning("webhook state: the DNS write times are unreadable and ignored", error=str(error))
            return
        with self._lock:
            self._dropped = {name: at for name, at in self._dropped.items() if name in stored}
            for name, entry in stored.items():
                found = self._entries.get(name)
                if name in self._dropped and (entry.written_at or 0) <= (self._dropped[name] or 0):
                    continue
                if found is None:
                    self._entries[name] = entry
                elif (entry.written_at or 0) > (found.written_at or 0):
                    self._entries[name] = replace(
                        found, written_at=entry.written_at, former=found.former | entry.former
                    )


class _TagOutcome(Protocol):
    def changed_labels(self) -> set[str]: ...


class _Outcome(Protocol):
    def failed_labels(self) -> set[str]: ...
    @property
    def tags(self) -> _TagOutcome: ...


class _Options(Protocol):
    @property
    def dns_domain(self) -> str: ...
    @property
    def dry_run(self) -> bool: ...


def changed_names(plan: Plan, outcome: _Outcome, options: _Options) -> set[str]:
    """The DNS names whose carriers an apply changed, on servers or load balancers' tags (every write for
    them landed; none in a dry run)."""
    if options.dry_run:
        return set()
    labels = {token.label for server in plan.servers for token in (*server.added, *server.removed)}
    labels |= outcome.tags.changed_labels()
    return {dns_name_for(label, options.dns_domain) for label in labels - outcome.failed_labels()}


FORMAT = 2
"""Format 2 stores each distinct set of addresses once and refers to it by position: the carrier rule puts
every name on the same nodes, and one list per name made the state of 300 nodes x 1,000 names 3.7 MiB,
over a ConfigMap's 1 MiB, so it was never stored."""
BUDGET = 512 * 1024
"""Past this, the address sets are left out (each name keeps its write time; its addresses come back from
the next Records): the state shares one ConfigMap with the departed servers and the removal window."""


def to_json(entries: Mapping[str, _Entry]) -> str:
    sets: dict[frozenset[str], int] = {}
    names = {
        name: {
            "at": None if entry.written_at is None else round(entry.written_at),
            "ips": sets.setdefault(entry.ips, len(sets)),
            "was": sets.setdefault(entry.former, len(sets)),
        }
        for name, entry in sorted(entries.items())
    }
    text = _encoded({"format": FORMAT, "sets": [sorted(ips) for ips in sets], "names": names})
    if len(text) <= BUDGET:
        return text
    log.warning(
        "webhook state: the DNS names' addresses are too many to store; their write times are stored alone",
        names=len(names),
        address_sets=len(sets),
        size=len(text),
    )
    bare = {name: {"at": value["at"], "ips": None, "was": None} for name, value in names.items()}
    return _encoded({"format": FORMAT, "sets": [], "names": bare})


def _encoded(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def from_json(text: str) -> dict[str, _Entry]:
    try:
        found = json.loads(text)
        if not isinstance(found, dict):
            raise ValueError("an object by DNS name was expected")
        if not found:  # nothing stored yet: the state store's default
            return {}
        if found["format"] != FORMAT:
            raise ValueError(f"format {found['format']!r} is not one this version reads")
        sets = [_ips(ips) for ips in found["sets"]]
        names = found["names"]
        if not isinstance(names, dict):
            raise ValueError("an object by DNS name was expected")
        return {str(name): _entry(value, lambda ref: _set(sets, ref)) for name, value in names.items()}
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"not a list of DNS write times: {error}") from None


def _entry(value: object, addresses: Callable[[object], frozenset[str]]) -> _Entry:
    if not isinstance(value, dict):
        raise ValueError(f"an object expected, not {type(value).__name__}")
    at = value["at"]
    if at is not None and not isinstance(at, int | float):
        raise ValueError(f"a time in seconds expected, not {at!r}")
    return _Entry(addresses(value["ips"]), addresses(value["was"]), None if at is None else float(at))


def _set(sets: list[frozenset[str]], ref: object) -> frozenset[str]:
    """An address set by its position; None: not stored (over the budget)."""
    if ref is None:
        return frozenset()
    if isinstance(ref, bool) or not isinstance(ref, int) or not 0 <= ref < len(sets):
        raise ValueError(f"the position of one of {len(sets)} address sets expected, not {ref!r}")
    return sets[ref]


def _ips(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(ip, str) for ip in value):
        raise ValueError(f"a list of addresses expected, not {value!r}")
    return frozenset(value)
