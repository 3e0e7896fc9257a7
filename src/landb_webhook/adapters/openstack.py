"""The OpenStack session: one connection, its authentication guard, the retry loop, the call accounting and
the outage reporting every OpenStack adapter is built on (adapters.nova, adapters.octavia), as
openstacksdk's Connection is the one session its service proxies share.

Design choices, each forced by an OpenStack or external-dns fact (see docs/reference.md):

- The connection is made on first use, never at construction: external-dns' negotiation (``GET /``)
  must be answered without any remote call.
- Everything read or written is the credential's own project's, whatever its roles: an admin's (or global
  reader's) token reads every project's resources, so each adapter scopes its lists and checks what it
  reads by id with :func:`own_project` and :func:`check_own`.
- Every failure becomes backends.UpstreamError (adapters.openstack_errors). Whether and when a failed
  call is tried again is adapters.retry's policy, applied in ``call`` only: transient failures and 409s
  are retried with jittered exponential backoff, honouring ``Retry-After``, and no retry starts that
  could not finish before the webhook's reply deadline (or ``budget`` seconds, outside a webhook call).
  Retrying is safe: a merge POST sets the same values again, a DELETE of a gone key is done, a tag write
  reads the tags afresh.
- Expired tokens are keystoneauth's job: it re-authenticates before a token expires and once
  more on a 401, so no code here handles tokens. It does so under a lock that is swapped for an
  adapters.authlock.AuthenticationLock: a 401 on Keystone's version document used to leave a thread
  waiting on it for good; now no call waits on it past its deadline, and a connection whose holder is
  stuck is replaced.
- Every call (each retry too) is counted and timed in one place, ``_attempt``, by a fixed operation
  name and a result saying what happened (``ok``, ``error``: the service called failed,
  ``keystone_unreachable``: Keystone did not answer or failed, ``auth_refused``: Keystone answered and
  refused); the outcome of the last one tells ``/readyz`` whether OpenStack can be used at all
  (adapters.openstack_health).
- A Keystone outage is said once when it starts (a warning naming what happened) and once when it ends
  (Keystone answers again: how long it lasted, how many attempts failed); every failed attempt between
  is a debug line, as are keystoneauth's own warnings (logs.DEMOTED_LOGGERS).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import openstack
import openstack.config
import openstack.connection
import structlog

from landb_webhook.adapters import cloudconf
from landb_webhook.adapters.authlock import (
    PLUGIN_LOCK,
    AuthenticationBusy,
    AuthenticationLock,
    authentication_lock,
)
from landb_webhook.adapters.openstack_errors import (
    KEYSTONE,
    NOVA,
    ForeignResource,
    about_one_request,
    failure_of,
    keystone_result,
    upstream_error,
)
from landb_webhook.adapters.openstack_health import OpenStackHealth
from landb_webhook.adapters.retry import Failure, RetryPolicy
from landb_webhook.backends import UpstreamError
from landb_webhook.deadline import reply_deadline
from landb_webhook.logs import is_secret_key
from landb_webhook.metrics import Metrics

log = structlog.get_logger(__name__)

T = TypeVar("T")

AUTHENTICATION_REQUESTS = 3
"""Requests one authentication makes at most (version document, again with a token, token): held longer
than this many timeouts, keystoneauth's lock is held by a thread that is not coming back."""
_PLAIN_LOCK = type(threading.Lock())

FAILURE_WINDOW = 300.0
"""Seconds a failed call keeps ``unavailable()`` answering, unless a later call succeeds."""


@dataclass(frozen=True, kw_only=True)
class OpenStackOptions:
    """How the OpenStack adapters call OpenStack: their timings, retries and request bounds. Built from the
    settings once (wiring.openstack_options), so the fields that are settings have no default here; a test
    changes one field with ``dataclasses.replace``."""

    timeout: float
    """Seconds one HTTP request may take (LANDB_UPSTREAM_TIMEOUT)."""
    retry: RetryPolicy
    budget: float
    """Seconds one operation may take, retries included, when no reply deadline is set
    (LANDB_REQUEST_TIMEOUT: as long as a webhook call may take)."""
    max_name_filter_length: int = 2048
    """Bound of the URL-encoded ``name`` filter of one server search (adapters.nova), so that request
    lines stay well under the 4 KiB many proxies and WSGI servers accept."""
    limits_ttl: float = 600.0
    """Seconds the project's metadata quota is kept before it is read again (adapters.nova)."""
    failure_window: float = FAILURE_WINDOW
    """Seconds a failed call keeps ``unavailable()`` answering, unless a later call succeeds."""


