"""DNS PROPAGATION: where a name stands between our metadata write and what DNS answers for it.

LanDB publishes what the metadata says about every 15 minutes (its *sync period*), so for a while after
a write DNS still answers what was there before. One check of one name is judged from what we publish
(the carriers' IPv4s, those of nodes that carried it before, when we last wrote it), what DNS answered
and the clock, together with the name's previous judgement:

| DNS answers                                   | state                                             |
|-----------------------------------------------|---------------------------------------------------|
| exactly the carriers' IPs                     | ``published``                                     |
| every carrier's IP, and IPs of former carriers | ``stale`` (LanDB has not dropped them yet)       |
| former carriers' IPs only, for a removed name | ``stale``                                         |
| some carrier's IP missing, nothing foreign    | ``pending`` (since the write)                     |
| NXDOMAIN / no A record, name still carried    | ``pending``                                       |
| NXDOMAIN / no A record, name removed          | ``gone`` (the watcher then forgets it)            |
| an IP we never published, or a CNAME          | ``pending`` until it has lasted two sync periods  |
|                                               | past the write, then ``conflict``                 |
| the same, the name already in ``conflict``    | ``conflict``, whatever we wrote since             |
| nothing: the resolver failed or timed out     | ``unknown``; the name keeps its last judgement    |
| taken over: every carrier's IP, and others'    | ``shared`` (never ``conflict``)                   |
| taken over: a carrier missing, others or CNAME | ``pending`` (never ``conflict``)                  |

*Foreign* (an IP we never published, or a CNAME) is judged against what we publish now and what we
published before (``ips`` and ``former``): an answer that is neither our carriers' nor our former
carriers' is something this cluster never published. The write clock only delays the first judgement of
a conflict: after our write DNS may answer the name's previous holder until LanDB's next syncs. A later
write (a node joining or leaving changes the carriers) does not restart it: DNS answered something
foreign before that write and still does, so the conflict stands, and its alert does not clear and fire
again ~30 min after every node change. A conflict ends only when DNS answers something of ours (the
carriers, former carriers, or no name while we carry it: ``published``, ``stale``, ``pending``).

*Taken over*: a name listed in LANDB_TAKEOVER_NAMES (``Published.taking_over``, landb.first_look) is
expected to be answered by its former holder until that holder lets it go: what DNS answers besides ours
is ``shared`` while every carrier is answered too, ``pending`` while not, never ``conflict``; once only
the carriers answer, it is ``published`` as any name.

A resolver failure says nothing about the name: it never changes the judgement the name had, nor when
that began, and no transition is reported for it. A first look (the first check after a start, or the
one-shot ``status``) cannot know how long DNS has answered something else, nor that the name was in
conflict before: it counts from the write. Pure: no I/O, no clock of its own.
tests/property/test_propagation_properties.py checks the rows above.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class State(enum.StrEnum):
    PENDING = "pending"
    PUBLISHED = "published"
    STALE = "stale"
    CONFLICT = "conflict"
    UNKNOWN = "unknown"
    GONE = "gone"
    SHARED = "shared"


WATCHED_STATES = (State.PENDING, State.PUBLISHED, State.STALE, State.CONFLICT, State.UNKNOWN, State.SHARED)
"""The states a watched name can be in (a ``gone`` name is no longer watched): one gauge each."""
CONFLICT_AFTER_SYNC_PERIODS = 2
"""How many LanDB sync periods past the write a foreign answer must last to be a conflict."""


@dataclass(frozen=True)
class Published:
    """What this cluster publishes for one name."""

    ips: frozenset[str]
    """The carriers' IPv4s as the metadata says now; empty: the name was removed, DNS should drop it."""
    former: frozenset[str] = frozenset()
    """IPs of nodes that carried it before and no longer do: what LanDB may still answer for a while."""
    written_at: float | None = None
    """Epoch seconds of our last write for it; None when not known (written before anyone recorded it)."""
    load_balancers: int = 0
    """How many of its carriers are load balancers (``landb-alias=`` tags), the rest being ingress nodes."""
    taking_over: bool = False
    """Listed for take-over (LANDB_TAKEOVER_NAMES): another device answering too is expected, no conflict."""


@dataclass(frozen=True)
class Addresses:
    """A records (never empty: an empty answer is :class:`NoName`)."""

    ips: frozenset[str]


@dataclass(frozen=True)
class Alias:
    """A CNAME for the name: LanDB holds it as someone's plain alias, or another zone answers."""

    target: str


@dataclass(frozen=True)
class NoName:
    """NXDOMAIN, or the name exists with no A record."""


@dataclass(frozen=True)
class NoAnswer:
    """The resolver failed (timeout, SERVFAIL, refused, unreachable): nothing is known about the name."""

    reason: str


Answer = Addresses | Alias | NoName | NoAnswer


@dataclass(frozen=True)
class Judgement:
    """One name's standing after its last check."""

    known: State | None
    """The state the last real answer gave; None until DNS has answered once."""
    since: float
    """When ``known`` began (for ``pending`` after a write: the write)."""
    answer: Answer
    """The last answer, failures included."""
    mismatch_since: float | None = None
    """When DNS began answering something we never published; None while it does not."""
    unanswered_since: float | None = None
    """When the resolver began failing for this name; None while it answers."""

    @property
    def state(self) -> State:
        return State.UNKNOWN if self.known is None or self.unanswered_since is not None else self.known


@dataclass(frozen=True)
class Transition:
    """A change of a name's known state, to be said once."""

    name: str
    before: State | None
    """None: the name's first judgement."""
    after: Judgement
    published: Published
    at: float


