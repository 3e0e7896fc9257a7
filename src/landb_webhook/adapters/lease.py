"""One writer among replicas: leader election on a ``coordination.k8s.io/v1`` Lease.

The kubernetes Python client has no elector; this one keeps client-go's semantics (leaderelection.go):

- every ``retry_period`` a replica tries to acquire or renew: read the Lease; create it if missing; take
  it over if its holder is empty or has not renewed it for ``lease_duration`` *as observed locally* (the
  time this replica last saw the record change, so clocks never need to agree); renew it if it is ours.
  Each write carries the resourceVersion read, so of two replicas racing, the API server lets one win
  and answers the other 409;
- the holder that has not renewed for ``renew_deadline`` (shorter than ``lease_duration``) stops writing,
  before any other replica may take over; a renewal counts from the moment it was *sent*;
- on a clean stop the holder releases the Lease (empty holder, 1 s duration) so a successor takes over at
  once; a killed holder is taken over once its Lease has expired;
- a *tenure* is one unbroken stretch of holding: it ends whenever the renew deadline passes without a
  renewal, even if the same replica takes the Lease again later (another may have written meanwhile).
  A writer fences each write with :meth:`held_until` of the tenure its apply started in.

RBAC needed in the Lease's namespace: leases get, create, update.
"""

from __future__ import annotations

import math
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.kubernetes import json_body, release_failed_response, upstream_error

log = structlog.get_logger(__name__)

JITTER_FACTOR = 1.2
"""client-go's: retries wait between ``retry_period`` and ``JITTER_FACTOR`` times that."""
_HTTP_NOT_FOUND = 404
_HTTP_CONFLICT = 409


def default_identity() -> str:
    """The pod name (the hostname in Kubernetes) and a random suffix, so two processes never share one."""
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