class OpenStackSession:
    """One OpenStack connection and everything its calls share; safe to share between threads and between
    the adapters built on it."""

    def __init__(
        self,
        cloud: str | None = None,
        *,
        clouds_yaml: Path | None = None,
        cloud_conf: Path | None = None,
        cacert: Path | None = None,
        options: OpenStackOptions,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        chance: random.Random | None = None,
    ) -> None:
        """``cloud`` names an entry of clouds.yaml; None means the OS_CLOUD / OS_* environment.

        ``clouds_yaml`` reads that file instead of the standard clouds.yaml locations (demo and tests);
        ``cloud_conf`` takes the credentials from a CERN cluster's cloud.conf instead (adapters.cloudconf).
        ``cacert`` is the CA bundle TLS certificates are verified with, overriding the configuration's.
        ``options``: timings, retries and request bounds (OpenStackOptions).
        ``metrics`` receives the count and duration of every call. ``clock`` (like time.monotonic) also
        dates failures; ``sleep`` and ``chance`` (the jitter) are for tests to replace.
        """
        self.options = options
        self._cloud = cloud
        self._timeout = options.timeout
        self._clouds_yaml = clouds_yaml
        self._cloud_conf = cloud_conf
        self._retry = options.retry
        self._budget = options.budget
        self._clock = clock
        self._sleep = sleep
        self._chance = chance or random.Random()  # noqa: S311 (jitter, not a secret)
        self._cacert = cacert
        self._tls: dict[str, Any] = {"cacert": str(cacert)} if cacert is not None else {}
        self._metrics = metrics

        self._lock = threading.Lock()
        self._conn: openstack.connection.Connection | None = None
        self._health = OpenStackHealth(options.failure_window, clock)

    def secret_values(self) -> list[str]:
        """The configured credentials (password, application credential secret, token), read from the
        configuration without any remote call, for logs.register_secrets; [] if it cannot be read (the
        first call will say why)."""
        try:
            if self._cloud_conf is not None:
                auth = cloudconf.connection_options(self._cloud_conf, cacert=self._cacert).get("auth", {})
            else:
                auth = self._local_region().config.get("auth", {})
        except Exception as error:
            log.debug("OpenStack credentials not read for redaction", error=type(error).__name__)
            return []
        return [str(value) for key, value in auth.items() if value and is_secret_key(key)]

    def verifies_tls(self) -> bool:
        """Whether the configuration verifies OpenStack's TLS certificates (False: ``verify: false``,
        ``insecure: true`` or ``OS_INSECURE`` in clouds.yaml or the environment), read without any remote
        call; True when it cannot be read (the first call will say why). A cloud.conf cannot turn it off."""
        if self._cloud_conf is not None:
            return True
        try:
            verify, _cert = self._local_region().get_requests_verify_args()
        except Exception as error:
            log.debug("OpenStack TLS settings not read", error=type(error).__name__)
            return True
        return verify is not False

    def _local_region(self) -> Any:
        """The cloud's configuration from clouds.yaml or the ``OS_*`` environment, as the first call reads
        it (no remote call)."""
        files = [str(self._clouds_yaml)] if self._clouds_yaml is not None else None
        loader = openstack.config.OpenStackConfig(config_files=files, load_envvars=self._clouds_yaml is None)
        return loader.get_one(cloud=self._cloud, **self._tls)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def connection(self) -> openstack.connection.Connection:
        """The connection the next call uses, made on its first use (one per session until it is found
        wedged, adapters.authlock): public for the tests that wedge its authentication."""
        return self._connection()

    def _connection(self) -> openstack.connection.Connection:
        with self._lock:
            if self._conn is None:
                if self._cloud_conf is not None:
                    options = cloudconf.connection_options(self._cloud_conf, cacert=self._cacert)
                    self._conn = openstack.connect(
                        load_yaml_config=False, load_envvars=False, api_timeout=self._timeout, **options
                    )
                elif self._clouds_yaml is not None:
                    loader = openstack.config.OpenStackConfig(
                        config_files=[str(self._clouds_yaml)], load_envvars=False
                    )
                    region = loader.get_one(cloud=self._cloud, api_timeout=self._timeout, **self._tls)
                    self._conn = openstack.connection.Connection(config=region)
                else:
                    self._conn = openstack.connect(cloud=self._cloud, api_timeout=self._timeout, **self._tls)
                _warn_if_unverified(self._conn)
                self._guard_authentication(self._conn)
            return self._conn

    def _guard_authentication(self, conn: openstack.connection.Connection) -> None:
        """Put an AuthenticationLock in place of the auth plugin's own lock (adapters.authlock)."""
        plugin = conn.session.auth
        if not isinstance(getattr(plugin, PLUGIN_LOCK, None), _PLAIN_LOCK):
            log.warning(
                "keystoneauth's plugin lock not found: a 401 on Keystone's version document may block "
                "authentication until the process is restarted",
                plugin=type(plugin).__name__,
            )
            return
        setattr(
            plugin,
            PLUGIN_LOCK,
            AuthenticationLock(
                self._budget, wedged_after=AUTHENTICATION_REQUESTS * self._timeout, clock=self._clock
            ),
        )

    def _forget_if_wedged(self, conn: openstack.connection.Connection) -> None:
        """Drop ``conn`` when its authentication has been held longer than any real one takes: the next
        attempt connects afresh instead of queueing behind a thread that will not come back."""
        lock = authentication_lock(conn.session.auth)
        if lock is None or not lock.wedged():
            return
        with self._lock:
            if self._conn is not conn:
                return
            self._conn = None
        log.error(
            "keystone authentication stuck; connecting afresh",
            held_for_seconds=round(lock.held_for() or 0.0, 1),
            hint="a thread is blocked inside keystoneauth; if this repeats, restart the process",
        )

    def unavailable(self) -> str | None:
        """Why OpenStack cannot be used, judged from the last calls (OpenStackHealth.unavailable)."""
        return self._health.unavailable()

    def call(
        self,
        action: str,
        operation: Callable[[openstack.connection.Connection], T],
        *,
        api: str,
        upstream: str = NOVA,
    ) -> T:
        """Run one remote operation on this session (adapters.nova's, adapters.octavia's) with error mapping,
        retried as adapters.retry decides.

        ``api`` is the fixed operation name the call is counted under (metrics.OPENSTACK_OPERATIONS);
        ``upstream`` the service it reaches, named in its errors.
        """
        deadline = self._clock() + self._budget
        replying_by = reply_deadline()
        if replying_by is not None:
            deadline = min(deadline, replying_by)
        retries: Counter[Failure] = Counter()
        while True:
            try:
                return self._attempt(action, operation, api, upstream)
            except UpstreamError as error:
                failure, retry_after = failure_of(error)
                retries[failure] += 1
                delay = self._retry.delay(failure, retries[failure], retry_after, self._chance)
                if delay is None:
                    raise
                # A Keystone outage is said once, by _observe: its attempts are debug lines.
                say = log.debug if error.upstream == KEYSTONE else log.warning
                if self._clock() + delay + self._timeout > deadline:
                    # The retry could still be running when the webhook has to answer: leave it to
                    # external-dns' next loop.
                    say(
                        "openstack call not retried: no time left before the reply deadline",
                        error=str(error),
                        retry_in=round(delay, 3),
                    )
                    raise
                say(
                    "retrying openstack call",
                    error=str(error),
                    failure=failure.value,
                    retry=retries[failure],
                    retry_in=round(delay, 3),
                )
                self._sleep(delay)

    def _attempt(
        self,
        action: str,
        operation: Callable[[openstack.connection.Connection], T],
        api: str,
        upstream: str = NOVA,
    ) -> T:
        started = self._clock()
        # Authenticating first (a no-op while the cached token is fresh) tells Keystone failures
        # apart from Nova failures, which otherwise surface as the same keystoneauth exceptions.
        conn = None
        try:
            conn = self._connection()
            conn.session.get_token()
        except Exception as exc:
            if isinstance(exc, AuthenticationBusy) and conn is not None:
                self._forget_if_wedged(conn)
            error = upstream_error(exc, KEYSTONE, action)
            self._observe(api, started, exc, error)
            raise error from exc
        try:
            result = operation(conn)
        except Exception as exc:
            if isinstance(exc, AuthenticationBusy):
                self._forget_if_wedged(conn)
            error = upstream_error(exc, upstream, action)
            self._observe(api, started, exc, error)
            raise error from exc
        self._observe(api, started, None, None)
        return result

    def _observe(
        self, api: str, started: float, exc: BaseException | None, error: UpstreamError | None
    ) -> None:
        """Count and time one call, and tell the session's health what it says of OpenStack as a whole."""
        now = self._clock()
        if error is None:
            result = "ok"
        else:
            result = keystone_result(exc or error) if error.upstream == KEYSTONE else "error"
        self._health.observe(result, error, error is not None and about_one_request(exc), now)
        if self._metrics is not None:
            self._metrics.openstack_api_calls_total.labels(operation=api, result=result).inc()
            self._metrics.openstack_api_call_duration_seconds.labels(operation=api, result=result).observe(
                now - started
            )


