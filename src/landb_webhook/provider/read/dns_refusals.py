"""The names refused before their first write because DNS answers them elsewhere (provider.first_look),
kept in the webhook's state ConfigMap (``STATE_KEY``) so that ``status`` can show them.

One entry per name: what DNS answered and when it was last refused. A name leaves the record when it is
written (DNS cleared, or listed for take-over) or when it has not been refused for ``RETENTION`` (external-dns
no longer asks for it); at most ``CAP`` names are kept, the least recently refused dropped first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

STATE_KEY = "dns-refused"
"""Its key in the state store (ports.StateStore)."""
RETENTION = 86400.0
"""Seconds a name is kept without being refused again."""
CAP = 1000


@dataclass(frozen=True)
class DnsRefusal:
    name: str
    """The DNS name (``myapp.cern.ch``)."""
    answer: str
    """What DNS answered, in a few words (``A 10.9.9.9``, ``CNAME web.cern.ch.``)."""
    at: float
    """Epoch seconds of the last refusal."""


@dataclass
class DnsRefusals:
    entries: dict[str, DnsRefusal] = field(default_factory=dict)

    def refused(self, refusals: Iterable[DnsRefusal]) -> None:
        for refusal in refusals:
            self.entries.pop(refusal.name, None)
            self.entries[refusal.name] = refusal  # the most recent last

    def written(self, names: Iterable[str]) -> None:
        for name in names:
            self.entries.pop(name, None)

    def expire(self, now: float) -> None:
        kept = [r for r in self.entries.values() if now - r.at <= RETENTION]
        self.entries = {r.name: r for r in sorted(kept, key=lambda r: r.at)[-CAP:]}

    def merged(self, stored: Mapping[str, DnsRefusal]) -> None:
        """Take what another replica (or this process before a restart) stored, where it is newer."""
        for name, refusal in stored.items():
            found = self.entries.get(name)
            if found is None or refusal.at > found.at:
                self.entries[name] = refusal

    def to_json(self) -> str:
        return json.dumps(
            {name: {"answer": r.answer, "at": round(r.at)} for name, r in sorted(self.entries.items())},
            separators=(",", ":"),
        )


def from_json(text: str) -> dict[str, DnsRefusal]:
    """What ``DnsRefusals.to_json`` wrote; ValueError for anything else."""
    try:
        found = json.loads(text)
        if not isinstance(found, dict):
            raise ValueError("an object by DNS name was expected")
        return {
            str(name): DnsRefusal(str(name), str(value["answer"]), float(value["at"]))
            for name, value in found.items()
        }
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"not a list of names refused by DNS: {error}") from None
