"""Nova servers and their metadata, through openstacksdk: the only writer of ``landb-alias*`` keys.

Design choices, each forced by a Nova or external-dns fact (see docs/reference.md):

- The connection is made on first use, never at construction: external-dns' negotiation (``GET /``)
  must be answered without any remote call.
- Servers are found by batching node names into anchored ``name`` regex filters
  (``^(a|b|c)$``), a handful of calls for a whole cluster instead of listing every server of the
  project (a CERN project may hold thousands). A node's ``providerID`` decides which server is
  its own; names, which are not unique in a project, are only trusted when exactly one server
  carries the node's name.
- Everything read or written is the credential's own project's, whatever its roles: an admin (or global
  reader) token reads any project's server by id, so a server of another project read by id counts as
  not found (a node's providerID pointing there is not followed), and writes only ever go to servers
  read that way or found by the name search, which Nova scopes to the token's project (the adapter never
  asks for ``all_tenants``). adapters.octavia scopes its lists and checks its writes the same way, with
  :func:`own_project`.
- Metadata is written with one merge POST per server and deleted one key per DELETE. The SDK's
  ``delete_server_metadata`` wipes *all* metadata (LanDB's own keys included) when given no keys,
  so it is never used; the per-key resource call is, after the key is checked.
- Every failure becomes backends.UpstreamError("nova" | "keystone", ...): retryable for 5xx,
  connection failures and timeouts, not retryable for 4xx. Whether and when a failed call is tried
  again is adapters.retry's policy, applied in ``call`` only: transient failures and 409s are
  retried with jittered exponential backoff, honouring ``Retry-After``, and no retry starts that
  could not finish before the webhook's reply deadline (or ``budget`` seconds, outside a webhook
  call). Retrying is safe: a merge POST sets the same values again, a DELETE of a gone key is done.
- Expired tokens are keystoneauth's job: it re-authenticates before a token expires and once
  more on a 401, so no code here handles tokens. It does so under a lock that is swapped for an
  adapters.authlock.AuthenticationLock: a 401 on Keystone's version document used to leave a thread
  waiting on it for good; now no call waits on it past its deadline, and a connection whose holder is
  stuck is replaced.
- Every call (each retry too) is counted and timed in one place, ``_attempt``, by a fixed operation
  name and a result saying what happened (``ok``, ``error``: the service called failed,
  ``keystone_unreachable``: Keystone did not answer or failed, ``auth_refused``: Keystone answered and
  refused); the outcome of the last one tells ``/readyz`` whether OpenStack can be used at all.
- A Keystone outage is said once when it starts (a warning naming what happened) and once when it ends
  (Keystone answers again: how long it lasted, how many attempts failed); every failed attempt between
  is a debug line, as are keystoneauth's own warnings (logs.DEMOTED_LOGGERS).
"""

from __future__ import annotations

import functools
import os
import random
import re
import textwrap
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote_plus, urlsplit

import openstack
import openstack.config
import openstack.connection
import openstack.exceptions as sdk_exceptions
import structlog
from keystoneauth1 import exceptions as ksa_exceptions

from landb_webhook.adapters import cloudconf
from landb_webhook.adapters.authlock import (
    PLUGIN_LOCK,
    AuthenticationBusy,
    AuthenticationLock,
    authentication_lock,
)
from landb_webhook.adapters.retry import (
    Failure,
    RetryPolicy,
    connection_failure,
    failure_of_status,
    parse_retry_after,
)
from landb_webhook.backends import Node, Server, UpstreamError
from landb_webhook.deadline import reply_deadline
from landb_webhook.logs import is_secret_key, redact_text
from landb_webhook.metrics import Metrics

log = structlog.get_logger(__name__)

T = TypeVar("T")

NOVA = "nova"
KEYSTONE = "keystone"

NOT_ANSWERED_YET = "no call has succeeded since start-up (credentials untried)"
UNLIMITED_METADATA_ITEMS = 2**31 - 1
"""What max_metadata_items() reports when the project's quota is unlimited (Nova says -1)."""

