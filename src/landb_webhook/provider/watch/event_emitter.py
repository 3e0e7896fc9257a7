"""The event emitter: the Kubernetes Events of provider.events, written off the request path.

Records, AdjustEndpoints, ApplyChanges and the DNS watch *tell* it a name's transition (``tell``: a
dictionary update under a lock, never a request, never an exception); its own thread writes the events
through the EventSink port. What it promises:

- **never in the way**: an event that cannot be written (RBAC 403, the API down, the object gone) changes
  no webhook answer and no readiness; it is counted (``landb_webhook_events_total{result}``) and said in
  one log line per kind of failure per period (logs.RepeatLimitedLog);
- **rate limited**: at most ``rate`` writes a second after a burst of ``burst`` (a token bucket; 10/s
  with a burst of 100 by default, so a first publish of 1,000 names writes its events over ~90 s, not in
  one second);
- **the last state of every name**: waiting events are kept by (object, name); a newer state of the same
  name supersedes the older one in place (``superseded``), so a burst keeps one event per name, the latest;
- **bounded memory**: at most ``queue_cap`` events wait; past it the oldest is dropped (``dropped``), and
  the ledger of what was told (provider.events) and the name -> object index are bounded too;
- **the object alive now**: an object that stopped asking for a name (an Ingress a route replaced) or whose
  name was removed (usually: it was deleted) is forgotten by the sink and the ledger before its next event,
  which reads it again: a deleted object gets none (``object_gone``), one created again under its name is
  told by its new uid, in a new event. An object deleted and created again between two loops, its names
  unchanged, keeps its old uid until then (the sink's cache).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from landb_webhook.backends import EventSink, EventWriteFailed, KubeEvent, ObjectRef
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.propagation import State, Transition, describe
from landb_webhook.logs import RepeatLimitedLog
from landb_webhook.metrics import Metrics
from landb_webhook.provider.watch.events import (
    SOURCE_LABEL,
    EventIntent,
    EventLedger,
    NameChange,
    SourceIndex,
    intent,
    source_of,
)
from landb_webhook.provider.watch.periodic import PeriodicWorker
from landb_webhook.provider.watch.rate import TokenBucket

log = structlog.get_logger(__name__)

IDLE_WAIT = 60.0
"""Seconds the emitter's thread sleeps when nothing waits (a ``tell`` wakes it at once)."""
FAILURE_HINTS = {
    "forbidden": "grant the webhook's service account create and patch on events (events.k8s.io) and get on "
    "ingresses, services and gateway.networking.k8s.io routes (deploy/rbac.yaml), or set LANDB_EVENTS=false",
    "unavailable": "the Kubernetes API failed or did not answer: this event is not retried, the name's next "
    "transition is told again",
    "event_gone": "the event to update had expired; a new one is written",
    "invalid": "the API refused the event",
}


@dataclass(frozen=True)
class EmitterOptions:
    rate: float = 10.0
    """Event writes a second, sustained."""
    burst: int = 100
    """Event writes allowed at once after a quiet time."""
    queue_cap: int = 10_000
    """Events waiting at most; past it the oldest waiting one is dropped."""


def sources_by_name(endpoints: Iterable[Endpoint]) -> dict[str, frozenset[ObjectRef]]:
    """Each DNS name (lower case) -> the objects the endpoints' ``resource`` labels name."""
    found: dict[str, set[ObjectRef]] = {}
    for endpoint in endpoints:
        source = source_of(endpoint.label(SOURCE_LABEL))
        if source is not None:
            found.setdefault(endpoint.dns_name.lower(), set()).add(source)
    return {name: frozenset(sources) for name, sources in found.items()}


def dns_change(change: Transition) -> NameChange | None:
    """What a DNS watch transition tells the owner (provider.events: a first look, pending and stale are
    no event)."""
    if change.before is None:
        return None
    known = change.after.known
    if known in (State.PUBLISHED, State.CONFLICT, State.GONE, State.SHARED):
        return NameChange(change.name, str(known), describe(change))
    return None


