"""The demo's walk: one name from the write to DNS and back, told as an operator sees it.

It plays external-dns against the demo's webhook (an ApplyChanges that creates the name with its TXT
claim, Records every loop, an ApplyChanges that deletes it) and says, as they change, the state the
webhook's DNS watcher gives the name (read from ``/metrics``: ``landb_webhook_dns_names``), what the
simulated LanDB publishes at each of its syncs (written -> pending -> published, removed -> stale -> gone)
and the events the webhook writes on the object asking for the name (the demo's HTTPRoute), as its owner
reads them with ``kubectl describe``. Each write is made just after a LanDB sync, so the watcher sees the
name before the next one publishes it. Stopped (Ctrl+C, SIGTERM), it ends where it is and says nothing more.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from prometheus_client.parser import text_string_to_metric_families

from landb_simulator.landb_dns import LandbDnsServer
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.webhook.wire import MEDIA_TYPE, decode_endpoints, encode_changes

LOOP_INTERVAL = 1.0
"""Seconds between two looks (Records, the watcher's states, LanDB's syncs): a fast external-dns loop."""
STATES_METRIC = "landb_webhook_dns_names"
STOPPING_GRACE = 30.0
"""Seconds a stopping demo may take from closing the webhook's listeners to saying it stopped (its graceful
shutdown: well under one second; a bound, however slow the machine)."""
MEANING = {
    "pending": "written to the metadata, LanDB has not published it yet",
    "published": "DNS answers exactly its ingress nodes",
    "stale": "DNS still answers nodes that no longer carry it",
    "conflict": "DNS answers something this cluster never published",
    "unknown": "the resolver does not answer",
    "gone": "DNS no longer answers it, the watcher forgets it",
}


@dataclass(frozen=True)
class Walk:
    """Where the demo's webhook listens, and the simulated LanDB whose syncs publish what it wrote."""

    api: str
    health: str
    dns: LandbDnsServer
    name: str = "myapp.cern.ch"
    owner: str = "demo"
    resource: str = "httproute/default/myapp"
    """The object asking for the name, as external-dns labels it (``<kind>/<namespace>/<name>``)."""
    events: Callable[[], Iterable[Mapping[str, Any]]] = lambda: ()
    """The events.k8s.io Events of the simulated Kubernetes (those regarding ``resource`` are said)."""
    timeout: float = 300.0
    """Seconds each half (to published, to gone) may take before the walk gives up and says so."""


def start_walk(walk: Walk, out: TextIO, stop: threading.Event) -> threading.Thread:
    """The walk in a daemon thread beside the demo's webhook; it ends early when ``stop`` is set."""
    thread = threading.Thread(
        target=_walk_and_say_why_not, args=(walk, out, stop), name="demo-walk", daemon=True
    )
    thread.start()
    return thread


def _walk_and_say_why_not(walk: Walk, out: TextIO, stop: threading.Event) -> None:
    try:
        walk_one_name(walk, out, stop.is_set)
    except OSError as error:  # the webhook stopped under it (Ctrl+C, SIGTERM), or never started
        # A demo being stopped closes the webhook's listeners first and sets ``stop`` once the webhook has
        # shut down: only a webhook gone for another reason is worth a word.
        if not stop.wait(STOPPING_GRACE):
            print(f"walk: stopped, the webhook did not answer: {error}", file=out, flush=True)


def walk_one_name(walk: Walk, out: TextIO, stop: Callable[[], bool] = lambda: False) -> bool:
    """Publish the name, follow it to ``published``, remove it, follow it to ``gone``; print each step.

    False (said in the output) when a step did not finish within ``walk.timeout`` or ``stop()`` is true.
    """
    follow = _Follower(walk, out, stop)
    baseline = follow.settled_states()
    if baseline is None:
        return False
    # The webhook puts the ingress nodes' IPs instead; ``resource`` is what external-dns' source labels.
    record = Endpoint(walk.name, "A", ("192.0.2.1",), labels=(("resource", walk.resource),))
    claim = Endpoint(
        f"a-{walk.name}",
        "TXT",
        (f'"heritage=external-dns,external-dns/owner={walk.owner},external-dns/resource={walk.resource}"',),
        labels=(("ownedRecord", walk.name),),
    )
    walked = follow.step(
        Changes(create=(record, claim)),
        f"external-dns publishes {walk.name}: its --load-N- aliases go onto the ingress nodes' metadata",
        baseline,
        until="published",
    ) and follow.step(
        Changes(delete=(record, claim)),
        f"external-dns removes {walk.name}: its aliases come off the ingress nodes' metadata",
        baseline,
        until="gone",
    )
    if walked:
        follow.say(
            f"done: {walk.name} went {' -> '.join(follow.seen)}. Publish it again with the "
            f"curl command above and ask DNS: dig @{walk.dns.host} -p {walk.dns.port} {walk.name}"
        )
    return walked


