"""The two ASGI apps: the webhook API external-dns calls, and health/metrics for the kubelet and Prometheus.

This layer only decodes, calls the provider, encodes and maps failures to status codes. What it
guarantees, because external-dns exits on anything else (see docs/reference.md):

* every JSON reply carries exactly ``application/external.dns.webhook+json;version=1``;
* 200 for GET /records and POST /adjustendpoints, 204 with an empty body for POST /records;
* 400 only for a body that is not JSON of the expected shape; every other failure is a 503 whose
  small JSON body names the reason - never a 500, never another 4xx on these routes;
* bodies up to 32 MiB are read (external-dns has no limit of its own, the contract promises that much);
  a larger one is a 503, not a 413 (any 4xx but 400 would make external-dns exit);
* a reply within ``request_timeout`` seconds: blocking provider calls run in worker threads, and when
  the deadline passes the reply is a 503 while the thread finishes in the background;
* one ApplyChanges at a time: a second one while the first still runs is a 503.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from landb_webhook.deadline import context_answering_by
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.logs import get_logger, redact_text
from landb_webhook.metrics import Metrics
from landb_webhook.ports import UpstreamError
from landb_webhook.provider.interface import ApplyError, ApplyRefused, Readiness, WebhookProvider
from landb_webhook.webhook.liveness import STALL_AFTER_DEADLINES, CallProgress
from landb_webhook.webhook.wire import (
    MEDIA_TYPE,
    WireFormatError,
    decode_changes,
    decode_endpoints,
    encode_domain_filter,
    encode_endpoints,
)

T = TypeVar("T")

_log = get_logger(__name__)
_access_log = get_logger("landb_webhook.access")

DEFAULT_REQUEST_TIMEOUT = 10.0
APPLY_DRAIN_SECONDS = 20.0
"""At shutdown, how long to let a running apply finish (Kubernetes allows 30 s before SIGKILL)."""
MAX_BODY_BYTES = 32 * 2**20
"""The largest request body read; see the module docstring."""
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


class BodyTooLarge(Exception):
    """The request body is larger than :data:`MAX_BODY_BYTES`."""

    def __init__(self, size: int) -> None:
        super().__init__(f"request body of {size} bytes is larger than {MAX_BODY_BYTES} bytes")
        self.size = size


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, or BodyTooLarge once it passes ``limit``; the rest is read and dropped, not kept, so
    the client gets the reply rather than a connection reset halfway through its upload."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
    if size > limit:
        raise BodyTooLarge(size)
    return b"".join(chunks)


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

    async def read(self, call: Callable[..., T], *args: Any) -> T:
        return await self._wait(self._tracked(self._readers.submit(self._by_deadline().run, call, *args)))

    async def apply(self, call: Callable[[Changes], None], changes: Changes) -> None:
        if self._last_apply is not None and not self._last_apply.done():
            raise ApplyInProgress
        self._last_apply = self._tracked(self._writer.submit(self._by_deadline().run, call, changes))
        await self._wait(self._last_apply)

    def _tracked(self, future: Future[T]) -> Future[T]:
        call = self.progress.started()
        future.add_done_callback(lambda done: self.progress.ended(call, returned=not done.cancelled()))
        return future

    def _by_deadline(self) -> contextvars.Context:
        """The context the call runs in: upstream retries see when this reply is due (deadline.py)."""
        return context_answering_by(time.monotonic() + self.deadline)

    async def _wait(self, future: Future[T]) -> T:
        waiter = asyncio.wrap_future(future)
        # Past the deadline nobody awaits the waiter; fetch its outcome so asyncio does not complain.
        waiter.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            async with asyncio.timeout(self.deadline):
                return await asyncio.shield(waiter)
        except TimeoutError:
            future.cancel()  # only takes effect if it is still queued behind other calls
            raise DeadlineExceeded from None

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
        except BodyTooLarge as error:
            _note(request, reason="body too large")
            metrics.rejected_requests_total.labels(reason="too_large").inc()
            _log.error("request body refused: too large", path=request.url.path, reason=str(error))
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
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
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

    async def records(request: Request) -> Response:
        current = await calls.read(provider.records)
        _note(request, endpoints_out=len(current))
        return _json(encode_endpoints(current))

    async def adjust_endpoints(request: Request) -> Response:
        desired = decode_endpoints(await read_body(request))
        _note(request, endpoints_in=len(desired))
        adjusted: list[Endpoint] = await calls.read(provider.adjust_endpoints, desired)
        _note(request, endpoints_out=len(adjusted))
        return _json(encode_endpoints(adjusted))

    async def apply_changes(request: Request) -> Response:
        changes = decode_changes(await read_body(request))
        _note(
            request,
            create=len(changes.create),
            update=len(changes.update_new),
            delete=len(changes.delete),
        )
        await calls.apply(provider.apply_changes, changes)
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
