"""The DNS watcher: is each name on the air yet? Off the request path, in its own thread.

It asks DNS for every name the cluster publishes (provider.publications) and judges the answer
(landb.propagation); a change of judgement is one log line. It never touches a webhook answer: a resolver
down or slow costs the watcher's thread its time, nothing else. Bounded: at most ``queries_per_second``
questions a second (a token bucket), each name asked again every ``recheck_period``; among the names due,
one written since its last check goes first, then the one checked longest ago (none waits forever).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from landb_webhook.landb.propagation import (
    WATCHED_STATES,
    Answer,
    Judgement,
    NoAnswer,
    Published,
    State,
    Transition,
    describe,
    duration,
    judge,
    transition,
)
from landb_webhook.metrics import Metrics
from landb_webhook.provider.watch.events import NameEvents, NoEvents
from landb_webhook.provider.watch.periodic import PeriodicWorker
from landb_webhook.provider.watch.publications import PublicationLog
from landb_webhook.provider.watch.rate import TokenBucket

log = structlog.get_logger(__name__)

LOOK_AGAIN = 15.0
"""Seconds the watcher sleeps at most when nothing wakes it (a report that changes what is published does)."""
CONFLICT_HINT = (
    "LanDB answers the name for another device or as a plain alias (CNAME): find who holds it in LanDB, "
    "or pick another name"
)


class NameResolver(Protocol):
    """What DNS answers for a name (adapters.dns); never raises: a failure is ``NoAnswer``."""

    where: str
    """The resolvers asked, for log lines."""

    def resolve(self, dns_name: str) -> Answer: ...


@dataclass(frozen=True, kw_only=True)
class DnsWatchOptions:
    """Each field is a setting, whose default is written once, in config.Settings; wiring.dns_watch_options
    turns the settings into these options."""

    queries_per_second: float
    """LANDB_DNS_QUERIES_PER_SECOND."""
    recheck_period: float
    """LANDB_DNS_RECHECK_PERIOD."""
    sync_period: float
    """LanDB's publication period (LANDB_LANDB_SYNC_PERIOD): a foreign answer lasting two of these past the
    write is a conflict."""
    takeover_names: frozenset[str]
    """LANDB_TAKEOVER_NAMES: names another device answering too is ``shared``, never a conflict."""


@dataclass
class _Watched:
    judgement: Judgement | None = None
    checked_at: float | None = None
    written_at: float | None = None
    """The write time known at the last check: a later one makes the name due at once."""


class DnsWatch:
    def __init__(
        self,
        published: PublicationLog,
        resolver: NameResolver,
        options: DnsWatchOptions,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        events: NameEvents | None = None,
    ) -> None:
        """``clock``: epoch seconds, as the write times are; ``events``: where each change of judgement is
        told too (the Kubernetes Events of the names' objects)."""
        self._published = published
        self._resolver = resolver
        self._options = options
        self._metrics = metrics
        self._clock = clock
        self._events = events or NoEvents()
        self._bucket = TokenBucket(options.queries_per_second, max(1.0, options.queries_per_second), clock())
        self._watched: dict[str, _Watched] = {}
        self._lock = threading.Lock()
        self._resolver_failing = False
        self._thread = PeriodicWorker(
            "landb-dns-watch",
            self.step,
            idle=LOOK_AGAIN,
            after_failure=options.recheck_period,
            failed="DNS watch step failed; trying again in one recheck period",
        )
        published.on_change(self._thread.wake)  # a report that changed what is published: a step at once
        if metrics is not None:
            metrics.dns_oldest_pending_seconds.set_function(self.oldest_pending_age)

    # -- one step, driven by the thread or a test -------------------------------------------------

    def step(self) -> float:
        """Ask about the names that are due, as far as the query budget allows; returns the seconds until
        the next is due or the budget allows one more (at most one recheck period)."""
        now = self._clock()
        published = self._published.published()
        known = self._published.known()
        with self._lock:
            for name in self._watched.keys() - known:  # gone for good (forgotten), not just rewritten
                del self._watched[name]
            due = self._due(published, now)
        checked = 0
        takeover = self._options.takeover_names
        for name in due:
            if not self._bucket.take(self._clock()):
                break
            self._check(
                name, replace(published[name], taking_over=True) if name in takeover else published[name]
            )
            checked += 1
        self._count_states()
        now = self._clock()
        if checked < len(due):
            return self._bucket.wait(now)
        return self._until_next(now)

    def judgements(self) -> dict[str, Judgement]:
        with self._lock:
            return {name: w.judgement for name, w in self._watched.items() if w.judgement is not None}

    def oldest_pending_age(self) -> float:
        """Seconds the longest-pending name has waited (0 when none does)."""
        now = self._clock()
        pending = [j.since for j in self.judgements().values() if j.state is State.PENDING]
        return max(0.0, now - min(pending)) if pending else 0.0

    # -- the thread ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        log.info(
            "DNS watch on",
            resolvers=self._resolver.where,
            queries_per_second=self._options.queries_per_second,
            recheck_period=self._options.recheck_period,
        )

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop(timeout)

    # -- inside a step ------------------------------------------------------------------------------

    def _due(self, published: dict[str, Published], now: float) -> list[str]:
        def order(name: str) -> tuple[bool, float, float]:
            found = self._watched.get(name)
            written = published[name].written_at
            rewritten = found is None or (written is not None and written != found.written_at)
            checked = found.checked_at if found is not None and found.checked_at is not None else -1.0
            return (not rewritten, checked, -(written or 0.0))

        due = [name for name in published if self._is_due(name, published[name], now)]
        return sorted(due, key=order)

    def _is_due(self, name: str, published: Published, now: float) -> bool:
        found = self._watched.get(name)
        if found is None or found.checked_at is None:
            return True
        if published.written_at is not None and published.written_at != found.written_at:
            return True
        return now - found.checked_at >= self._options.recheck_period

    def _until_next(self, now: float) -> float:
        """Until the next name is due; at most ``LOOK_AGAIN`` (a report that changes what is published wakes
        the watch sooner)."""
        with self._lock:
            checked = [w.checked_at for w in self._watched.values() if w.checked_at is not None]
        next_due = min(checked, default=now + LOOK_AGAIN) + self._options.recheck_period
        return min(LOOK_AGAIN, max(0.0, next_due - now))

    def _check(self, name: str, published: Published) -> None:
        try:
            answer = self._resolver.resolve(name)
        except Exception as error:  # an adapter bug must not stop the watch
            answer = NoAnswer(f"{type(error).__name__}: {error}")
        now = self._clock()
        self._say_resolver(answer, name)
        with self._lock:
            watched = self._watched.setdefault(name, _Watched())
            previous = watched.judgement
            current = judge(published, answer, previous, now, sync_period=self._options.sync_period)
            watched.judgement, watched.checked_at, watched.written_at = current, now, published.written_at
            if current.known is State.GONE:
                del self._watched[name]
        if self._metrics is not None:
            result = "no_answer" if isinstance(answer, NoAnswer) else "answered"
            self._metrics.dns_queries_total.labels(result=result).inc()
        change = transition(name, published, previous, current, now)
        if change is not None:
            self._say(change)
            self._events.tell_dns(change)
            self._time_publication(change)
        if current.known is State.PUBLISHED:
            self._published.settled(name)
        elif current.known is State.GONE:
            self._published.forget(name)

    def _time_publication(self, change: Transition) -> None:
        """A name written, then seen published: how long LanDB took (a name already published when the
        watcher first looked, at start-up, is not timed)."""
        written_at = change.published.written_at
        if (
            self._metrics is not None
            and change.after.known is State.PUBLISHED
            and change.before is not None
            and written_at is not None
        ):
            self._metrics.dns_publication_seconds.observe(max(0.0, change.at - written_at))

    def _say(self, change: Transition) -> None:
        known, published = change.after.known, change.published
        fields: dict[str, object] = {"name": change.name, "dns": str(known), "before": str(change.before)}
        if published.written_at is not None:
            fields["since_write"] = duration(change.at - published.written_at)
        if known is State.CONFLICT:
            log.warning(describe(change), **fields, hint=CONFLICT_HINT)
        elif change.before is None and known is State.PUBLISHED:
            log.debug(describe(change), **fields)  # as expected at start-up: not news
        else:
            log.info(describe(change), **fields)

    def _say_resolver(self, answer: Answer, name: str) -> None:
        """A resolver failing is said once when it starts and once when it ends, never per name."""
        failing = isinstance(answer, NoAnswer)
        if failing == self._resolver_failing:
            return
        self._resolver_failing = failing
        if isinstance(answer, NoAnswer):
            log.warning(
                "DNS resolver does not answer: names keep their last DNS state until it does",
                resolvers=self._resolver.where,
                name=name,
                reason=answer.reason,
                hint="check LANDB_DNS_RESOLVERS and that the pod can reach them (UDP and TCP port 53)",
            )
        else:
            log.info("DNS resolver answers again", resolvers=self._resolver.where)

    def _count_states(self) -> None:
        if self._metrics is None:
            return
        states = [j.state for j in self.judgements().values()]
        for state in WATCHED_STATES:
            self._metrics.dns_names.labels(state=str(state)).set(states.count(state))


