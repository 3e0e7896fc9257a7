"""The two ASGI apps: the webhook API external-dns calls, and health/metrics for the kubelet and Prometheus.

This layer only checks, decodes, calls the provider, encodes and maps failures to status codes. What it
guarantees, because external-dns exits on anything else (see docs/reference.md):

* every JSON reply carries exactly ``application/external.dns.webhook+json;version=1``;
* 200 for GET /records and POST /adjustendpoints, 204 with an empty body for POST /records;
* 400 only for a body that is not JSON of the expected shape; every other failure is a 503 whose
  small JSON body names the reason - never a 500;
* a reply within ``request_timeout`` seconds, counted from the request's arrival: reading the body,
  decoding it, the provider's blocking call and encoding the reply all fall inside it, the last three
  in worker threads, so a large body never stalls the event loop (or /healthz, served by the same loop);
  when the deadline passes the reply is a 503 while the thread finishes in the background;
* one ApplyChanges at a time: a second one while the first still runs is a 503.

Two refusals are 4xx on purpose, and a correctly wired external-dns never meets them (it exits on any
4xx): a request whose Host is not loopback or allowed (421: a web page reached through DNS rebinding
names its own host), and a POST without the webhook media type (415: external-dns always sends it; a
page's form or ``fetch`` without a preflight cannot). A body over ``max_body_bytes`` is a 503 naming the
setting, not a 413: a real external-dns of a cluster grown past the limit keeps running and retrying (its
log says what to raise) instead of crash-looping. A body of more than ``max_endpoints`` endpoints is cut
to the limit before it is decoded (webhook.bounded: names outside the domain filter, then the excess of
the largest requester), not refused: one namespace's Ingress of 10,001 names would otherwise fail every
external-dns loop of the cluster, and the provider's work on them would take the process past its memory
limit. external-dns' bodies decode at ~2x their size
(webhook/wire.py); the default limits hold the ApplyChanges of a node joining any cluster of the
chart's memory envelope (config.DEFAULT_MAX_REQUEST_BODY, config.DEFAULT_MAX_REQUEST_ENDPOINTS).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from landb_webhook.backends import UpstreamError
from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_REQUEST_ENDPOINTS, flag_and_variable
from landb_webhook.deadline import context_answering_by
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.logs import RepeatLimitedLog, get_logger, redact_text
from landb_webhook.metrics import Metrics
from landb_webhook.provider.interface import ApplyError, ApplyRefused, Readiness, WebhookProvider
from landb_webhook.webhook.bounded import Cut, cut_body
from landb_webhook.webhook.liveness import STALL_AFTER_DEADLINES, CallProgress
from landb_webhook.webhook.wire import (
    MEDIA_TYPE,
    WireFormatError,
    decode_changes,
    decode_endpoints,
    encode_domain_filter,
    encode_endpoints,
    endpoint_count,
    endpoints_over,
)

T = TypeVar("T")
Decoded = TypeVar("Decoded", list[Endpoint], Changes)

_log = get_logger(__name__)
_access_log = get_logger("landb_webhook.access")
_refusal_log = RepeatLimitedLog(_log)
"""Requests refused for their Host or media type, said once per period per value: they may be a flood."""
_cut_log = RepeatLimitedLog(_log)
"""Requests cut to the endpoint limit, said once per period per requester."""

APPLY_DRAIN_SECONDS = 20.0
"""At shutdown, how long to let a running apply finish (Kubernetes allows 30 s before SIGKILL)."""
MAX_BODY_SETTING = flag_and_variable("max_request_body")
MAX_ENDPOINTS_SETTING = flag_and_variable("max_request_endpoints")
ALLOWED_HOSTS_SETTING = flag_and_variable("api_allowed_hosts")
READ_WORKERS = 4
"""Threads for Records and AdjustEndpoints; more concurrent reads queue (and meet their deadline)."""

API_ROUTES: Mapping[tuple[str, str], str] = {
    ("GET", "/"): "negotiate",
    ("GET", "/records"): "records",
    ("POST", "/adjustendpoints"): "adjust_endpoints",
    ("POST", "/records"): "apply_changes",
}
HEALTH_ROUTES: Mapping[tuple[str, str], str] = {
    ("GET", "/healthz"): "healthz",
    ("GET", "/readyz"): "readyz",
    ("GET", "/metrics"): "metrics",
}
_ACCESS_FIELDS = "landb_webhook.access_fields"
"""ASGI scope key of the dict where a handler leaves counts for the access-log line."""


class DeadlineExceeded(Exception):
    """The provider did not answer within the request deadline; it goes on in the background."""


class ApplyInProgress(Exception):
    """An earlier ApplyChanges is still running (possibly past its own deadline)."""


class RequestTooLarge(Exception):
    """A request over one of the limits on what one request may carry, each a setting: a 503 naming it.

    ``kind`` labels ``rejected_requests_total`` and, in words, the log line; ``measure`` is the log
    field holding ``size``, what the request brought against ``limit``."""

    kind: ClassVar[str]
    measure: ClassVar[str]
    setting: ClassVar[str]

    def __init__(self, message: str, size: int, limit: int) -> None:
        super().__init__(
            f"{message}; raise {self.setting} (and the pod's memory with it) if external-dns "
            "really sends that much"
        )
        self.size = size
        self.limit = limit


class BodyTooLarge(RequestTooLarge):
    """The request body is larger than LANDB_MAX_REQUEST_BODY: refused as it is read."""

    kind, measure, setting = "too_large", "size", MAX_BODY_SETTING

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request body of {size} bytes is larger than {limit} bytes", size, limit)


class TooManyEndpoints(RequestTooLarge):
    """The decoded body holds more endpoints than LANDB_MAX_REQUEST_ENDPOINTS: refused before the
    provider reads them, since what it does with them grows with their names, not the body's bytes."""

    kind, measure, setting = "too_many_endpoints", "endpoints", MAX_ENDPOINTS_SETTING

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"request of {count} endpoints is more than {limit} endpoints", count, limit)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or BodyTooLarge once it passes ``limit``; the rest is read and dropped, not kept, so
    the client gets the reply rather than a connection reset halfway through its upload (the server's
    body deadline bounds how long that may take)."""
    chunks = bytearray()
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks += chunk
    if size > limit:
        raise BodyTooLarge(size, limit)
    return bytes(chunks)


def decode_within(
    decode: Callable[[bytes], Decoded],
    body: bytes,
    limit: int,
    in_domain: Callable[[str], bool] = lambda name: True,
) -> tuple[Decoded, list[Cut]]:
    """``decode(body)`` of at most ``limit`` endpoints (ApplyChanges: its four lists together), and what
    each requester lost: a body of more is cut before it is decoded (webhook.bounded: the names outside
    the domain filter, then the excess of the largest requester), since decoding 16 MiB of names alone
    would take ``serve`` past the chart's memory limit. Only a body the cut cannot read and the decoder
    can is refused (TooManyEndpoints). Called in the thread that decodes."""
    cuts: list[Cut] = []
    if body.count(b"{") > limit:  # fewer objects than the limit: not read twice
        cut = cut_body(body, limit, in_domain)
        if cut is not None:
            body, cuts = cut
    over = endpoints_over(body, limit)
    if over is not None:
        raise TooManyEndpoints(over, limit)
    decoded = decode(body)
    count = endpoint_count(decoded)
    if count > limit:
        raise TooManyEndpoints(count, limit)
    return decoded, cuts


def say_cuts(cuts: Sequence[Cut], metrics: Metrics, limit: int, path: str) -> None:
    """One line per requester cut (at most once per period each) and the dropped endpoints counted."""
    for cut in cuts:
        metrics.dropped_endpoints_total.labels(reason=cut.reason).inc(cut.dropped)
        if cut.reason == "outside_domain_filter":
            continue
        _cut_log.warning(
            (cut.requester, path),
            "endpoints dropped: the request is over the endpoint limit, the largest requester's excess "
            "is not read",
            path=path,
            resource=cut.requester or "(none)",
            dropped=cut.dropped,
            limit=limit,
            setting=MAX_ENDPOINTS_SETTING,
        )


@contextlib.asynccontextmanager
async def _until(answer_by: float) -> AsyncIterator[None]:
    """Raise DeadlineExceeded if the block is still running at ``answer_by`` (``time.monotonic()``)."""
    try:
        async with asyncio.timeout(max(0.0, answer_by - time.monotonic())):
            yield
    except TimeoutError:
        raise DeadlineExceeded from None


class ProviderCalls:
    """Runs the provider's blocking calls off the event loop, each under a deadline, with a single writer.

    The writer has its own one-thread pool; "an apply is running" is simply "the last apply's future
    is not done", so it cannot get stuck however the request that started it ended.
    """

    def __init__(
        self, deadline: float, *, read_workers: int = READ_WORKERS, progress: CallProgress | None = None
    ) -> None:
        self.deadline = deadline
        self.progress = progress or CallProgress(STALL_AFTER_DEADLINES * deadline)
        """Every call handed to a thread, until it returns: what /healthz judges (webhook.liveness)."""
        self._readers = ThreadPoolExecutor(read_workers, thread_name_prefix="provider-read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="provider-apply")
        self._last_apply: Future[None] | None = None

    def answer_by(self) -> float:
        """When a reply to a request arriving now is due (``time.monotonic()`` seconds)."""
        return time.monotonic() + self.deadline

    async def body(self, request: Request, limit: int, answer_by: float) -> bytes:
        """The request body, read by the reply's deadline."""
        async with _until(answer_by):
            return await read_body(request, limit)

    async def read(self, call: Callable[..., T], *args: Any, answer_by: float | None = None) -> T:
        """``call(*args)`` in a reader thread, answered by ``answer_by`` (else one deadline from now)."""
        answer_by = self.answer_by() if answer_by is None else answer_by
        future = self._tracked(self._readers.submit(context_answering_by(answer_by).run, call, *args))
        return await self._wait(future, answer_by)

    async def apply(
        self, call: Callable[[Changes], None], changes: Changes, *, answer_by: float | None = None
    ) -> None:
        if self._last_apply is not None and not self._last_apply.done():
            raise ApplyInProgress
        answer_by = self.answer_by() if answer_by is None else answer_by
        # The context the call runs in tells upstream retries when this reply is due (deadline.py).
        self._last_apply = self._tracked(
            self._writer.submit(context_answering_by(answer_by).run, call, changes)
        )
        await self._wait(self._last_apply, answer_by)

    def _tracked(self, future: Future[T]) -> Future[T]:
        call = self.progress.started()
        future.add_done_callback(lambda done: self.progress.ended(call, returned=not done.cancelled()))
        return future

    async def _wait(self, future: Future[T], answer_by: float) -> T:
        waiter = asyncio.wrap_future(future)
        # Past the deadline nobody awaits the waiter; fetch its outcome so asyncio does not complain.
        waiter.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            async with _until(answer_by):
                return await asyncio.shield(waiter)
        except DeadlineExceeded:
            future.cancel()  # only takes effect if it is still queued behind other calls
            raise

    def wait_for_apply(self, timeout: float | None = None) -> bool:
        """Block until the last apply has finished; False if it is still running after ``timeout`` s."""
        if self._last_apply is None:
            return True
        finished, _running = concurrent.futures.wait([self._last_apply], timeout)
        return bool(finished)

    def close(self) -> None:
        self._readers.shutdown(wait=False, cancel_futures=True)
        self._writer.shutdown(wait=False, cancel_futures=True)


