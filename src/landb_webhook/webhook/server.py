"""Serving the API and health apps from one process and one event loop, with uvicorn.

Sockets are bound by :func:`bind_listener` before anything else happens (external-dns only retries
negotiation for a few seconds), then :class:`HttpServers` serves them until SIGTERM or SIGINT, and
finishes the requests in flight before returning.

Each listener has its own :class:`ConnectionLimits`: a request's head and its body must arrive within a
deadline (uvicorn only times out idle keep-alive connections, so a client sending half a request held
its connection forever), and past a number of open connections a new one is answered 503 and closed at
once. With the API's connections capped, a flood of it cannot use up the process' file descriptors, and
the health listener, with its own small budget, keeps answering the kubelet.

The health listener is open to every pod (the kubelet probes the pod IP), so its budget must not be
something a pod can hold: it keeps an idle connection a few seconds only, and at its cap a new connection
takes the place of the connection idle the longest (between requests, or not yet through its first head)
instead of being refused. Only connections whose request is being answered, a few milliseconds each,
are never closed for another: a probe always finds a place.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from landb_webhook.config import flag_and_variable, setting_default
from landb_webhook.logs import RepeatLimitedLog, get_logger

_log = get_logger(__name__)

KEEP_ALIVE_SECONDS = 120
"""Longer than Go's idle-connection timeout (90 s), so external-dns, not us, closes idle connections
and never sends a request down a connection we are closing."""
HEALTH_KEEP_ALIVE_SECONDS = 5
"""Idle connections to the health listener: the kubelet opens one per probe, Prometheus reconnects each
scrape; holding one longer only holds a place on the listener."""
REQUEST_HEAD_TIMEOUT = 10.0
"""Seconds from a connection's opening (or a request's first byte) to the end of the request's head;
external-dns writes a request at once, over loopback."""
REQUEST_BODY_TIMEOUT = 10.0
"""Seconds from the end of a request's head to the end of its body."""
HEALTH_MAX_CONNECTIONS = 16
"""Open connections to the health listener: kubelet probes and Prometheus scrapes, one or two at a time."""
LISTEN_BACKLOG = 128
"""Connections waiting in the kernel to be accepted; also how many asyncio accepts per loop tick."""
ACCEPT_OUT_OF_RESOURCES = "socket.accept() out of system resource"
"""asyncio's message when accept() fails with EMFILE, ENFILE, ENOBUFS or ENOMEM."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What one listener tolerates from its clients."""

    listener: str
    """``api`` or ``health``, for log lines."""
    max_connections: int
    head_timeout: float = REQUEST_HEAD_TIMEOUT
    body_timeout: float = REQUEST_BODY_TIMEOUT
    setting: str | None = None
    """The setting that raises ``max_connections``, named in the log line when the cap is reached."""
    keep_alive: int = KEEP_ALIVE_SECONDS
    """Seconds an idle keep-alive connection is kept open."""
    idle_gives_way: bool = False
    """At the cap, close the connection idle the longest for the new one, instead of refusing the new one."""


def api_limits(max_connections: int = setting_default("api_max_connections")) -> ConnectionLimits:
    """The API listener's cap (LANDB_API_MAX_CONNECTIONS); external-dns keeps one or two open."""
    return ConnectionLimits("api", max_connections, setting=flag_and_variable("api_max_connections"))


HEALTH_LIMITS = ConnectionLimits(
    "health", HEALTH_MAX_CONNECTIONS, keep_alive=HEALTH_KEEP_ALIVE_SECONDS, idle_gives_way=True
)

_TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 26\r\nconnection: close\r\n\r\ntoo many open connections\n"
)


class LimitedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's head and body, and a connection cap.

    Subclassed per listener by :func:`_protocol_for`, which sets :attr:`limits` and :attr:`log`.
    """

    limits: ClassVar[ConnectionLimits]
    log: ClassVar[RepeatLimitedLog]
    """Slow and surplus clients are said at most once per period: a flood of them is no flood of lines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting: str | None = None
        """``head`` or ``body`` while a deadline runs for that part of a request, else None."""
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        """Loop time of the connection's opening or its last response: the oldest idle gives way first."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        if self._over_cap() and not self._close_the_longest_idle():
            self.log.warning(
                ("connection cap", self.limits.listener),
                "connection refused: too many open connections",
                listener=self.limits.listener,
                max_connections=self.limits.max_connections,
                **({"setting": self.limits.setting} if self.limits.setting else {}),
            )
            transport.write(_TOO_MANY_CONNECTIONS)
            transport.close()
            return
        self._await("head")

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._await("body")
        elif state is h11.IDLE and self.conn.trailing_data[0]:
            self._await("head")  # part of the next request's head, after a keep-alive pause
        elif state is not h11.IDLE:
            self._await(None)  # the whole request is in, or the connection is ending

    def connection_lost(self, exc: Exception | None) -> None:
        self._await(None)
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._idle_since = self.loop.time()
        super().on_response_complete()

    def _idle(self) -> bool:
        """No request of this connection is being answered: it waits for its client."""
        return self.cycle is None or self.cycle.response_complete

    def _open(self) -> list[LimitedH11Protocol]:
        """This listener's connections not already closing (a closed one leaves the set a tick later)."""
        return [
            connection
            for connection in self.connections
            if isinstance(connection, LimitedH11Protocol) and not connection.transport.is_closing()
        ]

    def _over_cap(self) -> bool:
        return len(self._open()) > self.limits.max_connections

    def _close_the_longest_idle(self) -> bool:
        """With :attr:`ConnectionLimits.idle_gives_way`, close the connection idle the longest to make room
        for this one; False when the listener does not give way or every other connection is busy."""
        if not self.limits.idle_gives_way:
            return False
        idle = [connection for connection in self._open() if connection is not self and connection._idle()]
        if not idle:
            return False
        longest = min(idle, key=lambda connection: connection._idle_since)
        self.log.warning(
            ("gave way", self.limits.listener),
            "connection closed: idle the longest, its place given to a new connection",
            listener=self.limits.listener,
            max_connections=self.limits.max_connections,
        )
        longest.transport.close()
        return True

    def _await(self, part: str | None) -> None:
        """Start the deadline for ``part`` unless it already runs; None stops it."""
        if part == self._awaiting:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._awaiting = part
        if part is not None:
            timeout = self.limits.head_timeout if part == "head" else self.limits.body_timeout
            self._deadline = self.loop.call_later(timeout, self._too_slow, part, timeout)

    def _too_slow(self, part: str, timeout: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self.log.warning(
            ("too slow", self.limits.listener, part),
            f"connection closed: the request {part} did not arrive in time",
            listener=self.limits.listener,
            timeout_seconds=timeout,
        )
        self.transport.close()


def _protocol_for(limits: ConnectionLimits, log: RepeatLimitedLog) -> type[LimitedH11Protocol]:
    return type(
        f"LimitedH11Protocol_{limits.listener}", (LimitedH11Protocol,), {"limits": limits, "log": log}
    )


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one). Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto is IPPROTO_TCP,
    # and without it every reply written in two parts waits ~40 ms for the client's delayed ACK.
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    return listener


def listener_url(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to :class:`HttpServers`, which stops all servers at once."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServers:
    """Several ASGI apps, each on its own already-bound socket, served on the running event loop."""

    def __init__(
        self,
        apps: Sequence[tuple[ASGIApp, socket.socket, ConnectionLimits]],
        *,
        graceful_timeout: int = 15,
    ) -> None:
        self._listeners = [listener for _app, listener, _limits in apps]
        self._log = RepeatLimitedLog(_log)
        self._servers = [
            _Server(
                uvicorn.Config(
                    app,
                    http=_protocol_for(limits, self._log),
                    log_config=None,  # logging is ours (landb_webhook.logs)
                    access_log=False,  # one access line per request comes from the app itself
                    lifespan="on",
                    server_header=False,
                    timeout_keep_alive=limits.keep_alive,
                    timeout_graceful_shutdown=graceful_timeout,
                    backlog=LISTEN_BACKLOG,
                )
            )
            for app, _listener, limits in apps
        ]

    @property
    def started(self) -> bool:
        return all(server.started for server in self._servers)

    def stop(self) -> None:
        """Ask every server to finish its requests in flight and return; callable from any thread."""
        for server in self._servers:
            if server.should_exit:
                server.force_exit = True  # a second request skips the grace period
            server.should_exit = True

    async def serve(self, *, handle_signals: bool = True) -> None:
        """Serve until :meth:`stop` (or SIGTERM/SIGINT when ``handle_signals``), then shut down gracefully."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
        for signum in signals:
            loop.add_signal_handler(signum, self._on_signal, signum)
        previous_handler = loop.get_exception_handler()
        loop.set_exception_handler(self.handle_loop_exception)
        try:
            await asyncio.gather(
                *(
                    server.serve(sockets=[listener])
                    for server, listener in zip(self._servers, self._listeners, strict=True)
                )
            )
        finally:
            loop.set_exception_handler(previous_handler)
            for signum in signals:
                loop.remove_signal_handler(signum)

    def handle_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio reports each failed accept() at the descriptor limit, thousands a second: say it at
        most once per period, with how many were held back; anything else as asyncio does."""
        if context.get("message") != ACCEPT_OUT_OF_RESOURCES:
            loop.default_exception_handler(context)
            return
        error = context.get("exception")
        self._log.error(
            "accept failed",
            "cannot accept connections: out of file descriptors or memory",
            error=str(error) if error is not None else None,
            hint="some client holds many connections; the caps are LANDB_API_MAX_CONNECTIONS and "
            f"{HEALTH_MAX_CONNECTIONS} on the health listener",
        )

    def _on_signal(self, signum: int) -> None:
        _log.info("stopping", signal=signal.Signals(signum).name)
        self.stop()
