"""EVENTS FOR THE PEOPLE BEHIND EACH NAME: what a name's transition tells the owners of its Ingress,
Service or Gateway API route, as Kubernetes Events on that object (pure: no I/O, no clock of its own).

The people who own an Ingress or an HTTPRoute usually cannot read the webhook's logs; they run ``kubectl
describe httproute myapp``. external-dns sends the object behind each endpoint in the endpoint's labels
(``resource``: ``ingress/<namespace>/<name>``, ``service/...``, ``httproute/...``, ``grpcroute/...``,
``tlsroute/...``: external-dns endpoint/labels.go ``ResourceLabelKey``, source/gateway.go), so each
transition of a name becomes one event on each object asking for it:

| the name                                          | type    | reason       | what the note says            |
|---------------------------------------------------|---------|--------------|-------------------------------|
| written on its carriers                           | Normal  | Written      | where; DNS pending (LanDB)    |
| removed from every carrier                        | Normal  | Removed      | DNS drops it within a sync    |
| refused (by AdjustEndpoints or ApplyChanges)      | Warning | Refused      | why, and what to do (by kind) |
| its removal held back (the removal guard)         | Warning | Refused      | not removed: why, what to do  |
| DNS answers the carriers (after pending)          | Normal  | OnTheAir     | resolves to ..., N min after  |
| DNS answers what this cluster never published     | Warning | DnsConflict  | what it answers; who to ask   |
| DNS no longer answers a removed name              | Normal  | DnsGone      | no longer resolves            |
| taken over: DNS answers its carriers and another  | Normal  | TakingOver   | what else answers; when it is |
| device (LANDB_TAKEOVER_NAMES)                     |         |              | over                          |

The objects asking for a name are the last ones heard asking (``SourceIndex``): a name moving from an
Ingress to an HTTPRoute, or to a route re-created under another name, tells the new object from then on;
the one that stopped asking is read again before any event of its own (it may be gone).

A name's first look by the DNS watch (after a start) and its ``pending`` and ``stale`` judgements are no
event: ``Written`` already says DNS is pending, and a restart is not news to the owner.

One event per transition, never one per loop (``EventLedger``): the same reason and note again for the
same object and name is a repeat, which updates the event's series (count, last time) as client-go's
events.k8s.io recorder does: the first repeat at once (count 2), later ones at most every
``SERIES_REFRESH_SECONDS``; anything else is a new event.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from landb_webhook.backends import KubeEvent, ObjectRef
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.propagation import Transition
from landb_webhook.logs import printable

SOURCE_LABEL = "resource"
"""The endpoint label naming the object behind it (external-dns ``endpoint.ResourceLabelKey``)."""
SOURCE_KINDS = {
    "ingress": "Ingress",
    "service": "Service",
    "httproute": "HTTPRoute",
    "grpcroute": "GRPCRoute",
    "tlsroute": "TLSRoute",
}
"""The kinds of ``resource`` this webhook reports to (and is granted ``get`` on, for their uid); another
source (a CRD, a TCP or UDP route, which names no host of ours) gets no event."""
MAX_NOTE_BYTES = 1024
"""events.k8s.io/v1 refuses a note over 1 KiB."""
SERIES_REFRESH_SECONDS = 1800.0
"""A repeat past the first updates the event's series at most this often (client-go: 30 min)."""
LEDGER_CAP = 20_000
"""(object, name) pairs remembered; the oldest is forgotten first (its next event is a new one)."""
DNS_PENDING_NOTE = "DNS pending: LanDB publishes metadata about every 15 minutes"


def source_of(resource: str | None) -> ObjectRef | None:
    """The object a ``resource`` label names (``ingress/<namespace>/<name>``), or None for another kind
    or a malformed value."""
    if not resource:
        return None
    parts = resource.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    kind = SOURCE_KINDS.get(parts[0].lower())
    return ObjectRef(kind, parts[1], parts[2]) if kind is not None else None


@dataclass(frozen=True)
class NameChange:
    """One transition of one name, as the provider or the DNS watch knows it."""

    name: str
    """The DNS name (``myapp.cern.ch``)."""
    what: str
    """``written``, ``removed``, ``refused``, ``published``, ``conflict``, ``gone`` or ``shared``."""
    detail: str = ""
    """``written``/``removed``: where (``3 ingress nodes (a, b, c)``); ``refused``: the reason; DNS: the
    watch's sentence (landb.propagation.describe)."""
    kind: str = ""
    """``refused``: the fixed word of the refusal (``other_zone``, ``not_owned``, ``capacity``...)."""