def _json(body: bytes, status_code: int = 200) -> Response:
    # Set the header ourselves: Response(media_type=...) may append a charset, which external-dns rejects.
    return Response(body, status_code=status_code, headers={"Content-Type": MEDIA_TYPE})


def _failure(status_code: int, reason: str) -> Response:
    return _json(json.dumps({"error": redact_text(reason)}).encode(), status_code)


def _note(request: Request, **fields: object) -> None:
    """Add fields to this request's access-log line."""
    request.scope.setdefault(_ACCESS_FIELDS, {}).update(fields)


Handler = Callable[[Request], Awaitable[Response]]


def _mapping_failures(handler: Handler, metrics: Metrics) -> Handler:
    """Turn every failure into the status code external-dns survives (see the module docstring).

    An upstream failure that reaches this point failed the whole call (a read, or an apply before its
    writes): it is counted here; a failed metadata write is counted where it happens, in the executor.
    """

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except WireFormatError as error:
            _note(request, reason=str(error))
            metrics.rejected_requests_total.labels(reason=error.kind).inc()
            _log.warning("rejected request body", path=request.url.path, reason=str(error))
            return _failure(400, str(error))
        except RequestTooLarge as error:
            words = error.kind.replace("_", " ")
            _note(request, reason=words)
            metrics.rejected_requests_total.labels(reason=error.kind).inc()
            _log.error(
                f"request body refused: {words}",
                path=request.url.path,
                limit=error.limit,
                setting=error.setting,
                **{error.measure: error.size},
            )
            return _failure(503, str(error))
        except UpstreamError as error:
            metrics.upstream_errors_total.labels(upstream=error.upstream).inc()
            _note(request, reason=str(error))
            _log.warning(
                "upstream failed", upstream=error.upstream, reason=error.reason, path=request.url.path
            )
            return _failure(503, f"{error.upstream} unavailable: {error.reason}")
        except ApplyRefused as error:
            _note(request, reason=str(error))
            _log.warning("changes refused", reason=str(error))
            return _failure(503, f"changes refused: {error}")
        except ApplyError as error:
            _note(request, reason=str(error))
            _log.warning("changes not fully applied", reason=str(error))
            return _failure(503, f"changes not fully applied: {error}")
        except DeadlineExceeded:
            _note(request, reason="deadline exceeded")
            _log.warning("deadline exceeded; the call goes on in the background", path=request.url.path)
            return _failure(503, "deadline exceeded")
        except ApplyInProgress:
            _note(request, reason="apply in progress")
            _log.warning("apply refused: the previous apply is still running")
            return _failure(503, "apply in progress")
        except Exception as error:
            _note(request, reason=f"internal error: {type(error).__name__}")
            _log.exception("unexpected error", path=request.url.path)
            return _failure(503, f"internal error: {type(error).__name__}")

    return answer