def micro_time(moment: datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Leader election on one Lease; :meth:`held` says whether this replica may write now.

    Call :meth:`start` once and :meth:`stop` at shutdown. :meth:`try_acquire_or_renew` is one round, for
    tests that drive time with ``clock``.
    """

    def __init__(
        self,
        api: client.CoordinationV1Api,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        request_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """The timings are settings (LANDB_LEASE_DURATION, LANDB_LEASE_RENEW_DEADLINE,
        LANDB_LEASE_RETRY_PERIOD, LANDB_UPSTREAM_TIMEOUT), in seconds; wiring.lease_elector passes them."""
        if not lease_duration > renew_deadline > JITTER_FACTOR * retry_period > 0:
            raise ValueError("leader election needs lease_duration > renew_deadline > 1.2 x retry_period > 0")
        self._api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._request_timeout = min(request_timeout, renew_deadline)
        self._clock = clock

        self._lock = threading.Lock()
        self._observed: dict[str, Any] = {}
        """The Lease's spec as last read or written."""
        self._observed_at = -math.inf
        """When (``clock``) the spec last changed, as seen from here."""
        self._renewed_at = -math.inf
        """When (``clock``) the last successful acquire or renew was sent."""
        self._tenure = 0
        """Counts the tenures: a new one starts with every acquisition after a lapse."""
        self._leading = False
        self._last_problem = ""
        self._reported_holder = ""
        self._first_round = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- backends.WriterLease -----------------------------------------------------------------------

    def held(self, wait: float = 5.0) -> bool:
        """True while this replica holds the Lease and renewed it within the renew deadline.

        Right after start-up, waits up to ``wait`` seconds for the first round to finish.
        """
        return self.tenure(wait) is not None

    def tenure(self, wait: float = 5.0) -> int | None:
        """The current tenure if this replica holds the Lease now (as :meth:`held`), else None."""
        self._first_round.wait(wait)
        with self._lock:
            return self._tenure if self._holds_now() else None

    def held_until(self, tenure: int) -> float:
        """Until when (``clock``) this replica surely still holds the Lease in ``tenure``: its last renewal
        *sent* plus the renew deadline; minus infinity once that tenure has ended.

        No other replica takes the Lease before it has gone unrenewed for the lease duration on its own
        clock, so a write sent before this moment cannot meet another writer's.
        """
        with self._lock:
            if tenure != self._tenure or not self._is_holder():
                return -math.inf
            return self._renewed_at + self._renew_deadline

    def holder(self) -> str:
        """Who holds the Lease as last seen, for the 503 a non-holder answers."""
        with self._lock:
            if self._observed.get("holderIdentity"):
                return str(self._observed["holderIdentity"])
            return f"nobody yet ({self._last_problem})" if self._last_problem else "nobody yet"

    def read_holder(self) -> str:
        """Who holds the Lease now, read once without taking part (``status``): one line."""
        try:
            spec = self._read().get("spec") or {}
        except ApiException as exc:
            if exc.status == _HTTP_NOT_FOUND:
                release_failed_response(exc)
                return "nobody: no Lease yet (no webhook has run with leader election)"
            return f"unreadable ({upstream_error(exc, f'lease {self.namespace}/{self.name}')})"
        except Exception as exc:  # status still prints what it could read
            return f"unreadable ({type(exc).__name__}: {exc})"
        holder = spec.get("holderIdentity")
        if not holder:
            return "nobody (released)"
        return f"{holder}, renewed {spec.get('renewTime') or 'never'}"

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="landb-lease", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the election thread and release the Lease if this replica holds it."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.release()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.try_acquire_or_renew()
            delay = self._retry_period
            if not self._leading:
                delay *= 1 + random.random() * (JITTER_FACTOR - 1)  # noqa: S311 (jitter, not security)
            self._stopping.wait(delay)

    # -- one round -------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True if this replica holds the Lease after it."""
        sent_at = self._clock()
        wall = micro_time(datetime.now(UTC))
        try:
            acquired = self._acquire_or_renew(sent_at, wall)
        except Exception as exc:
            error = upstream_error(exc, f"lease {self.namespace}/{self.name}")
            self._note_problem(error.reason)
            acquired = False
        self._after_round(acquired)
        self._first_round.set()
        return acquired

    def _acquire_or_renew(self, sent_at: float, wall: str) -> bool:
        wanted = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self._lease_duration)),
            "acquireTime": wall,
            "renewTime": wall,
            "leaseTransitions": 0,
        }
        try:
            lease = self._read()
        except ApiException as exc:
            if exc.status != _HTTP_NOT_FOUND:
                raise
            body: Any = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": wanted}
            if not self._write(lambda: self._api.create_namespaced_lease(self.namespace, body, **self._raw)):
                return False
            self._renewed(wanted, sent_at, continuing=False)
            return True

        current = dict(lease.get("spec") or {})
        with self._lock:
            if current != self._observed:
                self._observed, self._observed_at = current, sent_at
            expires = self._observed_at + max(
                self._lease_duration, float(current.get("leaseDurationSeconds") or 0)
            )
            if current.get("holderIdentity") and not self._is_holder() and sent_at < expires:
                self._last_problem = ""
                return False
            if self._is_holder():
                wanted["acquireTime"] = current.get("acquireTime") or wall
                wanted["leaseTransitions"] = current.get("leaseTransitions") or 0
            else:
                wanted["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
            # Sent while the last renewal still held: the tenure goes on without a gap.
            continuing = self._is_holder() and sent_at < self._renewed_at + self._renew_deadline
        lease["spec"] = wanted  # metadata (resourceVersion included) as read: a 409 if it changed since
        if not self._write(
            lambda: self._api.replace_namespaced_lease(self.name, self.namespace, lease, **self._raw)
        ):
            return False
        self._renewed(wanted, sent_at, continuing=continuing)
        return True

    def release(self) -> None:
        """Hand the Lease over at once (client-go's ReleaseOnCancel): empty holder, 1 s duration."""
        with self._lock:
            holding = self._is_holder()
            self._leading = False
            self._renewed_at = -math.inf  # held() is False from here on
        if not holding:
            return
        try:
            lease = self._read()
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            wall = micro_time(datetime.now(UTC))
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": wall}
            self._api.replace_namespaced_lease(self.name, self.namespace, lease, **self._raw)
            log.info("writer lease released", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        except Exception as exc:
            log.warning("writer lease not released", reason=upstream_error(exc, "release lease").reason)
        with self._lock:
            self._observed = {}

    # -- internals -------------------------------------------------------------------------------

    @property
    def _raw(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self._request_timeout}

    def _read(self) -> Any:
        """The Lease as a JSON dict (typed Any: the client's signatures want models, it takes dicts too)."""
        lease: Any = json_body(self._api.read_namespaced_lease(self.name, self.namespace, **self._raw))
        return lease

    def _write(self, call: Callable[[], Any]) -> bool:
        """Make one create or replace; False if another replica won the race (409)."""
        try:
            json_body(call())
        except ApiException as exc:
            if exc.status != _HTTP_CONFLICT:
                raise
            release_failed_response(exc)
            return False
        return True

    def _holds_now(self) -> bool:
        return self._is_holder() and self._clock() - self._renewed_at < self._renew_deadline

    def _is_holder(self) -> bool:
        return self._observed.get("holderIdentity") == self.identity

    def _renewed(self, spec: dict[str, Any], sent_at: float, *, continuing: bool) -> None:
        with self._lock:
            self._observed, self._observed_at = dict(spec), sent_at
            if not continuing:
                self._tenure += 1
            self._renewed_at = sent_at
            self._last_problem = ""

    def _note_problem(self, reason: str) -> None:
        with self._lock:
            if reason != self._last_problem:
                log.warning("writer lease: call failed", reason=reason, identity=self.identity)
            self._last_problem = reason

    def _after_round(self, acquired: bool) -> None:
        """Log the changes of leadership, once each."""
        with self._lock:
            leading = acquired or self._holds_now()
            was_leading, self._leading = self._leading, leading
            holder = self._observed.get("holderIdentity") or ""
            new_holder = holder != self._reported_holder
            self._reported_holder = holder
        where = f"{self.namespace}/{self.name}"
        if new_holder and holder and holder != self.identity:
            log.info("writer lease held by another replica: it applies changes", lease=where, holder=holder)
        if leading and not was_leading:
            log.info(
                "writer lease acquired: this replica applies changes", lease=where, identity=self.identity
            )
        elif was_leading and not leading:
            log.error(
                "writer lease lost: this replica stops applying changes",
                lease=where,
                identity=self.identity,
                holder=holder,
                renew_deadline=self._renew_deadline,
            )