def judge(
    published: Published, answer: Answer, previous: Judgement | None, now: float, *, sync_period: float
) -> Judgement:
    """The name's standing given this answer (module docstring); ``previous`` is its last judgement."""
    if isinstance(answer, NoAnswer):
        if previous is None:
            return Judgement(None, now, answer, unanswered_since=now)
        return replace(previous, answer=answer, unanswered_since=previous.unanswered_since or now)
    if published.taking_over and published.ips and _foreign(published, answer):
        state = State.SHARED if _answers_every_carrier(published, answer) else State.PENDING
        return Judgement(state, _since(state, published, previous, now), answer)
    mismatch_since = None
    if _foreign(published, answer):
        first_look = previous is None or previous.known is None
        if previous is not None and previous.mismatch_since is not None:
            mismatch_since = previous.mismatch_since
        elif first_look and published.written_at is not None:
            mismatch_since = min(published.written_at, now)
        else:
            mismatch_since = now
    in_conflict = previous is not None and previous.known is State.CONFLICT
    state = _state(published, answer, mismatch_since, now, sync_period, in_conflict=in_conflict)
    return Judgement(state, _since(state, published, previous, now), answer, mismatch_since=mismatch_since)


def transition(
    name: str, published: Published, previous: Judgement | None, current: Judgement, now: float
) -> Transition | None:
    """The change to say, if the known state changed: never for a resolver failure."""
    before = previous.known if previous is not None else None
    if current.known is None or current.known == before:
        return None
    return Transition(name, before, current, published, now)


def describe(change: Transition) -> str:
    """One line for an operator: what DNS does with the name now, and how long after the write."""
    name, answer, published = change.name, change.after.answer, change.published
    written = published.written_at
    after_write = f", {duration(change.at - written)} after the write" if written is not None else ""
    nodes = _carriers(published)
    match change.after.known:
        case State.PUBLISHED:
            return f"{name} resolves to {nodes}{after_write}"
        case State.STALE:
            stale = _ips(_stale_ips(published, answer))
            return f"{name} still resolves to {stale} of nodes that no longer carry it{after_write}"
        case State.PENDING:
            return f"{name} does not resolve to {nodes} yet ({answered(answer)}){after_write}"
        case State.CONFLICT:
            never = "something this cluster never published"
            return f"{name} is answered by {never} ({answered(answer)}){after_write}"
        case State.GONE:
            return f"{name} no longer resolves{after_write.replace('write', 'removal')}"
        case State.SHARED:
            others = _ips(_others(published, answer))
            return f"{name} resolves to {nodes} and to {others} of another device: taking over{after_write}"
    return f"{name}: {change.after.state}"


def _carriers(published: Published) -> str:
    """``its 3 ingress nodes``, ``its load balancer``: one address per node, any number per load balancer."""
    lbs = published.load_balancers
    if not lbs:
        return f"its {_counted(len(published.ips), 'ingress node')}"
    return f"its {'load balancer' if lbs == 1 else _counted(lbs, 'load balancer')}"


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def answered(answer: Answer) -> str:
    """What DNS said, in a few words."""
    match answer:
        case Addresses(ips):
            return f"A {_ips(ips)}"
        case Alias(target):
            return f"CNAME {target}"
        case NoName():
            return "no such name"
        case NoAnswer(reason):
            return f"no answer: {reason}"
    raise AssertionError(answer)


def duration(seconds: float) -> str:
    """``45 s``, ``11 min``, ``3 h 5 min``, ``2 d 4 h``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _foreign(published: Published, answer: Answer) -> bool:
    """Whether DNS answers something we never published for the name."""
    if isinstance(answer, Alias):
        return True
    if isinstance(answer, Addresses):
        return not answer.ips <= published.ips | published.former
    return False


def _answers_every_carrier(published: Published, answer: Answer) -> bool:
    return isinstance(answer, Addresses) and published.ips <= answer.ips


def _others(published: Published, answer: Answer) -> frozenset[str]:
    """The addresses DNS answers that this cluster never published."""
    return answer.ips - published.ips - published.former if isinstance(answer, Addresses) else frozenset()


def _state(
    published: Published,
    answer: Answer,
    mismatch_since: float | None,
    now: float,
    sync_period: float,
    *,
    in_conflict: bool,
) -> State:
    if mismatch_since is not None:
        if in_conflict:  # a conflict stands while DNS answers something foreign, whatever we wrote since
            return State.CONFLICT
        counted_from = max(mismatch_since, published.written_at or mismatch_since)
        lasted = now - counted_from
        return State.CONFLICT if lasted > CONFLICT_AFTER_SYNC_PERIODS * sync_period else State.PENDING
    if isinstance(answer, NoName):
        return State.PENDING if published.ips else State.GONE
    assert isinstance(answer, Addresses)
    if answer.ips == published.ips:
        return State.PUBLISHED
    if published.ips <= answer.ips:  # every carrier answered, and former ones (or, removed: only those)
        return State.STALE
    return State.PENDING


def _since(state: State, published: Published, previous: Judgement | None, now: float) -> float:
    if previous is not None and previous.known == state:
        return previous.since
    written = published.written_at
    if state is not State.PENDING or written is None or written > now:
        return now
    # A pending that our write began is as old as the write; one that began otherwise, from now.
    began_with_the_write = previous is None or previous.known is None or written >= previous.since
    return written if began_with_the_write else now


def _stale_ips(published: Published, answer: Answer) -> frozenset[str]:
    return answer.ips - published.ips if isinstance(answer, Addresses) else frozenset()


def _ips(ips: frozenset[str]) -> str:
    return ",".join(sorted(ips)) or "-"