_NOVA_METADATA_KEY = re.compile(r"[a-zA-Z0-9\-_:. ]{1,255}")
_SERVER_ID = re.compile(r"[A-Za-z0-9\-]{1,64}")
_NAME_FILTER_OVERHEAD = len(quote_plus("^()$"))
_NAME_SEPARATOR_LENGTH = len(quote_plus("|"))
_MAX_REASON_LENGTH = 300
_MAX_NOVA_MESSAGE_LENGTH = 160
_MAX_CAUSES = 5
_REQUEST_ID = re.compile(r"req-[0-9a-f-]{1,64}")
_HTTP_UNAUTHORIZED = 401
_HTTP_TOO_MANY_REQUESTS = 429
_HTTP_REQUEST_TIMEOUT = 408
_HTTP_CREDENTIALS_REFUSED = (401, 403)

AUTHENTICATION_REQUESTS = 3
"""Requests one authentication makes at most (version document, again with a token, token): held longer
than this many timeouts, keystoneauth's lock is held by a thread that is not coming back."""
_PLAIN_LOCK = type(threading.Lock())

FAILURE_WINDOW = 300.0
"""Seconds a failed call keeps ``unavailable()`` answering, unless a later call succeeds."""


@dataclass(frozen=True)
class OpenStackOptions:
    """How the Nova adapter calls OpenStack: its timings, retries and request bounds. Built from the
    settings once (wiring.openstack_options); a test changes one field with ``dataclasses.replace``."""

    timeout: float = 5.0
    """Seconds one HTTP request may take."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    budget: float = 10.0
    """Seconds one operation may take, retries included, when no reply deadline is set."""
    max_name_filter_length: int = 2048
    """Bound of the URL-encoded ``name`` filter of one server search, so that request lines stay well
    under the 4 KiB many proxies and WSGI servers accept."""
    limits_ttl: float = 600.0
    """Seconds the project's metadata quota is kept before it is read again."""
    failure_window: float = FAILURE_WINDOW
    """Seconds a failed call keeps ``unavailable()`` answering, unless a later call succeeds."""


DEFAULT_OPENSTACK = OpenStackOptions()

KEYSTONE_UNREACHABLE = "keystone_unreachable"
AUTH_REFUSED = "auth_refused"
_KEYSTONE_SAYS = {
    KEYSTONE_UNREACHABLE: "keystone unreachable: every OpenStack call fails until it answers",
    AUTH_REFUSED: "keystone refuses the credentials: every OpenStack call fails until they are fixed",
}
_REFUSALS = (
    ksa_exceptions.AuthorizationFailure,
    ksa_exceptions.AuthPluginException,
    ksa_exceptions.CatalogException,
    sdk_exceptions.ConfigException,
)


def keystone_result(exc: BaseException) -> str:
    """What a failed authentication says happened: ``auth_refused`` when Keystone answered and refused (a
    4xx other than 408 and 429, an authorization or configuration failure); ``keystone_unreachable`` when
    it did not answer or failed (refused or reset connections, DNS, TLS, timeouts, 5xx, 408, 429)."""
    cause: BaseException | None = exc
    for _ in range(_MAX_CAUSES):
        if cause is None:
            break
        status = _status_of(cause)
        if status is not None:
            refused = 400 <= status < 500 and status not in (_HTTP_REQUEST_TIMEOUT, _HTTP_TOO_MANY_REQUESTS)
            return AUTH_REFUSED if refused else KEYSTONE_UNREACHABLE
        if isinstance(cause, _REFUSALS) or (isinstance(cause, UpstreamError) and not cause.retryable):
            return AUTH_REFUSED
        cause = cause.__cause__ or cause.__context__
    return KEYSTONE_UNREACHABLE