# -- status: every name asked once ----------------------------------------------------------------------

STATUS_CONCURRENCY = 8
"""Questions ``status`` has in flight at once."""


@dataclass(frozen=True)
class DnsCheck:
    """What ``status`` found in DNS, at ``now``; ``skipped`` says why nothing was asked."""

    judgements: Mapping[str, Judgement]
    published: Mapping[str, Published]
    now: float
    resolvers: str
    skipped: str | None = None


def ask_once(
    published: Mapping[str, Published], resolver: NameResolver, *, now: float, sync_period: float
) -> dict[str, Judgement]:
    """Each name asked once, at most ``STATUS_CONCURRENCY`` at a time, and judged as a first look; when the
    first gets no answer, the others are not asked (a resolver down would cost a timeout each)."""
    names = sorted(published)
    if not names:
        return {}
    first = resolver.resolve(names[0])
    if isinstance(first, NoAnswer):
        answers: dict[str, Answer] = dict.fromkeys(names, first)
    else:
        with ThreadPoolExecutor(STATUS_CONCURRENCY, thread_name_prefix="landb-dns-status") as pool:
            answers = {
                names[0]: first,
                **dict(zip(names[1:], pool.map(resolver.resolve, names[1:]), strict=True)),
            }
    return {name: judge(published[name], answers[name], None, now, sync_period=sync_period) for name in names}
