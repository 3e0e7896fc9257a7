"""THE REMOVAL GUARD and its window: the removals of a namespace that would take too many of its aliases off
the air are held back; everything else of the apply goes on.

A source misconfigured or a namespace deleted shows up as external-dns deleting a large share of the
names; LanDB would publish that within 15 minutes. So before anything is written, ``guard_removals``
judges each namespace on its own (the namespace of an alias is the one its claim's, else its endpoint's,
``resource`` label names: provider.ownership.tenancy; the aliases of no namespace are judged together): the
removals after which at least ``min_count`` of its aliases, and more than ``max_share`` of those it
publishes, would have gone, by this apply alone or within the window, are *held back*. Their aliases keep
their tokens and their claims; external-dns sends their deletion again every loop (Records still shows
them), and they go once the guard lets them (the window has passed, or LANDB_ALLOW_MASS_REMOVAL). The other
namespaces' removals, and every addition and move, are applied: one team's churn freezes no other. An
alias has gone when it lost its last carrier: one still held in a key or form we never edit stays on the
air and does not count (``leaving_the_air``).

| a namespace's removals in this apply                  | what happens                                     |
|-------------------------------------------------------|--------------------------------------------------|
| under ``min_count``, or at most ``max_share`` of its  | applied; remembered in its window                |
| published, alone and with its window                  |                                                  |
| trip the guard, alone or with its window              | held back: said once, counted, told to their     |
|                                                       | objects (Refused); its creations are remembered  |
| any, with LANDB_ALLOW_MASS_REMOVAL                    | applied; every window starts afresh              |

The window counts the applies of the last window, not one, each namespace's apart.

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
since (re-publishing does not launder a withdrawal). Each name counts once. Every namespace has its own
entries in the window (``PastApply.namespace``), its base the count of its own aliases.
The window is pure arithmetic on a given time (epoch seconds): no clock, no I/O; the guard returns what it
holds back, which the apply refuses (a ``removal_guard`` refusal per name) and says (one error line per
namespace and set of names, said once: provider.refusals).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

from landb_webhook.provider.options import RemovalGuard

log = structlog.get_logger(__name__)

WINDOW_STATE_KEY = "removal-window"
"""Its key in the state store (backends.StateStore)."""
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
    namespace: str = ""
    """Whose aliases these are (provider.ownership.tenancy); ``""``: aliases of no namespace, and every alias
    of a window stored before the guard counted per namespace."""


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

    seconds: float
    applies: tuple[PastApply, ...] = ()

    def current(self, now: float) -> tuple[PastApply, ...]:
        """The applies still inside the window at ``now``; one stamped later than ``now`` (the wall clock
        stepped back) stays, so a clock change never forgets a removal early."""
        return tuple(past for past in self.applies if past.at >= now - self.seconds)

    def count(
        self, now: float, published: int, withdrawing: Iterable[str], namespace: str = ""
    ) -> WindowCount:
        """What the guard judges if an apply withdrawing ``withdrawing`` of ``namespace`` runs at ``now``
        with ``published`` aliases of that namespace on the air."""
        inside = tuple(past for past in self.current(now) if past.namespace == namespace)
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
        self,
        now: float,
        published: int,
        withdrawn: Iterable[str],
        created: Iterable[str] = (),
        namespace: str = "",
    ) -> RemovalWindow:
        """The window once an apply at ``now`` has passed the guard for ``namespace``."""
        past = PastApply(now, published, frozenset(withdrawn), frozenset(created), namespace)
        kept = (*self.current(now), past)
        return RemovalWindow(self.seconds, kept[-MAX_REMEMBERED_APPLIES:])

    def merged(self, other: RemovalWindow) -> RemovalWindow:
        """Both windows' applies (another replica's, or those stored before a restart), each once."""
        applies = sorted(
            {*self.applies, *other.applies}, key=lambda past: (past.at, past.namespace, past.published_before)
        )
        return RemovalWindow(self.seconds, tuple(applies[-MAX_REMEMBERED_APPLIES:]))

    def cleared(self) -> RemovalWindow:
        """An intended mass removal (the override) is not held against the applies after it."""
        return RemovalWindow(self.seconds)

    def to_json(self) -> str:
        """One list per apply and namespace: ``[at, published, withdrawn, created]``, and the namespace
        fifth when there is one (the form before namespaces were counted apart reads as no namespace)."""
        return json.dumps(
            [
                [past.at, past.published_before, sorted(past.withdrawn), sorted(past.created)]
                + ([past.namespace] if past.namespace else [])
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
            applies = tuple(_past_apply(entry) for entry in found)
        except (TypeError, ValueError) as error:
            raise ValueError(f"not a removal window: {error}") from None
        return cls(seconds, tuple(sorted(applies, key=lambda past: past.at)))


@dataclass(frozen=True)
class Held:
    """The removals of one namespace the guard holds back, and why (the sentence for the answer)."""

    namespace: str
    labels: tuple[str, ...]
    reason: str
    withdrawn: int
    """What the guard counted: this apply's removals, with those of its window when that tripped it."""
    published: int
    """What it counted them against: the namespace's aliases now, or at the window's start."""
    earlier: int = 0
    """How many of ``withdrawn`` earlier applies of the window took."""


