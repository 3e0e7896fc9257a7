"""Serving the API and health apps from one process and one event loop, with uvicorn.

Sockets are bound by :func:`bind_listener` before anything else happens (external-dns only retries
negotiation for a few seconds), then :class:`HttpServers` serves them until SIGTERM or SIGINT, and
finishes the requests in flight before returning.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Iterator, Sequence

import uvicorn
from starlette.types import ASGIApp

from landb_webhook.logs import get_logger

_log = get_logger(__name__)

KEEP_ALIVE_SECONDS = 120
"""Longer than Go's idle-connection timeout (90 s), so external-dns, not us, closes idle connections
and never sends a request down a connection we are closing."""


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

    def __init__(self, apps: Sequence[tuple[ASGIApp, socket.socket]], *, graceful_timeout: int = 15) -> None:
        self._listeners = [listener for _app, listener in apps]
        self._servers = [
            _Server(
                uvicorn.Config(
                    app,
                    log_config=None,  # logging is ours (landb_webhook.logs)
                    access_log=False,  # one access line per request comes from the app itself
                    lifespan="on",
                    server_header=False,
                    timeout_keep_alive=KEEP_ALIVE_SECONDS,
                    timeout_graceful_shutdown=graceful_timeout,
                )
            )
            for app, _listener in apps
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
        try:
            await asyncio.gather(
                *(
                    server.serve(sockets=[listener])
                    for server, listener in zip(self._servers, self._listeners, strict=True)
                )
            )
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        _log.info("stopping", signal=signal.Signals(signum).name)
        self.stop()
