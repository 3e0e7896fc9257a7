"""The simulator's single ASGI app: Keystone, Nova, Glance and Kubernetes behind one port.

A front door in front of the routes records every call (for tests and benchmarks that count requests)
and applies injected faults, so no API module needs to know about either.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from landb_simulator import glance, keystone, kube, neutron, nova, octavia
from landb_simulator.lifecycle import Lifecycle
from landb_simulator.state import ApiCall, FaultAction, SimulatorState

log = logging.getLogger("landb_simulator")

_PREFIXES = (
    ("/identity", "keystone"),
    ("/compute", "nova"),
    ("/image", "glance"),
    ("/load-balancer", "octavia"),
    ("/network", "neutron"),
)
_KUBE_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def api_of(path: str) -> str:
    for prefix, api in _PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return api
    return "kubernetes"


def error_response(api: str, status: int, message: str) -> Response:
    """The error body each API family uses, so clients parse injected faults like real ones."""
    if api == "nova":
        return nova.nova_error(status, message)
    if api == "octavia":
        return octavia.octavia_error(status, message)
    if api == "neutron":
        return neutron.neutron_error(status, message)
    if api in ("keystone", "glance"):
        return keystone.keystone_error(status, message)
    return kube.kube_error(status, _KUBE_REASONS.get(status, "Unknown"), message)


class ResetConnection(Exception):
    """Raised by the front door for a ``reset`` fault: the server drops the connection without a reply."""


def _fault_response(api: str, action: FaultAction) -> Response:
    assert action.status is not None
    if action.body is None:
        response: Response = error_response(api, action.status, "Injected fault: the service is unavailable.")
    elif isinstance(action.body, bytes | str):
        response = Response(action.body, status_code=action.status, media_type="text/plain")
    else:
        response = Response(json.dumps(action.body), status_code=action.status, media_type="application/json")
    response.headers.update(action.headers)
    return response


async def _discard(message: Message) -> None:
    """Where the reply of a request goes when an ``after_processing`` fault replaces it."""


class FrontDoor:
    """ASGI middleware: fault injection before routing, call recording at response start.

    A reset is recorded with status 0: the client got no reply at all.
    """

    def __init__(self, app: ASGIApp, state: SimulatorState, lifecycle: Lifecycle) -> None:
        self.app = app
        self.state = state
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        api = api_of(scope["path"])
        self.state.request_started(api)
        answered = False

        async def answering_send(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body") and not answered:
                # Answered once the last part of the reply is handed over, not when the app returns: a
                # client holding its reply must never see its request still in flight.
                answered = True
                self.state.request_ended(api)
            await send(message)

        try:
            await self._serve(scope, receive, answering_send, api)
        finally:
            if not answered:  # no reply at all: a reset, a failure, a client gone
                self.state.request_ended(api)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, api: str) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        query = scope.get("query_string", b"").decode("latin-1")

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self.state.record_call(ApiCall(api, method, path, status, query))
                log.debug("simulator %s %s %s -> %d", api, method, path, status)
            await send(message)

        action = self.state.take_fault(api, method, path)
        if action is None:
            await self.app(scope, receive, recording_send)
            return
        log.debug("simulator fault for %s %s: %s", method, path, action)
        if not await self.lifecycle.sleep(action.delay):
            await error_response(api, 503, "The simulator is shutting down.")(scope, receive, recording_send)
            return
        if action.expire_tokens:
            self.state.expire_tokens()
        if not action.replaces_reply:
            await self.app(scope, receive, recording_send)
            return
        if action.after_processing:
            await self.app(scope, receive, _discard)
        if action.reset:
            self.state.record_call(ApiCall(api, method, path, 0, query))
            raise ResetConnection(f"{method} {path}")
        await _fault_response(api, action)(scope, receive, recording_send)


def build_app(state: SimulatorState, lifecycle: Lifecycle) -> ASGIApp:
    async def not_routed(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        api = api_of(request.url.path)
        if api == "kubernetes" and status == 404:
            return kube.kube_error(404, "NotFound", "the server could not find the requested resource")
        return error_response(api, status, "The resource could not be found." if status == 404 else str(exc))

    async def crashed(request: Request, exc: Exception) -> Response:
        if isinstance(exc, ClientDisconnect):
            # The client went away (a killed process) before its request was read: nothing happened.
            log.debug("simulator: client gone before %s %s was read", request.method, request.url.path)
            return Response(status_code=499)
        log.exception("simulator handler failed for %s %s", request.method, request.url.path)
        return error_response(
            api_of(request.url.path), 500, f"Unexpected simulator error: {type(exc).__name__}"
        )

    routes: list[Any] = [
        *keystone.routes(state),
        *nova.NovaApi(state).routes(),
        *glance.routes(state),
        *octavia.OctaviaApi(state).routes(),
        *neutron.NeutronApi(state).routes(),
        *kube.KubeApi(state, lifecycle).routes(),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={404: not_routed, 405: not_routed, Exception: crashed},
    )
    return FrontDoor(app, state, lifecycle)