class EventEmitter:
    def __init__(
        self,
        sink: EventSink,
        metrics: Metrics,
        options: EmitterOptions = EmitterOptions(),
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: epoch seconds, stamped on the events; ``monotonic``: the rate limit's clock."""
        self._sink = sink
        self._metrics = metrics
        self._options = options
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._waiting: OrderedDict[tuple[ObjectRef, str], EventIntent] = OrderedDict()
        self._writing = False
        self._sources = SourceIndex()
        self._stale: set[ObjectRef] = set()
        """Objects to read again before their next event (the module docstring: the object alive now)."""
        self._ledger = EventLedger()
        """Used by the sending side only (one thread, or a test's steps)."""
        self._bucket = TokenBucket(options.rate, float(options.burst), monotonic())
        self._failures = RepeatLimitedLog(log)
        self._thread = PeriodicWorker(
            "landb-events", self.step, idle=IDLE_WAIT, after_failure=1.0, failed="event emitter step failed"
        )
        metrics.events_queued.set_function(self.waiting)

    # -- the request side: never blocks on I/O, never raises ----------------------------------------

    def learn(self, endpoints: Iterable[Endpoint]) -> None:
        found = sources_by_name(endpoints)
        with self._lock:
            for name, sources in found.items():
                self._stale |= self._sources.learn(name, sources)

    def tell(self, change: NameChange, endpoints: Iterable[Endpoint] = ()) -> None:
        given = sources_by_name(endpoints).get(change.name.lower(), frozenset())
        with self._lock:
            sources = given or self._sources.of(change.name)
            intents = [
                i for source in sorted(sources, key=_order) if (i := intent(source, change)) is not None
            ]
            if change.what == "removed":  # its object was deleted, most often: read it again first
                self._stale |= sources
            for told in intents:
                self._enqueue(told)
        if intents:
            self._thread.wake()

    def tell_dns(self, change: Transition) -> None:
        told = dns_change(change)
        if told is not None:
            self.tell(told)

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def idle(self) -> bool:
        """Nothing waits and nothing is being written: every event told so far has had its requests (the
        benchmark waits for it, to count them against the loop that told them)."""
        with self._lock:
            return not self._waiting and not self._writing

    def _enqueue(self, told: EventIntent) -> None:
        if told.key in self._waiting:
            self._metrics.events_total.labels(result="superseded").inc()
        self._waiting[told.key] = told  # in the place of the state it supersedes, which was older
        while len(self._waiting) > self._options.queue_cap:
            self._waiting.popitem(last=False)
            self._metrics.events_total.labels(result="dropped").inc()

    # -- the sending side ----------------------------------------------------------------------------

    def step(self) -> float | None:
        """Write the waiting events the rate limit allows now; returns the seconds until the next may be
        written, or None when none waits."""
        while True:
            with self._lock:
                stale, self._stale = self._stale, set()
            if stale:
                for regarding in stale:
                    self._sink.forget(regarding)
                self._ledger.forget_objects(stale)
            with self._lock:
                if not self._waiting:
                    return None
                if (wait := self._bucket.wait(self._monotonic())) > 0:
                    return wait
                _, told = self._waiting.popitem(last=False)
                self._writing = True
            try:
                event = self._ledger.record(told, self._clock())
                if event is not None:  # a repeat counted for a later series update costs no token
                    self._bucket.take(self._monotonic())
                    self._write(told, event)
            finally:
                with self._lock:
                    self._writing = False

    def _write(self, told: EventIntent, event: KubeEvent) -> None:
        try:
            self._sink.write(event)
        except EventWriteFailed as failure:
            self._ledger.forget(told)
            self._metrics.events_total.labels(result=failure.kind).inc()
            if failure.kind == "event_gone":  # expired (an hour by default): tell it afresh, as a new event
                retold = self._ledger.record(told, self._clock())
                if retold is not None:
                    self._write(told, retold)
                return
            regarding = f"{told.regarding.kind.lower()}/{told.regarding.namespace}/{told.regarding.name}"
            if failure.kind == "object_gone":  # deleted (its name's removal, most often): nobody to tell
                log.debug("Kubernetes event not written: its object is gone", regarding=regarding)
                return
            self._failures.warning(
                ("event not written", failure.kind),
                "Kubernetes event not written",
                kind=failure.kind,
                reason=failure.reason,
                regarding=regarding,
                hint=FAILURE_HINTS.get(failure.kind, ""),
            )
            return
        self._metrics.events_total.labels(result="created" if event.count == 1 else "updated").inc()

    # -- the thread ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        log.info(
            "Kubernetes events on",
            events_per_second=self._options.rate,
            burst=self._options.burst,
            queue_cap=self._options.queue_cap,
        )

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop(timeout)


def _order(source: ObjectRef) -> tuple[str, str, str]:
    return (source.namespace, source.kind, source.name)
