"""THE REMOVAL WINDOW: what the removal guard counts over the applies of the last window, not one.

One apply at a time, a mass removal slips through in slices below the minimum count, or after junk
names have inflated what is published. So besides each apply on its own (its removals against what is
published now), the guard judges the aliases withdrawn within the window that were published *at the
window's start*, against how many were: the count seen just before the oldest apply still inside the
window (the count now when there is none). Every apply that passed the guard is remembered with that
count and the names it created, even one that removed nothing: names created inside the window neither
raise the base nor count when withdrawn again, so junk must stand a whole window before it counts, and
taking back a name just created is judged by the apply's own rule only. Each name counts once.
Pure arithmetic on a given time (epoch seconds): no clock, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_WINDOW_SECONDS = 3600.0
WINDOW_STATE_KEY = "removal-window"
"""Its key in the state store (ports.StateStore)."""
MAX_REMEMBERED_APPLIES = 10_000
"""Bound on memory (and on the state ConfigMap): a window holds one entry per apply."""


@dataclass(frozen=True)
class PastApply:
    at: float
    """Epoch seconds."""
    published_before: int
    """Aliases published just before it was written."""
    withdrawn: frozenset[str]
    """The owned aliases it withdrew that were published."""
    created: frozenset[str] = frozenset()
    """The aliases it published that were not published before."""


@dataclass(frozen=True)
class WindowCount:
    withdrawn: frozenset[str]
    """The aliases published at the window's start and withdrawn within it, this apply's included."""
    published_at_start: int
    earlier: int
    """How many of ``withdrawn`` earlier applies took."""


@dataclass(frozen=True)
class RemovalWindow:
    """The applies of the last ``seconds``, oldest first. Immutable: each apply gives a new window."""

    seconds: float = DEFAULT_WINDOW_SECONDS
    applies: tuple[PastApply, ...] = ()

    def current(self, now: float) -> tuple[PastApply, ...]:
        """The applies still inside the window at ``now``; one stamped later than ``now`` (the wall clock
        stepped back) stays, so a clock change never forgets a removal early."""
        return tuple(past for past in self.applies if past.at >= now - self.seconds)

    def count(self, now: float, published: int, withdrawing: Iterable[str]) -> WindowCount:
        """What the guard judges if an apply withdrawing ``withdrawing`` runs at ``now`` with
        ``published`` aliases on the air."""
        inside = self.current(now)
        created = frozenset().union(*(past.created for past in inside))
        earlier = frozenset().union(*(past.withdrawn for past in inside)) - created
        return WindowCount(
            withdrawn=earlier | (frozenset(withdrawing) - created),
            published_at_start=inside[0].published_before if inside else published,
            earlier=len(earlier),
        )

    def after(
        self, now: float, published: int, withdrawn: Iterable[str], created: Iterable[str] = ()
    ) -> RemovalWindow:
        """The window once an apply at ``now`` has passed the guard."""
        past = PastApply(now, published, frozenset(withdrawn), frozenset(created))
        kept = (*self.current(now), past)
        return RemovalWindow(self.seconds, kept[-MAX_REMEMBERED_APPLIES:])

    def merged(self, other: RemovalWindow) -> RemovalWindow:
        """Both windows' applies (another replica's, or those stored before a restart), each once."""
        applies = sorted({*self.applies, *other.applies}, key=lambda past: (past.at, past.published_before))
        return RemovalWindow(self.seconds, tuple(applies[-MAX_REMEMBERED_APPLIES:]))

    def cleared(self) -> RemovalWindow:
        """An intended mass removal (the override) is not held against the applies after it."""
        return RemovalWindow(self.seconds)

    def to_json(self) -> str:
        return json.dumps(
            [
                [past.at, past.published_before, sorted(past.withdrawn), sorted(past.created)]
                for past in self.applies
            ],
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str, seconds: float) -> RemovalWindow:
        """Raises ValueError on anything but what to_json writes."""
        try:
            found = json.loads(text)
            if not isinstance(found, list):
                raise ValueError("a list of applies was expected")
            applies = tuple(
                PastApply(float(at), int(published), _labels(withdrawn), _labels(created))
                for at, published, withdrawn, created in found
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"not a removal window: {error}") from None
        return cls(seconds, tuple(sorted(applies, key=lambda past: past.at)))


def _labels(found: object) -> frozenset[str]:
    if not isinstance(found, list) or not all(isinstance(label, str) for label in found):
        raise ValueError("a list of alias labels was expected")
    return frozenset(found)