class OpenStackServerStore:
    """backends.ServerStore backed by Nova; safe to share between threads."""

    def __init__(
        self,
        cloud: str | None = None,
        *,
        clouds_yaml: Path | None = None,
        cloud_conf: Path | None = None,
        cacert: Path | None = None,
        options: OpenStackOptions = DEFAULT_OPENSTACK,
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
        self._max_name_filter_length = options.max_name_filter_length
        self._limits_ttl = options.limits_ttl
        self._metrics = metrics
        self._failure_window = options.failure_window

        self._lock = threading.Lock()
        self._outage_lock = threading.Lock()
        self._last_failure: tuple[float, str] | None = None
        """When and why the last call failed for a reason that is OpenStack's; None after a success."""
        self._answered = False
        """A call has succeeded since start-up: until then the webhook is not known to work."""
        self._conn: openstack.connection.Connection | None = None
        self._max_metadata_items: tuple[int, float] | None = None
        self._outage: _Outage | None = None
        """The Keystone outage under way (said when it started), None while Keystone answers."""

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

    # -- backends.ServerStore -----------------------------------------------------------------------

    def servers_for(self, nodes: Sequence[Node]) -> Mapping[str, Server]:
        """Each node's server: the one whose id is the node's providerID, else the only one named like it."""
        by_id: dict[str, Server] = {}
        by_name: dict[str, list[Server]] = defaultdict(list)
        for names in self._name_batches(sorted({node.name for node in nodes if node.name})):
            pattern = _name_pattern(names)
            for server in self.call(
                "search servers by name",
                functools.partial(_find_by_name, pattern=pattern),
                api="list_servers",
            ):
                if server.id not in by_id:
                    by_id[server.id] = server
                    by_name[server.name].append(server)

        found: dict[str, Server] = {}
        for node in nodes:
            own = self._server_of(node, by_id, by_name)
            if own is not None:
                found[node.name] = own
        return found

    def server(self, server_id: str) -> Server | None:
        """One GET of the server; None on Nova's 404 (it was deleted), and for a server of another project
        than the credential's (which an admin's token can read)."""
        _check_server_id(server_id)
        try:
            return self.call(
                f"read server {server_id}",
                functools.partial(_find_by_id, server_id=server_id),
                api="get_server",
            )
        except UpstreamError as error:
            if not isinstance(error.__cause__, ForeignResource):
                raise
            log.warning(
                "server of another project ignored: neither read nor written",
                server_id=server_id,
                project_id=error.__cause__.project_id,
                hint="the OpenStack credential has rights beyond its project (admin or reader of all); "
                "the webhook only touches its own project's servers",
            )
            return None

    def set_metadata(self, server_id: str, items: Mapping[str, str]) -> None:
        """One POST that merges ``items`` into the server's metadata; an empty ``items`` sends nothing."""
        _check_server_id(server_id)
        if not items:
            return
        body = {"metadata": dict(items)}

        def post(conn: openstack.connection.Connection) -> None:
            sdk_exceptions.raise_from_response(conn.compute.post(_metadata_path(server_id), json=body))

        self.call(f"set metadata on server {server_id}", post, api="set_metadata")

    def delete_metadata(self, server_id: str, key: str) -> None:
        """Exactly one DELETE of ``key``; a key (or server) that is already gone counts as deleted."""
        _check_server_id(server_id)
        if not _NOVA_METADATA_KEY.fullmatch(key) or key.strip() in ("", ".", ".."):
            # The key becomes a URL path segment: "" or ".." would address the server itself.
            raise ValueError(f"refusing to delete metadata key {key!r}: not a single Nova metadata key")

        def delete(conn: openstack.connection.Connection) -> None:
            try:
                sdk_exceptions.raise_from_response(conn.compute.delete(_metadata_path(server_id, key)))
            except sdk_exceptions.NotFoundException:
                log.debug("metadata key already gone", server_id=server_id, key=key)

        self.call(f"delete metadata key {key!r} of server {server_id}", delete, api="delete_metadata")

    def max_metadata_items(self) -> int:
        """``absolute.maxServerMeta`` from ``GET /limits``, cached for ``limits_ttl`` seconds."""
        cached = self._max_metadata_items
        if cached is not None and time.monotonic() - cached[1] < self._limits_ttl:
            return cached[0]
        limits = self.call("read limits", lambda conn: conn.compute.get_limits(), api="get_limits")
        value = getattr(limits.absolute, "server_meta", None)
        if value is None:
            raise UpstreamError(NOVA, "GET /limits has no absolute.maxServerMeta", retryable=False)
        items = UNLIMITED_METADATA_ITEMS if int(value) < 0 else int(value)
        self._max_metadata_items = (items, time.monotonic())
        return items

    # -- internals -------------------------------------------------------------------------------

    def _server_of(
        self, node: Node, by_id: Mapping[str, Server], by_name: Mapping[str, Sequence[Server]]
    ) -> Server | None:
        if node.server_id is not None:
            server_id = node.server_id
            server: Server | None = by_id.get(server_id)
            if server is None:
                # Renamed servers are not found by the name search; ask for the id itself.
                server = self.server(server_id)
            if server is None:
                log.warning("server of node not found", node=node.name, server_id=node.server_id)
            return server
        candidates = by_name.get(node.name, ())
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            log.warning("no server named like node", node=node.name)
        else:
            log.warning(
                "several servers named like node and no providerID to choose; node skipped",
                node=node.name,
                server_ids=sorted(server.id for server in candidates),
            )
        return None

    def _name_batches(self, names: Sequence[str]) -> Iterator[list[str]]:
        """Group sorted names so that each ``_name_pattern``, URL-encoded, fits the length budget.

        The pattern's length is ``overhead + sum(name lengths) - (n - 1) * prefix length + separators``
        (escaping and URL-encoding go character by character), so it is known as each name is added.
        """
        batch: list[str] = []
        names_length = 0
        for name in names:
            encoded = _encoded_length(name)
            prefix = os.path.commonprefix([batch[0], name]) if batch else name  # noqa: RUF071 (by character)
            prefix_length = _encoded_length(prefix)
            length = (
                _NAME_FILTER_OVERHEAD
                + names_length
                + encoded
                + len(batch) * (_NAME_SEPARATOR_LENGTH - prefix_length)
            )
            if batch and length > self._max_name_filter_length:
                yield batch
                batch, names_length = [], 0
            batch.append(name)
            names_length += encoded
        if batch:
            yield batch

    def connection(self) -> openstack.connection.Connection:
        """The connection the next call uses, made on its first use (one per adapter until it is found
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
        """Why OpenStack cannot be used, if the last call failed within the failure window; else None.

        A Nova answer about one request (a locked server's 409, a 404, a rejected value) says nothing
        against OpenStack itself and does not count; refused credentials, 5xx and timeouts do. Before
        the first success, the credentials are untried: :data:`NOT_ANSWERED_YET`.
        """
        failure = self._last_failure
        if failure is None or self._clock() - failure[0] > self._failure_window:
            return None if self._answered else NOT_ANSWERED_YET
        return failure[1]

    def call(
        self,
        action: str,
        operation: Callable[[openstack.connection.Connection], T],
        *,
        api: str,
        upstream: str = NOVA,
    ) -> T:
        """Run one remote operation on this session (also for adapters.octavia) with error mapping,
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
                failure, retry_after = _failure_of(error)
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
        """Count and time one call, and remember whether it tells against OpenStack as a whole."""
        now = self._clock()
        if error is None:
            result = "ok"
            self._last_failure = None
            self._answered = True
        else:
            result = keystone_result(exc or error) if error.upstream == KEYSTONE else "error"
            if not _about_one_request(exc):
                self._last_failure = (now, str(error))
            else:  # Nova answered, about that one request
                self._answered = True
        self._follow_keystone(result, error, now)
        if self._metrics is not None:
            self._metrics.openstack_api_calls_total.labels(operation=api, result=result).inc()
            self._metrics.openstack_api_call_duration_seconds.labels(operation=api, result=result).observe(
                now - started
            )

    def _follow_keystone(self, result: str, error: UpstreamError | None, now: float) -> None:
        """Say a Keystone outage when it starts (or changes: unreachable, then refusing) and when it ends;
        each failed attempt between is a debug line."""
        with self._outage_lock:
            outage = self._outage
            if result in _KEYSTONE_SAYS:
                if outage is not None and outage.result == result:
                    outage.failed += 1
                    log.debug("keystone still failing", result=result, error=str(error))
                    return
                self._outage = _Outage(result, started=now)
            else:
                # Any other result means Keystone gave a token: an outage under way is over.
                self._outage = None
        if result in _KEYSTONE_SAYS:
            log.warning(
                _KEYSTONE_SAYS[result],
                result=result,
                error=str(error),
                hint="said once per outage; each failed attempt is a debug line",
            )
        elif outage is not None:
            log.info(
                "keystone answers again",
                after_seconds=round(now - outage.started, 1),
                failed_attempts=outage.failed,
                was=outage.result,
            )


@dataclass
class _Outage:
    result: str
    """keystone_unreachable or auth_refused."""
    started: float
    failed: int = 1
    """Attempts that failed in it."""


def _failure_of(error: UpstreamError) -> tuple[Failure, float | None]:
    """How the policy sees this failure, and the ``Retry-After`` of its reply if it had one."""
    cause = error.__cause__
    response = getattr(cause, "response", None)
    headers = getattr(response, "headers", None) or {}
    retry_after = parse_retry_after(headers.get("Retry-After"))
    status = _status_of(cause)
    if status == _HTTP_UNAUTHORIZED and error.upstream == NOVA:
        # Nova refused the token even after keystoneauth's one re-authentication: with parallel
        # writers, one thread's re-authentication can void the token another just fetched. A new
        # attempt logs in afresh; refused credentials fail at Keystone, where a 401 is final.
        return Failure.TRANSIENT, retry_after
    if status is not None:
        return failure_of_status(status), retry_after
    return (Failure.TRANSIENT if error.retryable else Failure.FINAL), retry_after


def _status_of(exc: BaseException | None) -> int | None:
    if isinstance(exc, sdk_exceptions.HttpException) and exc.status_code:
        return int(exc.status_code)
    if isinstance(exc, ksa_exceptions.HttpError) and exc.http_status:
        return int(exc.http_status)
    return None


def _warn_if_unverified(conn: openstack.connection.Connection) -> None:
    """The webhook never turns TLS verification off; a configuration that does is said out loud."""
    verify, _cert = conn.config.get_requests_verify_args()
    if verify is False:
        log.warning(
            "TLS verification of OpenStack is OFF (verify: false or insecure: true in the cloud's "
            "configuration): credentials may be sent to an impostor",
            hint="remove it and set LANDB_OS_CACERT (or cacert in clouds.yaml) to the CA bundle instead",
        )


def _metadata_path(server_id: str, key: str | None = None) -> str:
    """The Nova metadata API's path, as the SDK's server resource builds it: the compute proxy's own
    request, not the resource, because building a server resource costs a millisecond of CPU per write
    and it only ever carried the id. (Not ``compute.set_server_metadata(server, **metadata)`` either: a
    metadata key named "server" would collide with that method's first parameter.)"""
    path = f"servers/{server_id}/metadata"
    return path if key is None else f"{path}/{key}"


def _find_by_name(conn: openstack.connection.Connection, pattern: str) -> list[Server]:
    return list_servers(conn, {"name": pattern})


def list_servers(conn: openstack.connection.Connection, filters: Mapping[str, str]) -> list[Server]:
    """Every page of ``GET /servers/detail?<filters>``, read as raw JSON: building an SDK resource
    per server costs milliseconds of CPU each, most of a large cluster's Records."""
    found: list[Server] = []
    params = dict(filters)
    while True:
        response = conn.compute.get("/servers/detail", params=params)
        sdk_exceptions.raise_from_response(response)
        body = response.json()
        found += [_server_value_of(item) for item in body.get("servers") or ()]
        marker = _next_marker(body.get("servers_links") or ())
        if marker is None or not body.get("servers"):
            return found
        params = {**filters, "marker": marker}


def _next_marker(links: Sequence[Mapping[str, Any]]) -> str | None:
    for link in links:
        if link.get("rel") == "next":
            values = parse_qs(urlsplit(str(link.get("href", ""))).query).get("marker")
            if values:
                return values[0]
    return None


def _server_value_of(item: Mapping[str, Any]) -> Server:
    metadata = item.get("metadata") or {}
    return Server(
        id=str(item["id"]),
        name=str(item.get("name", "")),
        metadata={str(key): str(value) for key, value in metadata.items()},
    )


def _name_pattern(names: Sequence[str]) -> str:
    """``^prefix(rest|rest|...)$``: a cluster's node names share a long prefix (``<cluster>-<id>-node-``),
    written once, so one search holds several times more names than ``^(name|name|...)$`` would."""
    prefix = os.path.commonprefix(list(names)) if len(names) > 1 else ""  # noqa: RUF071 (by character)
    rest = "|".join(_escape_name(name[len(prefix) :]) for name in names)
    return f"^{_escape_name(prefix)}({rest})$"


def _encoded_length(text: str) -> int:
    return len(quote_plus(_escape_name(text)))


def _escape_name(name: str) -> str:
    """``re.escape`` minus the hyphen (a literal outside brackets): node names are full of them, and
    each escaped one costs three more characters of the URL-encoded filter, so fewer names per call."""
    return re.escape(name).replace("\\-", "-")


def _find_by_id(conn: openstack.connection.Connection, server_id: str) -> Server | None:
    try:
        server = conn.compute.get_server(server_id)
    except sdk_exceptions.NotFoundException:
        return None
    check_own(conn, "server", server_id, server.project_id)
    return _server_value(server)


class ForeignResource(Exception):
    """A resource of another project than the credential's, refused before it is used: an admin's (or a
    global reader's) token reads, and may write, every project's."""

    def __init__(self, kind: str, resource_id: str, project_id: str, own: str) -> None:
        super().__init__(
            f"{kind} {resource_id} belongs to project {project_id}, not to the credential's ({own})"
        )
        self.project_id = project_id


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


def _server_value(server: Any) -> Server:
    metadata = server.metadata or {}
    return Server(
        id=str(server.id),
        name=str(server.name),
        metadata={str(key): str(value) for key, value in metadata.items()},
    )


def _check_server_id(server_id: str) -> None:
    if not _SERVER_ID.fullmatch(server_id):
        raise ValueError(f"{server_id!r} is not a Nova server id")


def upstream_error(exc: BaseException, upstream: str, action: str) -> UpstreamError:
    """Map an openstacksdk / keystoneauth exception to an UpstreamError that carries no upstream body.

    It says the action, the status and the request id; of a Nova error body only the ``message`` of
    its one known form (``{"badRequest": {"message": ...}}``), short and redacted, since it tells an
    operator what to fix ("Instance ... is locked"). Texts that may quote a reply (a version discovery
    failure, an unknown exception) are reduced to their kind. ``upstream`` is the service being called
    when the exception happened; errors that can only come from authentication are Keystone's.
    """
    if isinstance(exc, UpstreamError):
        return exc
    retryable = False
    if isinstance(exc, sdk_exceptions.HttpException):
        status = exc.status_code or 0
        reason = f"HTTP {status}{_nova_message(exc.response)}{_request_id(exc.request_id)}"
        retryable = _retryable_status(status)
    elif isinstance(exc, ksa_exceptions.HttpError):
        upstream = KEYSTONE
        reason = f"HTTP {exc.http_status} {type(exc).__name__}{_request_id(exc.request_id)}"
        retryable = _retryable_status(exc.http_status)
    elif isinstance(exc, ForeignResource):
        reason = f"refused: {exc}"
    elif isinstance(exc, AuthenticationBusy):
        upstream, reason, retryable = KEYSTONE, f"authentication busy: {exc}", True
    elif isinstance(exc, ksa_exceptions.SSLError):
        reason = f"TLS failure: {_one_line(str(exc))}"
    elif isinstance(exc, ksa_exceptions.ConnectTimeout):
        reason, retryable = "timed out", True
    elif isinstance(exc, ksa_exceptions.ConnectionError):
        reason, retryable = f"connection failed: {connection_failure(str(exc))}", True
    elif isinstance(exc, ksa_exceptions.DiscoveryFailure):
        reason, retryable = f"version discovery failed: {_discovery_failure_cause(exc, upstream)}", True
    elif isinstance(
        exc,
        ksa_exceptions.AuthorizationFailure
        | ksa_exceptions.AuthPluginException
        | ksa_exceptions.CatalogException
        | sdk_exceptions.ConfigException,
    ):
        upstream = KEYSTONE
        reason = f"{type(exc).__name__}: {_one_line(str(exc))}"
    elif isinstance(exc, sdk_exceptions.InvalidResponse):
        reason, retryable = "invalid response", True
    else:
        reason = type(exc).__name__
    return UpstreamError(upstream, _shorten(f"{action}: {reason}".strip()), retryable=retryable)


def _shorten(text: str) -> str:
    """At most _MAX_REASON_LENGTH characters, cut between words."""
    return textwrap.shorten(text, _MAX_REASON_LENGTH, placeholder=" ...")


def _discovery_failure_cause(exc: BaseException, upstream: str) -> str:
    """What made version discovery fail (a TLS failure, a 401...), mapped like any error: keystoneauth
    raises its DiscoveryFailure while handling it, and quotes it, reply text included, in its message."""
    cause: BaseException | None = exc
    for _ in range(_MAX_CAUSES):
        cause = cause.__cause__ or cause.__context__ if cause is not None else None
        if cause is None:
            break
        if not isinstance(cause, ksa_exceptions.DiscoveryFailure):
            return upstream_error(cause, upstream, "").reason.removeprefix(":").strip()
    return "no usable version document (check auth_url)"


def _nova_message(response: Any) -> str:
    """``": <message>"`` of Nova's error body (``{"<fault>": {"code": N, "message": "..."}}``), short and
    redacted; "" for any other body."""
    try:
        body = response.json() if response is not None else None
    except ValueError:
        return ""
    if not isinstance(body, dict) or len(body) != 1:
        return ""
    [fault] = body.values()
    message = fault.get("message") if isinstance(fault, dict) else None
    if not isinstance(message, str) or not message.strip():
        return ""
    return f": {redact_text(_one_line(message))[:_MAX_NOVA_MESSAGE_LENGTH]}"


def _request_id(request_id: str | None) -> str:
    return f" (request {request_id})" if request_id and _REQUEST_ID.fullmatch(request_id) else ""


def _about_one_request(exc: BaseException | None) -> bool:
    """A Nova 4xx other than refused credentials or throttling: this request was wrong (a locked server,
    a rejected value), OpenStack itself is usable. So is another project's resource, refused here."""
    if isinstance(exc, ForeignResource):
        return True
    if not isinstance(exc, sdk_exceptions.HttpException):
        return False
    status = exc.status_code or 0
    return 400 <= status < 500 and status not in _HTTP_CREDENTIALS_REFUSED and not _retryable_status(status)


def _retryable_status(status: int) -> bool:
    return status >= 500 or status in (_HTTP_TOO_MANY_REQUESTS, _HTTP_REQUEST_TIMEOUT) or status == 0


def _one_line(text: str) -> str:
    return " ".join(text.split())