@dataclass(frozen=True)
class EventIntent:
    """One event to tell ``regarding`` about ``name``."""

    regarding: ObjectRef
    name: str
    type: str
    reason: str
    action: str
    note: str

    @property
    def key(self) -> tuple[ObjectRef, str]:
        """What a newer intent supersedes: the last state of a name is what its owner needs."""
        return (self.regarding, self.name)


class NameEvents(Protocol):
    """What the provider and the DNS watch tell about names (an EventEmitter, or nothing)."""

    def learn(self, endpoints: Iterable[Endpoint]) -> None:
        """The objects behind these endpoints (their ``resource`` label) are the ones asking for them."""
        ...

    def tell(self, change: NameChange, endpoints: Iterable[Endpoint] = ()) -> None:
        """One transition of a name, for every object asking for it (those of ``endpoints`` first)."""
        ...

    def tell_dns(self, change: Transition) -> None:
        """The DNS watch's judgement of a name changed."""
        ...


class NoEvents:
    """LANDB_EVENTS=false, ``status``, tests: nothing is told to anyone."""

    def learn(self, endpoints: Iterable[Endpoint]) -> None:
        pass

    def tell(self, change: NameChange, endpoints: Iterable[Endpoint] = ()) -> None:
        pass

    def tell_dns(self, change: Transition) -> None:
        pass


REFUSAL_HINTS = {
    "other_zone": "only names under the webhook's domain can be published: change the host",
    "not_owned": "the name is held by hand or by another owner in LanDB: pick another name, or ask the "
    "webhook's operator to hand it over ('landb-webhook adopt --names <name>')",
    "plain_alias": "LanDB holds the name as a plain (CNAME) alias set by hand: ask its holder to remove it, "
    "or pick another name",
    "frozen_alias": "LanDB holds the name in a form the webhook never edits: ask its holder to remove it",
    "capacity": "the ingress nodes are out of metadata room: tell the cluster's operator",
    "no_ingress_nodes": "no node matches the ingress selector: tell the cluster's operator",
    "removal_guard": "too many of this namespace's names would leave DNS at once: their removal is held "
    "back (they stay published) until the webhook's operator decides (LANDB_ALLOW_MASS_REMOVAL)",
    "namespace_cap": "the namespace publishes as many names as the webhook's operator allows one namespace: "
    "remove names it no longer needs, or ask the operator to raise the cap",
    "name_policy": "the cluster's name policy does not let this namespace publish this name: pick a name "
    "it allows, or ask the webhook's operator",
    "write_failed": "a write did not land; the next loop tries again",
    "dns_elsewhere": "another device or someone's plain alias holds the name in LanDB: pick another name; "
    "to move it to this cluster on purpose (a cluster replacing another), ask the webhook's operator to list "
    "it in LANDB_TAKEOVER_NAMES",
    "owned_elsewhere": "another resource holds the name: pick another name, or ask its owner to give it up "
    "(delete it from their object)",
    "foreign_load_balancer": "a name goes only to a load balancer of a Service of its owner's namespace: "
    "point the target at your own, or ask the operator to share it (LANDB_SHARED_LOAD_BALANCERS)",
    "too_many_names": "ask for fewer names, or ask the operator to raise the cap",
}
"""What the owner can do, by refusal kind; a kind not listed says only the reason."""
_INVALID_HINT = "this host cannot be a LanDB alias: change it"
_INVALID_KINDS = frozenset(
    {"empty", "too_long", "invalid_characters", "wildcard", "multi_label", "load_marker", "record_type"}
)
"""landb.names.InvalidName kinds, and a record type that cannot be an alias: the host must change."""

CONFLICT_HINT = (
    "LanDB answers the name for another device or as a plain alias (CNAME): ask LanDB who holds it, or pick "
    "another name"
)

SHARED_NOTE = (
    "Both answer until the other device's holder removes the name in LanDB; then it resolves to this "
    "cluster alone (OnTheAir)"
)


EVENT_KINDS = {
    "written": ("Normal", "Written", "Write"),
    "removed": ("Normal", "Removed", "Remove"),
    "refused": ("Warning", "Refused", "Write"),
    "published": ("Normal", "OnTheAir", "Resolve"),
    "conflict": ("Warning", "DnsConflict", "Resolve"),
    "gone": ("Normal", "DnsGone", "Resolve"),
    "shared": ("Normal", "TakingOver", "Resolve"),
}
"""What -> (type, reason, action): the module docstring's table."""


def intent(regarding: ObjectRef, change: NameChange) -> EventIntent | None:
    """The event that ``change`` makes on ``regarding`` (module table), or None when it makes none."""
    row = EVENT_KINDS.get(change.what)
    if row is None:
        return None
    type_, reason, action = row
    return EventIntent(regarding, change.name, type_, reason, action, _within(note(change), MAX_NOTE_BYTES))