LOOPBACK_NAMES = frozenset({"localhost"})


def host_name(host_header: str) -> str:
    """A Host header's name without its port: ``[::1]:8888`` -> ``::1``, ``Localhost.`` -> ``localhost``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_webhook_media_type(content_type: str) -> bool:
    """``application/external.dns.webhook+json;version=1``, matched as media types are: the type and
    parameter names case-insensitively, spaces around ``;`` allowed, other parameters ignored."""
    kind, _, parameters = content_type.partition(";")
    if kind.strip().lower() != "application/external.dns.webhook+json":
        return False
    values = {
        name.strip().lower(): value.strip().strip('"')
        for name, _, value in (part.partition("=") for part in parameters.split(";"))
    }
    return values.get("version") == "1"


class RequestGuard:
    """ASGI middleware of the API: only requests named for this host, and POSTs in the webhook's media type.

    The API has no authentication, only its loopback address; a web page reached through DNS rebinding
    talks to that address under its own host name, and a page's form or ``fetch`` can POST ``text/plain``
    without a preflight. external-dns calls ``http://localhost:8888`` and sends the media type.
    """

    def __init__(self, app: ASGIApp, *, allowed_hosts: Collection[str], metrics: Metrics) -> None:
        self.app = app
        self.allowed_hosts = frozenset(host_name(host) for host in allowed_hosts)
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, kind, reason, fields = refusal
        scope.setdefault(_ACCESS_FIELDS, {}).update(reason=reason)
        self.metrics.rejected_requests_total.labels(reason=kind).inc()
        _refusal_log.warning((kind, *fields.values()), f"request refused: {kind.replace('_', ' ')}", **fields)
        await _failure(status, reason)(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str, dict[str, str]] | None:
        headers = {name: value.decode("latin-1") for name, value in scope["headers"]}
        host = headers.get(b"host", "")
        name = host_name(host)
        if not (is_loopback(name) or name in self.allowed_hosts):
            shown = host[:100]
            return (
                421,
                "wrong_host",
                f"Host {shown!r} is not served here: only loopback names (127.0.0.1, ::1, localhost) "
                f"and {ALLOWED_HOSTS_SETTING} are",
                {"host": shown, "hint": f"add the name to {ALLOWED_HOSTS_SETTING} if external-dns uses it"},
            )
        content_type = headers.get(b"content-type", "")
        if scope["method"] == "POST" and not is_webhook_media_type(content_type):
            shown = content_type[:100]
            return (
                415,
                "wrong_media_type",
                f"Content-Type must be {MEDIA_TYPE}, not {shown!r}",
                {"content_type": shown},
            )
        return None


class AccessLog:
    """ASGI middleware: one log line and the request metrics per request.

    Both are recorded just before the last byte of the reply is sent, so a client holding a complete
    reply can rely on them. With ``quiet`` (probes, scrapes) the line is logged at debug, else at info.
    """

    def __init__(
        self, app: ASGIApp, *, metrics: Metrics, routes: Mapping[tuple[str, str], str], quiet: bool
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.quiet = quiet

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        fields: dict[str, object] = {}
        scope[_ACCESS_FIELDS] = fields
        status = 500  # what the server answers if the app fails before starting a reply
        recorded = False

        def record() -> None:
            nonlocal recorded
            recorded = True
            elapsed = time.perf_counter() - started
            route = self.routes.get((scope["method"], scope["path"]), "unmatched")
            self.metrics.requests_total.labels(route=route, code=str(status)).inc()
            self.metrics.request_duration_seconds.labels(route=route).observe(elapsed)
            log = _access_log.debug if self.quiet else _access_log.info
            log(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round(elapsed * 1000, 1),
                **fields,
            )

        async def send_recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()
            await send(message)

        try:
            await self.app(scope, receive, send_recording)
        finally:
            if not recorded:
                record()


def create_api_app(
    provider: WebhookProvider,
    metrics: Metrics,
    *,
    request_timeout: float,
    max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY,
    max_endpoints: int = DEFAULT_MAX_REQUEST_ENDPOINTS,
    allowed_hosts: Collection[str] = (),
    progress: CallProgress | None = None,
) -> Starlette:
    """The webhook API external-dns calls (bind it to localhost: it has no authentication).

    ``app.state.provider_calls`` is the :class:`ProviderCalls` running the provider's calls; they report
    to ``progress``, which the health app's /healthz reads.
    """
    calls = ProviderCalls(request_timeout, progress=progress)

    async def negotiate(request: Request) -> Response:
        # Answered from memory: external-dns gives up after ~5 tries in a few seconds at start-up.
        return _json(encode_domain_filter(provider.domain_filter()))

    def current_records() -> tuple[int, bytes]:
        current = provider.records()
        return len(current), encode_endpoints(current)

    async def records(request: Request) -> Response:
        count, reply = await calls.read(current_records)
        _note(request, endpoints_out=count)
        return _json(reply)

    def adjusted(body: bytes) -> tuple[int, int, bytes]:
        in_domain = provider.domain_filter().matches  # from memory (negotiation's answer)
        desired, cuts = decode_within(decode_endpoints, body, max_endpoints, in_domain)
        say_cuts(cuts, metrics, max_endpoints, "/adjustendpoints")
        result = provider.adjust_endpoints(desired)
        return len(desired), len(result), encode_endpoints(result)

    async def adjust_endpoints(request: Request) -> Response:
        answer_by = calls.answer_by()
        body = await calls.body(request, max_body_bytes, answer_by)
        count_in, count_out, reply = await calls.read(adjusted, body, answer_by=answer_by)
        _note(request, endpoints_in=count_in, endpoints_out=count_out)
        return _json(reply)

    async def apply_changes(request: Request) -> Response:
        answer_by = calls.answer_by()
        body = await calls.body(request, max_body_bytes, answer_by)
        changes, cuts = await calls.read(
            decode_within,
            decode_changes,
            body,
            max_endpoints,
            provider.domain_filter().matches,
            answer_by=answer_by,
        )
        say_cuts(cuts, metrics, max_endpoints, "/records")
        _note(
            request,
            create=len(changes.create),
            update=len(changes.update_new),
            delete=len(changes.delete),
        )
        await calls.apply(provider.apply_changes, changes, answer_by=answer_by)
        return Response(status_code=204)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            # Leaving mid-apply would stop between "alias added" and "alias removed": let it finish.
            if not await asyncio.to_thread(calls.wait_for_apply, APPLY_DRAIN_SECONDS):
                _log.error("stopping while an apply is still running", waited_seconds=APPLY_DRAIN_SECONDS)
            calls.close()

    handlers: dict[str, Handler] = {
        "negotiate": negotiate,
        "records": records,
        "adjust_endpoints": adjust_endpoints,
        "apply_changes": apply_changes,
    }
    app = Starlette(
        routes=[
            Route(path, _mapping_failures(handlers[name], metrics), methods=[method])
            for (method, path), name in API_ROUTES.items()
        ],
        lifespan=lifespan,
    )
    app.state.provider_calls = calls
    app.add_middleware(RequestGuard, allowed_hosts=allowed_hosts, metrics=metrics)
    return _finish(app, metrics, API_ROUTES, quiet=False)


def create_health_app(
    provider: WebhookProvider, metrics: Metrics, *, progress: CallProgress | None = None
) -> Starlette:
    """/healthz (the event loop answers and, given the API's ``progress``, its calls are not stuck:
    webhook.liveness), /readyz (the provider can do its job), /metrics (Prometheus)."""
    if progress is not None:
        metrics.provider_calls_in_flight.set_function(progress.in_flight)

    async def healthz(request: Request) -> Response:
        stalled = progress.stalled() if progress is not None else None
        if stalled is not None:
            _log.error("liveness failed: webhook calls are stuck", reason=stalled, hint="restart the process")
            return Response(
                f"stalled: {stalled}\n".encode(),
                status_code=503,
                headers={"Content-Type": "text/plain; charset=utf-8"},
            )
        return Response(b"ok\n", headers={"Content-Type": "text/plain; charset=utf-8"})

    async def readyz(request: Request) -> Response:
        try:
            readiness = provider.readiness()
        except Exception as error:
            _log.exception("readiness check failed")
            readiness = Readiness(False, f"readiness check failed: {type(error).__name__}")
        body = f"{'ready' if readiness.ready else 'not ready'}: {redact_text(readiness.reason)}\n"
        return Response(
            body.encode(),
            status_code=200 if readiness.ready else 503,
            headers={"Content-Type": "text/plain; charset=utf-8"},
        )

    async def prometheus(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(metrics.registry), headers={"Content-Type": content_type})

    handlers: dict[str, Handler] = {"healthz": healthz, "readyz": readyz, "metrics": prometheus}
    app = Starlette(
        routes=[
            Route(path, handlers[name], methods=[method]) for (method, path), name in HEALTH_ROUTES.items()
        ]
    )
    return _finish(app, metrics, HEALTH_ROUTES, quiet=True)


def _finish(
    app: Starlette, metrics: Metrics, routes: Mapping[tuple[str, str], str], *, quiet: bool
) -> Starlette:
    # A redirect (3xx) is fatal to external-dns; an unknown path is a plain 404.
    app.router.redirect_slashes = False
    app.add_middleware(AccessLog, metrics=metrics, routes=routes, quiet=quiet)
    return app