@dataclass(frozen=True)
class Guarded:
    """What the guard decided for one apply: the window with its passing removals, and what it held back."""

    window: RemovalWindow
    held: tuple[Held, ...] = ()

    def held_labels(self) -> set[str]:
        return {label for held in self.held for label in held.labels}


def guard_removals(
    guard: RemovalGuard,
    window: RemovalWindow,
    *,
    withdraw: set[str],
    publish: set[str],
    published: Mapping[str, Iterable[str]],
    staying: Mapping[str, Iterable[str]],
    namespaces: Mapping[str, str] | None = None,
    now: float,
    dry_run: bool,
) -> Guarded:
    """Judge the removals of each namespace on their own and with the applies before them in ``window``;
    return the window with the removals that pass, and those held back. ``published``: alias -> every
    carrier it has now (servers, ours or frozen, and load balancers); ``staying``: alias -> the carriers
    no write of ours can take it from (a value in a key or form we never edit); ``namespaces``: alias ->
    its namespace (an alias not in it has none: ``""``). Only aliases that lose their last carrier count:
    a withdrawn name a frozen copy keeps on the air has not gone. What is held back is said by the apply
    (``HELD_BACK``, ``held_fields``), with its other refusals (provider.refusals)."""
    going = leaving_the_air(withdraw, published, staying)
    if guard.allow:
        if going:
            log.info("removal guard disabled: withdrawing", aliases=len(going), published=len(published))
        return Guarded(window.cleared())
    whose = namespaces or {}
    going_of = _by_namespace(going, whose)
    published_of = _by_namespace((label for label, held in published.items() if any(held)), whose)
    created_of = _by_namespace((label for label in publish if not any(published.get(label, ()))), whose)
    held: list[Held] = []
    for namespace in sorted(going_of.keys() | created_of.keys()):
        leaving, created = going_of.get(namespace, []), created_of.get(namespace, [])
        base = len(published_of.get(namespace, ()))
        verdict = _judge(guard, window.count(now, base, leaving, namespace), namespace, leaving, base)
        if verdict is not None:
            held.append(verdict)
            leaving = []  # held back: only its creations are remembered
        if (leaving or created) and not dry_run:  # others leave every count as it is
            window = window.after(now, base, leaving, created, namespace)
    return Guarded(window, tuple(held))


def _judge(
    guard: RemovalGuard, count: WindowCount, namespace: str, going: list[str], base: int
) -> Held | None:
    """The removals ``going`` of ``namespace`` held back, and why (``count``: its window with them); None
    when they may go."""
    if not going:
        return None
    if guard.trips(len(going), base):
        withdrawn, counted_against, earlier = len(going), base, 0
        removal = f"the apply would remove {withdrawn} of {base} aliases published"
    elif guard.trips(len(count.withdrawn), count.published_at_start):
        withdrawn, counted_against, earlier = len(count.withdrawn), count.published_at_start, count.earlier
        removal = (
            f"within {_duration(guard.window_seconds)}, this apply and those before it ({earlier} by earlier "
            f"applies) would remove {withdrawn} of {counted_against} aliases published at the window's start"
        )
    else:
        return None
    reason = (
        f"removal guard: {_whose(namespace)}: {removal} (more than {guard.max_share:.0%}); these removals "
        "are held back and tried again every loop, the rest was applied. "
        "Set LANDB_ALLOW_MASS_REMOVAL=true if this is intended"
    )
    return Held(namespace, tuple(going), reason, withdrawn, counted_against, earlier)


HELD_BACK = "removals held back: they would take too many of a namespace's aliases off the air at once"


def held_fields(held: Held, guard: RemovalGuard) -> dict[str, object]:
    """The fields of the ``HELD_BACK`` line: what the guard counted, against what."""
    return {
        "namespace": held.namespace or None,
        "withdrawn": held.withdrawn,
        "withdrawn_now": len(held.labels),
        "withdrawn_earlier": held.earlier,
        "published": held.published,
        "reason": held.reason,
        "max_share": guard.max_share,
        "min_count": guard.min_count,
        "aliases": list(held.labels[:20]),
        "hint": "if intended, set LANDB_ALLOW_MASS_REMOVAL=true for one loop",
    }


def _whose(namespace: str) -> str:
    return f"namespace {namespace}" if namespace else "the aliases of no namespace"


def _by_namespace(labels: Iterable[str], namespaces: Mapping[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for label in sorted(labels):
        found[namespaces.get(label, "")].append(label)
    return dict(found)


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


def _past_apply(entry: object) -> PastApply:
    if not isinstance(entry, list) or len(entry) not in (4, 5):
        raise ValueError("an apply is [at, published, withdrawn, created] and maybe its namespace")
    at, published, withdrawn, created, *namespace = entry
    if namespace and (not isinstance(namespace[0], str) or not namespace[0]):
        raise ValueError("a namespace is a non-empty string")
    return PastApply(float(at), int(published), _labels(withdrawn), _labels(created), *namespace)


def _labels(found: object) -> frozenset[str]:
    if not isinstance(found, list) or not all(isinstance(label, str) for label in found):
        raise ValueError("a list of alias labels was expected")
    return frozenset(found)