def _warn_if_unverified(conn: openstack.connection.Connection) -> None:
    """The webhook never turns TLS verification off; a configuration that does is said out loud."""
    verify, _cert = conn.config.get_requests_verify_args()
    if verify is False:
        log.warning(
            "TLS verification of OpenStack is OFF (verify: false or insecure: true in the cloud's "
            "configuration): credentials may be sent to an impostor",
            hint="remove it and set LANDB_OS_CACERT (or cacert in clouds.yaml) to the CA bundle instead",
        )


def own_project(conn: openstack.connection.Connection) -> str:
    """The project the credential's token is scoped to (from the token: no request once authenticated).

    A token scoped to no project (system or domain scope) is refused: nothing could be kept to one project.
    """
    project = conn.session.get_project_id()
    if not project:
        raise UpstreamError(
            KEYSTONE,
            "the credential's token is scoped to no project: give it the cluster's project (project_name "
            "or project_id in clouds.yaml, project-id in cloud.conf, a trust or an application credential)",
            retryable=False,
        )
    return str(project)


def check_own(conn: openstack.connection.Connection, kind: str, resource_id: str, project_id: object) -> None:
    """Raise ForeignResource unless ``project_id`` (as the resource was read) is the credential's project."""
    own = own_project(conn)
    if str(project_id or "") != own:
        raise ForeignResource(kind, resource_id, str(project_id or "none"), own)
