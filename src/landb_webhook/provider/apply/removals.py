"""THE REMOVAL GUARD and its window: an apply that would take too many aliases off the air is refused whole.

A source misconfigured or a namespace deleted shows up as external-dns deleting a large share of the
names; LanDB would publish that within 15 minutes. So before anything is written (additions included),
``guard_removals`` refuses an apply after which at least ``min_count`` owned aliases, and more than
``max_share`` of those published, would have gone: by this apply alone, or within the window. An alias
has gone when it lost its last carrier: one still held in a key or form we never edit stays on the air
and does not count (``leaving_the_air``).

The window counts the applies of the last window, not one.

One apply at a time, a mass removal slips through in slices below the minimum count, or after junk
names have inflated what is published. So besides each apply on its own (its removals against what is
published now), the guard judges the aliases withdrawn within the window that were published *at the
window's start*, against how many were: the count seen just before the oldest apply still inside the
window (the count now when there is none). Every apply that passed the guard is remembered with that
count and the names it created, even one that removed nothing. A name's first apply inside the window
says whether it was on the air at the window's start: a name first created inside the window neither
raises the base nor counts when withdrawn again, so junk must stand a whole window before it counts, and
taking back a name just created is judged by the apply's own rule only; a name first withdrawn inside the
window was on the air at its start and counts, however often it was published again and withdrawn
since (re-publishing does not launder a withdrawal). Each name counts once.
The window is pure arithmetic on a given time (epoch seconds): no clock, no I/O; the guard says its
refusal (one error line, one count) and raises.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

from landb_webhook.metrics import Metrics
from landb_webhook.provider.interface import ApplyRefused
from landb_webhook.provider.options import DEFAULT_WINDOW_SECONDS, RemovalGuard

log = structlog.get_logger(__name__)

WINDOW_STATE_KEY = "removal-window"
"""Its key in the state store (backends.StateStore)."""
MAX_REMEMBERED_APPLIES = 10_000
"""Bound on memory (and on the state ConfigMap): a window holds one entry per apply."""


class RemovalRefused(ApplyRefused):
    """The removal guard refused an apply; nothing was written."""


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
        # A name's first apply inside the window tells whether it was on the air at the window's start:
        # first withdrawn, it was; first created, it was not (junk, or a name taken back and published
        # again is still one that was on the air: a re-publish does not hide its withdrawals).
        at_start: set[str] = set()
        created: set[str] = set()
        for past in inside:
            at_start.update(past.withdrawn - created)
            created.update(past.created - at_start)
        earlier = frozenset(at_start)
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


def guard_removals(
    guard: RemovalGuard,
    window: RemovalWindow,
    *,
    withdraw: set[str],
    publish: set[str],
    published: Mapping[str, Iterable[str]],
    staying: Mapping[str, Iterable[str]],
    now: float,
    dry_run: bool,
    metrics: Metrics,
) -> RemovalWindow:
    """Refuse (raise RemovalRefused) an apply that withdraws too many aliases, on its own or with the
    applies before it in ``window``; else return the window with this apply in it. ``published``: alias ->
    every carrier it has now (servers, ours or frozen, and load balancers); ``staying``: alias -> the
    carriers no write of ours can take it from (a value in a key or form we never edit). Only aliases
    that lose their last carrier count: a withdrawn name a frozen copy keeps on the air has not gone."""
    going = leaving_the_air(withdraw, published, staying)
    if guard.allow:
        if going:
            log.info("removal guard disabled: withdrawing", aliases=len(going), published=len(published))
        return window.cleared()
    count = window.count(now, len(published), going)
    if guard.trips(len(going), len(published)):
        withdrawn, base, earlier, within = len(going), len(published), 0, None
    elif going and guard.trips(len(count.withdrawn), count.published_at_start):
        withdrawn, base, earlier = len(count.withdrawn), count.published_at_start, count.earlier
        within = _duration(guard.window_seconds)
    else:
        created = [label for label in publish if not any(published.get(label, ()))]
        if (going or created) and not dry_run:  # others leave every count as it is
            return window.after(now, len(published), going, created)
        return window
    metrics.refused_changes_total.labels(reason="removal_guard").inc()
    log.error(
        "apply refused: it would remove too many aliases at once",
        withdrawn=withdrawn,
        withdrawn_now=len(going),
        withdrawn_earlier=earlier,
        published=base,
        window=within,
        max_share=guard.max_share,
        min_count=guard.min_count,
        aliases=going[:20],
        hint="if intended, set LANDB_ALLOW_MASS_REMOVAL=true for one loop",
    )
    removal = f"the apply would remove {withdrawn} of {base} aliases published"
    if within is not None:
        removal = (
            f"within {within}, this apply and those before it ({earlier} by earlier applies) "
            f"would remove {withdrawn} of {base} aliases published at the window's start"
        )
    raise RemovalRefused(
        f"removal guard: {removal} (more than {guard.max_share:.0%}); nothing was written. "
        "Set LANDB_ALLOW_MASS_REMOVAL=true if this is intended"
    )


def leaving_the_air(
    withdraw: Iterable[str], published: Mapping[str, Iterable[str]], staying: Mapping[str, Iterable[str]]
) -> list[str]:
    """The withdrawn aliases that lose their last carrier, sorted: on the air now, and kept there by no
    carrier this apply cannot write (``staying``)."""
    return sorted(
        label for label in withdraw if any(published.get(label, ())) and not any(staying.get(label, ()))
    )


def _duration(seconds: float) -> str:
    """``1h``, ``90m``, ``45s``: how the window is named in the refusal."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _labels(found: object) -> frozenset[str]:
    if not isinstance(found, list) or not all(isinstance(label, str) for label in found):
        raise ValueError("a list of alias labels was expected")
    return frozenset(found)