class _Follower:
    def __init__(self, walk: Walk, out: TextIO, stop: Callable[[], bool]) -> None:
        self._walk, self._out, self._stop = walk, out, stop
        self._since = time.monotonic()
        self.seen: list[str] = []
        """The watcher's states for the name, in the order the walk saw them."""
        self._told: set[tuple[str, int]] = set()
        """The events said already: (event name, count)."""

    def say(self, text: str) -> None:
        elapsed = time.monotonic() - self._since
        print(f"walk {elapsed:+5.0f}s  {text}", file=self._out, flush=True)

    def _loops(self, timeout: float) -> Iterator[bytes]:
        """One external-dns loop per iteration (Records, whose body it yields; a loop whose Records
        failed is skipped, as external-dns skips it), until ``timeout`` or stop."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop():
            status, records = _call(f"{self._walk.api}/records", headers={"Accept": MEDIA_TYPE})
            if status == 200:
                yield records
            time.sleep(LOOP_INTERVAL)

    def _states(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(_call(f"{self._walk.health}/metrics")[1].decode()):
            if family.name == STATES_METRIC:
                for sample in family.samples:
                    counts[sample.labels["state"]] += int(sample.value)
        return counts

    def ready(self) -> bool:
        """The webhook is ready once its caches have synced (/readyz): Records answers 503 before."""
        deadline = time.monotonic() + self._walk.timeout
        while time.monotonic() < deadline and not self._stop():
            try:
                if _call(f"{self._walk.health}/readyz")[0] == 200:
                    return True
            except OSError:
                pass  # not listening yet
            time.sleep(LOOP_INTERVAL)
        if not self._stop():
            self.say("the webhook did not become ready (/readyz); the walk gives up")
        return False

    def settled_states(self) -> Counter[str] | None:
        """The watcher's states once it has judged every name Records reports (the hand-set ones)."""
        if not self.ready():
            return None
        for records in self._loops(self._walk.timeout):
            names = {e.dns_name for e in decode_endpoints(records) if e.record_type in ("A", "CNAME")}
            states = self._states()
            if states.total() >= len(names) and states["unknown"] == 0:
                return states
        if not self._stop():
            self.say("the webhook's DNS watcher did not judge the published names in time; is it on?")
        return None

    def step(self, changes: Changes, what: str, baseline: Mapping[str, int], *, until: str) -> bool:
        dns = self._walk.dns
        synced = dns.syncs
        if not dns.wait_for_syncs(synced + 1, dns.sync_period + self._walk.timeout) or self._stop():
            if not self._stop():
                self.say("the simulated LanDB did not sync; is it running?")
            return False
        status, body = _call(
            f"{self._walk.api}/records", encode_changes(changes), headers={"Content-Type": MEDIA_TYPE}
        )
        self._since = time.monotonic()
        if status != 204:
            self.say(f"the webhook answered {status} to ApplyChanges: {body[:300].decode(errors='replace')}")
            return False
        self.say(f"{what} (ApplyChanges: 204); LanDB publishes every {dns.sync_period:g}s")
        state = "published" if until == "gone" else ""  # where the first half left it
        answer, synced = dns.published.describe(self._relative()), dns.syncs
        for _ in self._loops(self._walk.timeout):
            if dns.syncs != synced:
                synced, now_answered = dns.syncs, dns.published.describe(self._relative())
                if now_answered != answer:
                    answer = now_answered
                    said = f"answers {answer}" if answer is not None else "no longer answers it"
                    self.say(f"LanDB sync {synced}: {self._walk.name} {said}")
            now = _state_of_one(self._states(), baseline) or ("gone" if until == "gone" else "")
            if now != state and now:
                state = now
                self.seen.append(state)
                self.say(f"DNS watch: {self._walk.name} is {state} ({MEANING.get(state, state)})")
            self._say_new_events()
            if state == until:
                return True
        if not self._stop():  # stopped (Ctrl+C, SIGTERM): nothing timed out, nothing to say
            self.say(f"{self._walk.name} did not become {until} within {self._walk.timeout:g}s")
        return False

    def _say_new_events(self) -> None:
        """Each event on the walk's object not said yet, as ``kubectl describe`` lists it."""
        kind, _, where = self._walk.resource.partition("/")
        for event in self._walk.events():
            regarding = event.get("regarding") or {}
            if (
                regarding.get("kind", "").lower(),
                f"{regarding.get('namespace')}/{regarding.get('name')}",
            ) != (
                kind,
                where,
            ):
                continue
            count = int((event.get("series") or {}).get("count") or 1)
            key = (str(event["metadata"]["name"]), count)
            if key not in self._told:
                self._told.add(key)
                repeated = f" (x{count})" if count > 1 else ""
                self.say(
                    f"event on {regarding.get('kind')} {where}: {event.get('type')} {event.get('reason')}"
                    f"{repeated}: {event.get('note')}"
                )

    def _relative(self) -> str:
        return self._walk.name.partition(".")[0]


def _call(url: str, data: bytes | None = None, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """One request to the demo's own listeners (a POST when ``data`` is given): status and body. The
    demo installs no HTTP client beyond the standard library's."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        connection.request(
            "GET" if data is None else "POST", parts.path, body=data, headers=dict(headers or {})
        )
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def _state_of_one(states: Mapping[str, int], baseline: Mapping[str, int]) -> str | None:
    """The state of the one name the walk changes: the state counted once more than before the walk;
    None when the counts are back to where they were (not watched yet, or gone)."""
    grown = [state for state, count in states.items() if count > baseline.get(state, 0)]
    return "/".join(sorted(grown)) or None