def note(change: NameChange) -> str:
    """The sentence the owner reads: the name, what happened, and what to do when it needs them. Printable
    only: a name outside the zone comes as its object asked for it, escapes and all."""
    name, detail = printable(change.name), printable(change.detail)
    match change.what:
        case "written":
            return f"{name} written on {detail}; {DNS_PENDING_NOTE}"
        case "removed":
            return f"{name} removed from {detail}; DNS drops it at LanDB's next publication"
        case "refused":
            hint = REFUSAL_HINTS.get(change.kind) or (_INVALID_HINT if change.kind in _INVALID_KINDS else "")
            held = "not removed (it stays published)" if change.kind == "removal_guard" else "not published"
            return f"{name} {held}: {detail}" + (f". What to do: {hint}" if hint else "")
        case "conflict":
            return f"{detail}. {CONFLICT_HINT}"
        case "shared":
            return f"{detail}. {SHARED_NOTE}"
    return detail


def _within(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` bytes of UTF-8 (with ``...`` when cut), never inside a character."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode(errors="ignore") + "..."


# -- one event per transition: the ledger ------------------------------------------------------------


@dataclass
class _Entry:
    reason: str
    note: str
    event_name: str
    first_at: float
    last_at: float
    count: int
    sent_at: float


class EventLedger:
    """What was last told to each (object, name), to tell a repeat from a transition (module docstring).

    ``record`` answers what to send for an intent at ``now``: a new event, a series update, or nothing
    (a repeat counted, to go with the next update). Bounded: ``cap`` pairs, the least recent forgotten."""

    def __init__(self, cap: int = LEDGER_CAP) -> None:
        self._cap = cap
        self._entries: OrderedDict[tuple[ObjectRef, str], _Entry] = OrderedDict()
        self._serial = 0

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, intent: EventIntent, now: float) -> KubeEvent | None:
        """The event to write for ``intent`` (``count`` 1: create it; more: update its series), or None."""
        key = intent.key
        entry = self._entries.get(key)
        if entry is not None and (entry.reason, entry.note) == (intent.reason, intent.note):
            self._entries.move_to_end(key)
            entry.count += 1
            entry.last_at = now
            if entry.count > 2 and now - entry.sent_at < SERIES_REFRESH_SECONDS:
                return None
            entry.sent_at = now
            return self._event(intent, entry)
        self._serial += 1
        # client-go names an event <object>.<nanoseconds, hex>; the serial keeps two in one tick apart.
        event_name = f"{intent.regarding.name}.{int(now * 1e9):x}{self._serial % 4096:03x}"
        entry = _Entry(intent.reason, intent.note, event_name, now, now, 1, now)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._cap:
            self._entries.popitem(last=False)
        return self._event(intent, entry)

    def forget(self, intent: EventIntent) -> None:
        """The event was not written, or is gone (events expire): the next one for this pair is new."""
        self._entries.pop(intent.key, None)

    def forget_objects(self, objects: Collection[ObjectRef]) -> None:
        """``objects`` may be gone or created again: the next event of each is a new one, never a series
        update of an event about the object it was. One pass over the ledger for all of them: a mass
        removal forgets thousands of objects at once."""
        for key in [key for key in self._entries if key[0] in objects]:
            del self._entries[key]

    @staticmethod
    def _event(intent: EventIntent, entry: _Entry) -> KubeEvent:
        return KubeEvent(
            name=entry.event_name,
            regarding=intent.regarding,
            type=intent.type,
            reason=intent.reason,
            action=intent.action,
            note=intent.note,
            first_at=entry.first_at,
            last_at=entry.last_at,
            count=entry.count,
        )


# -- which objects ask for a name ---------------------------------------------------------------------


class SourceIndex:
    """Name -> the objects whose endpoints asked for it last, learnt from the endpoints external-dns sends
    (AdjustEndpoints sees every desired one each loop; ApplyChanges' deletions carry it from the TXT
    claim). Bounded: ``cap`` names, the least recently learnt forgotten."""

    def __init__(self, cap: int = LEDGER_CAP) -> None:
        self._cap = cap
        self._sources: OrderedDict[str, frozenset[ObjectRef]] = OrderedDict()

    def learn(self, name: str, sources: frozenset[ObjectRef]) -> frozenset[ObjectRef]:
        """``sources``: every object asking for ``name`` now (they replace those known before). Returns
        the objects known before that no longer ask (deleted, perhaps: an Ingress a route replaced)."""
        if not sources:
            return frozenset()
        before = self._sources.pop(name.lower(), frozenset())
        self._sources[name.lower()] = sources
        while len(self._sources) > self._cap:
            self._sources.popitem(last=False)
        return before - sources

    def of(self, name: str) -> frozenset[ObjectRef]:
        return self._sources.get(name.lower(), frozenset())
