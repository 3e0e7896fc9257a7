"""Runs the simulator on loopback in a background thread and writes the client configuration for it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
import yaml
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from landb_simulator.asgi import ResetConnection, build_app
from landb_simulator.identity import REGION
from landb_simulator.landb_dns import LANDB_SYNC_PERIOD, LandbDnsServer
from landb_simulator.landb_zone import OtherDevice
from landb_simulator.lifecycle import Lifecycle
from landb_simulator.state import SimulatorState
from landb_simulator.tls import ServerCertificate, loopback_certificate

log = logging.getLogger("landb_simulator")

LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one). Raises OSError."""
    # proto must say TCP: asyncio sets TCP_NODELAY only on accepted sockets whose proto is IPPROTO_TCP,
    # and without it every reply written in two parts waits ~40 ms for the client's delayed ACK.
    listener = socket.socket(
        socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    return listener


class _SimulatorH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, with two changes that only concern the simulator's own server.

    No access log: uvicorn's ``access_log=False`` would silence every uvicorn in the process, the
    webhook under test included. And idle connections are dropped at shutdown rather than closed
    politely: a TLS close waits for the client's close_notify, which an idle pooled client never sends,
    so every stop would take the whole graceful-shutdown timeout.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False
        inner = self.app

        async def resetting(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await inner(scope, receive, send)
            except ResetConnection:
                self._reset()

        self.app = resetting

    def _reset(self) -> None:
        """Drop this connection with a TCP reset (linger 0), as a crashed or overloaded server would."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()
        if self.cycle is not None:
            self.cycle.disconnected = True  # no "500 Internal Server Error" into the dropped connection

    def shutdown(self) -> None:
        idle = self.cycle is None or self.cycle.response_complete
        super().shutdown()
        if idle:
            self.transport.abort()


class _Server(uvicorn.Server):
    """uvicorn's server, reporting when it listens and stopping as soon as it is asked to."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self._exit_requested = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()

    async def main_loop(self) -> None:
        # uvicorn polls should_exit every 0.1 s; waking on request makes every test's teardown faster.
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_requested.wait(), timeout=0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own shutdown grants every connection a fixed 0.1 s; here watches and delays have
        # already been ended by the lifecycle and idle connections are aborted, so poll instead.
        for listener in self.servers:
            listener.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        deadline = asyncio.get_running_loop().time() + STOP_TIMEOUT / 2
        while self.server_state.connections or self.server_state.tasks:
            if asyncio.get_running_loop().time() > deadline:
                log.warning("simulator: cancelling %d unfinished request(s)", len(self.server_state.tasks))
                for task in self.server_state.tasks:
                    task.cancel()
                break
            await asyncio.sleep(0.005)
        for listener in self.servers:
            await listener.wait_closed()

    def request_exit(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Thread-safe: stop after the current tick."""
        self.should_exit = True
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed already
                loop.call_soon_threadsafe(self._exit_requested.set)


@dataclass(frozen=True)
class ClientConfig:
    """Files that point the real clients at a running simulator."""

    clouds_yaml: Path
    kubeconfig: Path
    """Points at the HTTPS port, with the simulator's CA embedded."""
    cloud_name: str = "simulator"
    """Password authentication as the webhook's member user."""
    appcred_cloud_name: str = "simulator-appcred"
    """``v3applicationcredential`` of the same user."""
    trust_cloud_name: str = "simulator-trust"
    """``v3password`` with ``trust_id``, as Magnum's cluster trustee logs in."""
    readonly_cloud_name: str = "simulator-readonly"
    """A user with only the reader role: Nova refuses its metadata writes with 403."""
    admin_cloud_name: str = "simulator-admin"
    ca_file: Path | None = None
    """The CA certificate of the HTTPS port, for tools that want a file (``curl --cacert``)."""

    def environment(self) -> dict[str, str]:
        """Variables that make openstacksdk, the openstack CLI, kubectl and the kubernetes client use it."""
        return {
            "OS_CLIENT_CONFIG_FILE": str(self.clouds_yaml),
            "OS_CLOUD": self.cloud_name,
            "KUBECONFIG": str(self.kubeconfig),
        }


class Simulator:
    """The simulated Keystone, Nova, Glance and Kubernetes APIs on loopback.

    Every API is served on one plain-HTTP port (``url``) and, identically, on one HTTPS port
    (``https_url``, certificate from a per-instance CA) because client-go only sends bearer tokens over
    TLS; the written kubeconfig uses the HTTPS port, clouds.yaml the plain one. ``with Simulator() as sim:``
    binds the sockets first (so port 0 works and the URLs are known before any client connects), serves
    from a daemon thread, and on exit ends open watches and injected delays before stopping. LanDB's DNS
    side (``dns``, UDP and TCP on ``dns.port``) publishes the servers' aliases every ``dns_sync_period``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        state: SimulatorState | None = None,
        tls_port: int = 0,
        dns_port: int = 0,
        dns_sync_period: float = LANDB_SYNC_PERIOD,
        other_devices: Iterable[OtherDevice] = (),
    ) -> None:
        """``other_devices``: LanDB devices outside the project whose aliases DNS answers too (landb_zone)."""
        self.host = host
        self.state = state if state is not None else SimulatorState()
        self.dns = LandbDnsServer(
            self.state, host, dns_port, sync_period=dns_sync_period, other_devices=other_devices
        )
        self._requested_port = port
        self._requested_tls_port = tls_port
        self._socket: socket.socket | None = None
        self._tls_socket: socket.socket | None = None
        self._ports: tuple[int, int] | None = None
        self._certificate: ServerCertificate | None = None
        self._servers: list[_Server] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lifecycle = Lifecycle()
        self._failure: BaseException | None = None

    @property
    def port(self) -> int:
        """The plain-HTTP port (``url``); still known after stop, for messages."""
        return self._bound_ports()[0]

    @property
    def tls_port(self) -> int:
        """The HTTPS port (``https_url``): the same APIs, for clients that only send tokens over TLS."""
        return self._bound_ports()[1]

    def _bound_ports(self) -> tuple[int, int]:
        if self._ports is None:
            raise RuntimeError("the simulator is not started")
        return self._ports

    @property
    def url(self) -> str:
        return f"http://{self._authority()}:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://{self._authority()}:{self.tls_port}"

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate that signed the HTTPS port's certificate."""
        if self._certificate is None:
            raise RuntimeError("the simulator is not started")
        return self._certificate.ca_pem

    def _authority(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def start(self) -> Simulator:
        if self._thread is not None:
            raise RuntimeError("the simulator is already started")
        self._lifecycle = Lifecycle()
        app = build_app(self.state, self._lifecycle)
        try:
            self._socket = listen(self.host, self._requested_port)
            self._tls_socket = listen(self.host, self._requested_tls_port)
            self._ports = (self._socket.getsockname()[1], self._tls_socket.getsockname()[1])
            self._certificate = loopback_certificate(tuple(dict.fromkeys((self.host, *LOOPBACK_NAMES))))
            self._servers = [_Server(_config(app)), _Server(_config(app, self._certificate))]
        except BaseException:
            self._close_sockets()
            raise
        self._thread = threading.Thread(target=self._run, name=f"simulator-{self.port}", daemon=True)
        self._thread.start()
        started = all(server.ready.wait(START_TIMEOUT) and server.started for server in self._servers)
        if not started:
            self.stop()
            raise RuntimeError(f"the simulator did not start on {self.host}") from self._failure
        try:
            self.dns.start()
        except BaseException:
            self.stop()
            raise
        log.debug("simulator listening on %s and %s", self.url, self.https_url)
        return self

    def _run(self) -> None:
        sockets = [sock for sock in (self._socket, self._tls_socket) if sock is not None]
        servers = list(self._servers)

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            await asyncio.gather(
                *(server.serve(sockets=[sock]) for server, sock in zip(servers, sockets, strict=True))
            )

        try:
            asyncio.run(serve())
        except BaseException as exc:  # a SystemExit from uvicorn included: report it to start()
            self._failure = exc
            log.exception("simulator server stopped with an error")
        finally:
            for server in servers:
                server.ready.set()

    def stop(self) -> None:
        """End watches and delayed replies, stop the server, release the ports. Safe to call twice."""
        self.dns.stop()
        thread, loop = self._thread, self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(self._lifecycle.close)
        for server in self._servers:
            server.request_exit(loop)
        if thread is not None:
            thread.join(STOP_TIMEOUT)
            if thread.is_alive():
                log.warning("simulator did not stop within %.0fs; forcing it", STOP_TIMEOUT)
                for server in self._servers:
                    server.force_exit = True
                thread.join(STOP_TIMEOUT)
        self._close_sockets()
        self._servers = []
        self._thread = self._loop = None

    def _close_sockets(self) -> None:
        for sock in (self._socket, self._tls_socket):
            if sock is not None:
                sock.close()
        self._socket = self._tls_socket = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def write_client_config(self, directory: Path) -> ClientConfig:
        """Write ``clouds.yaml`` and ``kubeconfig`` (mode 0600: they hold secrets) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = ClientConfig(
            clouds_yaml=directory / "clouds.yaml",
            kubeconfig=directory / "kubeconfig",
            ca_file=directory / "ca.crt",
        )
        credentials = self.state.credentials
        auth_url = f"{self.url}/identity/v3"
        common = {"region_name": REGION, "identity_api_version": 3, "interface": "public"}

        def password_cloud(username: str, password: str) -> dict[str, Any]:
            return {
                "auth_type": "password",
                "auth": {
                    "auth_url": auth_url,
                    "username": username,
                    "password": password,
                    "user_domain_name": credentials.domain_name,
                    "project_name": credentials.project_name,
                    "project_domain_name": credentials.domain_name,
                },
                **common,
            }

        clouds = {
            "clouds": {
                config.cloud_name: password_cloud(credentials.username, credentials.password),
                config.appcred_cloud_name: {
                    "auth_type": "v3applicationcredential",
                    "auth": {
                        "auth_url": auth_url,
                        "application_credential_id": credentials.application_credential_id,
                        "application_credential_secret": credentials.application_credential_secret,
                    },
                    **common,
                },
                config.trust_cloud_name: {
                    "auth_type": "v3password",
                    "auth": {
                        "auth_url": auth_url,
                        "user_id": credentials.user_id,
                        "password": credentials.password,
                        "trust_id": credentials.trust_id,
                    },
                    **common,
                },
                config.readonly_cloud_name: password_cloud(
                    credentials.reader_username, credentials.reader_password
                ),
                config.admin_cloud_name: password_cloud(
                    credentials.admin_username, credentials.admin_password
                ),
            }
        }
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "simulator",
                    "cluster": {
                        # client-go (kubectl, external-dns) sends a bearer token over TLS only.
                        "server": self.https_url,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "simulator", "user": {"token": credentials.kubernetes_token}}],
            "contexts": [
                {
                    "name": "simulator",
                    "context": {"cluster": "simulator", "user": "simulator", "namespace": "default"},
                }
            ],
            "current-context": "simulator",
            "preferences": {},
        }
        _write_private(config.clouds_yaml, yaml.safe_dump(clouds, sort_keys=False))
        _write_private(config.kubeconfig, yaml.safe_dump(kubeconfig, sort_keys=False))
        directory.joinpath("ca.crt").write_bytes(self.ca_pem)
        return config


def _config(app: ASGIApp, certificate: ServerCertificate | None = None) -> uvicorn.Config:
    options: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="landb-simulator-") as directory:
        if certificate is not None:
            # uvicorn reads the key from files; they live only until the SSL context is built below.
            certfile, keyfile = Path(directory, "tls.crt"), Path(directory, "tls.key")
            _write_private(certfile, certificate.certificate_pem.decode())
            _write_private(keyfile, certificate.key_pem.decode())
            options.update(ssl_certfile=str(certfile), ssl_keyfile=str(keyfile))
        config = uvicorn.Config(
            app,
            http=_SimulatorH11Protocol,
            ws="none",
            lifespan="off",
            log_config=None,
            log_level=None,
            timeout_keep_alive=30,
            **options,
        )
        config.load()
    return config


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    path.chmod(0o600)
