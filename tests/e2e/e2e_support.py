"""Drive the real external-dns binary against a real ``landb-webhook serve`` and the simulator.

Everything here starts real processes and real sockets on 127.0.0.1; nothing is mocked. external-dns logs
no change details for webhook providers, so a recording reverse proxy (:class:`WebhookTap`) sits between
it and the webhook and keeps every exchange: what external-dns asked for is read from the wire itself.
"""

from __future__ import annotations

import gzip
import http.client
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from landb_simulator import ClientConfig, Simulator
from landb_webhook.config import Settings
from support.waiting import eventually

EXTERNAL_DNS_VERSION = "v0.22.0"
INSTALL_HINT = "run scripts/install-external-dns.sh"
UP_TO_DATE_LOG = "All records are already up to date"
"""external-dns' log line for a loop whose plan had no change (so it sent no POST /records)."""
MEDIA_TYPE = "application/external.dns.webhook+json;version=1"

REPO_ROOT = Path(__file__).resolve().parents[2]
FEEDER_SOURCE = Path(__file__).with_name("feeder")

EXTERNAL_DNS_TIMEOUT = 60.0
"""Seconds one ``external-dns --once`` may take; a healthy run takes well under one."""
READY_TIMEOUT = 120.0
"""Seconds ``landb-webhook serve`` may take to be ready: it takes ~5 s, mostly imports, which alone took 20 s
of wall time on a 2-core machine at load 15 (a bound, however slow the machine; not a measure)."""
STOP_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------------------
# Locating and building the binaries


def tools_dir() -> Path:
    return Path(os.environ.get("LANDB_TOOLS_DIR") or Path.home() / ".cache" / "landb-webhook")


def locate_external_dns() -> tuple[Path | None, str]:
    """The external-dns binary to drive, or None and the reason the e2e tests must skip.

    Looked up in order: ``$LANDB_EXTERNAL_DNS``, the install script's cache, ``PATH``.
    """
    configured = os.environ.get("LANDB_EXTERNAL_DNS")
    if configured:
        candidates = [Path(configured)]
    else:
        on_path = shutil.which("external-dns")
        candidates = [tools_dir() / "go" / "bin" / "external-dns"] + ([Path(on_path)] if on_path else [])
    existing = [path for path in candidates if path.is_file() and os.access(path, os.X_OK)]
    if not existing:
        where = ", ".join(str(path) for path in candidates) or "PATH"
        return None, f"external-dns {EXTERNAL_DNS_VERSION} not found ({where}): {INSTALL_HINT}"
    binary = existing[0]
    version = external_dns_version(binary)
    if version != EXTERNAL_DNS_VERSION:
        return None, (
            f"{binary} reports version {version!r}, the e2e tests need {EXTERNAL_DNS_VERSION}: {INSTALL_HINT}"
        )
    return binary, ""


def external_dns_version(binary: Path) -> str:
    completed = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    words = (completed.stdout + completed.stderr).split()
    return words[0] if words else ""


def build_feeder(out_dir: Path) -> Path:
    """Compile tests/e2e/feeder (standard library only, so no network is needed)."""
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("Go is not on PATH")
    binary = out_dir / "feeder"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false", "CGO_ENABLED": "0"}
    completed = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=FEEDER_SOURCE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"go build of {FEEDER_SOURCE} failed:\n{completed.stderr}")
    return binary


# --------------------------------------------------------------------------------------------------------
# The connector-source feeder


def endpoint_json(
    dns_name: str, record_type: str, *targets: str, ttl: int = 0, set_identifier: str = ""
) -> dict[str, Any]:
    """One desired endpoint, in the feeder's (and external-dns' webhook) JSON shape."""
    return {
        "dnsName": dns_name,
        "recordType": record_type,
        "targets": list(targets),
        "recordTTL": ttl,
        "setIdentifier": set_identifier,
    }


class Feeder:
    """The Go feeder as a subprocess: external-dns' connector source reads the desired state from it."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.endpoints_file = workdir / "desired-endpoints.json"
        self.log_path = workdir / "feeder.log"
        self.set_endpoints([])
        self._log: IO[str] = self.log_path.open("w")
        self._process = subprocess.Popen(
            [str(binary), "-endpoints", str(self.endpoints_file)],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self._process.stdout is not None
        # The feeder prints this line once it listens, or exits (EOF) if it cannot.
        banner = self._process.stdout.readline()
        match = re.fullmatch(r"listening on (\S+)\n", banner)
        if match is None:
            self.stop()
            raise RuntimeError(f"feeder did not start: {banner!r}; log: {self.log_path.read_text()}")
        self.address = match[1]

    def set_endpoints(self, endpoints: Sequence[Mapping[str, Any]]) -> None:
        """Replace the desired state; external-dns sees it on its next run."""
        partial = self.endpoints_file.with_suffix(".partial")
        partial.write_text(json.dumps(list(endpoints), indent=1))
        partial.replace(self.endpoints_file)

    def stop(self) -> None:
        stop_process(self._process)
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()


def stop_process(process: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


# --------------------------------------------------------------------------------------------------------
# The recording proxy between external-dns and the webhook


@dataclass(frozen=True)
class Exchange:
    """One HTTP request external-dns made to the webhook, and the webhook's answer."""

    method: str
    path: str
    request_headers: Mapping[str, str]
    request_body: bytes
    status: int
    response_headers: Mapping[str, str]
    response_body: bytes

    def request_json(self) -> Any:
        return json.loads(self.request_body)

    def response_json(self) -> Any:
        encoding = {k.lower(): v for k, v in self.response_headers.items()}.get("content-encoding")
        return json.loads(gzip.decompress(self.response_body) if encoding == "gzip" else self.response_body)

    def describe(self) -> str:
        return (
            f"{self.method} {self.path} -> {self.status}\n"
            f"  request:  {self.request_body.decode(errors='replace')[:2000]}\n"
            f"  response: {self.response_body.decode(errors='replace')[:2000]}"
        )


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class WebhookTap:
    """A transparent reverse proxy on 127.0.0.1 that records every exchange with the webhook.

    If the webhook cannot be reached the tap closes the connection without an answer, so external-dns
    sees the same transport error it would see talking to the webhook directly.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-tap", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def take(self) -> list[Exchange]:
        """The exchanges recorded since the last ``take``."""
        with self._lock:
            taken, self._exchanges = self._exchanges, []
            return taken

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=STOP_TIMEOUT)

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        tap = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def log_message(self, format: str, *args: Any) -> None:
                """The exchanges are recorded instead."""

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                connection = http.client.HTTPConnection("127.0.0.1", tap.upstream_port, timeout=30)
                try:
                    connection.request(self.command, self.path, body=body or None, headers=headers)
                    response = connection.getresponse()
                    response_body = response.read()
                    response_headers = dict(response.getheaders())
                except OSError:
                    self.close_connection = True
                    return
                finally:
                    connection.close()
                tap._record(
                    Exchange(
                        self.command,
                        self.path,
                        dict(self.headers.items()),
                        body,
                        response.status,
                        response_headers,
                        response_body,
                    )
                )
                self.send_response_only(response.status, response.reason)
                for key, value in response_headers.items():
                    if key.lower() not in _HOP_BY_HOP | {"date", "server"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(response_body)))
                self.end_headers()
                self.wfile.write(response_body)

        return Handler


# --------------------------------------------------------------------------------------------------------
# The webhook under test, as a subprocess


def http_get(
    port: int, path: str, headers: Mapping[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers=dict(headers or {}))
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def http_post(port: int, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.request("POST", path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def inherited_environment() -> dict[str, str]:
    """This process' environment without any setting the webhook or its clients would read."""
    return {
        key: value for key, value in os.environ.items() if not key.startswith(("LANDB_", "OS_", "KUBECONFIG"))
    }


def simulator_settings(clients: ClientConfig, **settings: str) -> dict[str, str]:
    """The environment of a ``landb-webhook serve`` against the simulator ``clients`` point at, plus
    ``settings`` (``LANDB_*`` variables)."""
    return {
        "OS_CLIENT_CONFIG_FILE": str(clients.clouds_yaml),
        "LANDB_OS_CLOUD": clients.cloud_name,
        "LANDB_KUBECONFIG": str(clients.kubeconfig),
        "LANDB_OWNERSHIP_NAMESPACE": OWNERSHIP_NAMESPACE,
        "LANDB_LOG_FORMAT": "json",
        # Tests ask no resolver but a loopback one: a test about DNS turns the watch on and names it.
        "LANDB_DNS_WATCH": "false",
        **settings,
    }


class WebhookProcess:
    """``landb-webhook serve`` configured through LANDB_* environment variables, logging to a file."""

    def __init__(self, settings: Mapping[str, str], log_path: Path) -> None:
        self.api_port = free_port()
        self.health_port = free_port()
        self.log_path = log_path
        self._settings = dict(settings)
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def environment(self) -> dict[str, str]:
        return {
            **inherited_environment(),
            **self._settings,
            "LANDB_API_HOST": "127.0.0.1",
            "LANDB_API_PORT": str(self.api_port),
            "LANDB_HEALTH_HOST": "127.0.0.1",
            "LANDB_HEALTH_PORT": str(self.health_port),
        }

    def start(self, *, ready: bool = True) -> None:
        """Start and wait until it serves; ``ready``: also until /readyz answers 200 (OpenStack and the
        node cache have answered), else only /healthz and negotiation."""
        if self._process is not None:
            raise RuntimeError("webhook already running")
        self._log = self.log_path.open("ab")
        self._log.write(f"===== starting landb-webhook serve at {time.strftime('%H:%M:%S')}\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "landb_webhook", "serve"],
            cwd=REPO_ROOT,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_ready(ready)

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL, as a node that dies does it: no shutdown, nothing released (a lease stays held until
        it expires); returns once the process is gone."""
        assert self._process is not None, "the webhook is not running"
        self._process.kill()
        self._process.wait()

    def freeze(self, timeout: float = 10.0) -> None:
        """SIGSTOP, as a node that stalls (swap, a starved VM, a debugger); returns once *every* thread of
        the process has stopped. The signal is taken by one thread, which then stops the others: until
        the kernel has given that thread a CPU, the others run on (on a loaded machine, long enough to read
        a reply, pass the write fence and start the next request). Called where the process must not
        take one more step, as in a simulator observer before the reply leaves."""
        assert self._process is not None, "the webhook is not running"
        os.kill(self._process.pid, signal.SIGSTOP)
        eventually(self._stopped, what=f"pid {self._process.pid} to stop", timeout=timeout, every=0.001)

    def thaw(self) -> None:
        """SIGCONT: a frozen process goes on from where it stopped."""
        assert self._process is not None, "the webhook is not running"
        os.kill(self._process.pid, signal.SIGCONT)

    def _stopped(self) -> bool:
        """Whether the group stop is complete: the kernel reports it to the parent (this process) once,
        when the last thread has stopped."""
        assert self._process is not None
        pid, status = os.waitpid(self._process.pid, os.WUNTRACED | os.WNOHANG)
        return pid == self._process.pid and os.WIFSTOPPED(status)

    @property
    def pid(self) -> int:
        assert self._process is not None, "the webhook is not running"
        return self._process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _wait_until_ready(self, ready: bool = True) -> None:
        """Poll /healthz, /readyz (when ``ready``) and negotiation until all answer 200, the process
        dies, or the deadline passes."""
        assert self._process is not None
        deadline = time.monotonic() + READY_TIMEOUT
        last_problem = "not polled yet"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"landb-webhook serve exited with {self._process.returncode} before it was ready; "
                    f"log:\n{self.log_text()}"
                )
            try:
                health_status, _, _ = http_get(self.health_port, "/healthz")
                # /readyz: the node cache has synced; before that Records answers 503, which a
                # --once run of external-dns treats as fatal.
                ready_status, _, _ = http_get(self.health_port, "/readyz")
                api_status, _, _ = http_get(self.api_port, "/", {"Accept": MEDIA_TYPE})
            except OSError as exc:
                last_problem = str(exc)
            else:
                if health_status == api_status == 200 and (ready_status == 200 or not ready):
                    return
                last_problem = (
                    f"/healthz -> {health_status}, /readyz -> {ready_status}, GET / -> {api_status}"
                )
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(
            f"landb-webhook serve not ready within {READY_TIMEOUT} s ({last_problem}); "
            f"log:\n{self.log_text()}"
        )


# --------------------------------------------------------------------------------------------------------
# One external-dns run


@dataclass(frozen=True)
class Result:
    """What one ``external-dns --once`` did."""

    returncode: int
    log_text: str
    """external-dns' stderr and stdout."""
    desired_changes: Mapping[str, list[dict[str, Any]]] | None
    """The Changes external-dns POSTed to /records (keys create, updateOld, updateNew, delete; never
    null lists), or None when it sent none. external-dns does not log them for webhook providers, so
    they are read from the wire."""
    exchanges: tuple[Exchange, ...]
    seconds: float

    @property
    def up_to_date(self) -> bool:
        """The loop planned nothing: external-dns said so and sent no POST /records."""
        return UP_TO_DATE_LOG in self.log_text and self.desired_changes is None

    def changed_names(self, kind: str) -> set[tuple[str, str]]:
        """(dnsName, recordType) of the endpoints in one list of the desired changes."""
        if self.desired_changes is None:
            return set()
        return {(ep["dnsName"], ep["recordType"]) for ep in self.desired_changes[kind]}

    def describe(self) -> str:
        wire = "\n".join(exchange.describe() for exchange in self.exchanges)
        return (
            f"external-dns exited with {self.returncode} after {self.seconds:.1f} s\n"
            f"--- exchanges with the webhook ---\n{wire}\n--- external-dns log ---\n{self.log_text}"
        )


def _normalised_changes(body: Any) -> dict[str, list[dict[str, Any]]]:
    by_lower_key = {str(key).lower(): value for key, value in dict(body).items()}
    return {
        key: list(by_lower_key.get(key.lower()) or [])
        for key in ("create", "updateOld", "updateNew", "delete")
    }


def run_external_dns(
    binary: Path,
    *args: str,
    webhook_url: str,
    source: Sequence[str],
    tap: WebhookTap | None = None,
    timeout: float = EXTERNAL_DNS_TIMEOUT,
) -> Result:
    """Run one reconciliation loop (``--once``) of external-dns against the webhook at ``webhook_url``.

    ``source`` holds the source flags, ``args`` the rest (registry, policy, filters). When ``tap`` is the
    proxy behind ``webhook_url``, the result carries the exchanges of this run and the changes sent.
    """
    command = [
        str(binary),
        "--once",
        "--provider=webhook",
        f"--webhook-provider-url={webhook_url}",
        "--log-level=debug",
        "--metrics-address=127.0.0.1:0",  # its own metrics server, on a port the kernel picks
        *source,
        *args,
    ]
    if tap is not None:
        tap.take()
    started = time.monotonic()
    try:
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={key: value for key, value in os.environ.items() if key != "KUBECONFIG"},
        )
    except subprocess.TimeoutExpired as exc:
        output = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
            for part in (exc.stderr, exc.output)
        )
        raise TimeoutError(f"external-dns --once did not finish in {timeout} s; log:\n{output}") from exc
    seconds = time.monotonic() - started
    exchanges = tuple(tap.take()) if tap is not None else ()
    posted = [e for e in exchanges if e.method == "POST" and e.path.rstrip("/") == "/records"]
    if len(posted) > 1:
        raise AssertionError(f"one loop sent {len(posted)} POST /records")
    return Result(
        returncode=completed.returncode,
        log_text=completed.stderr + completed.stdout,
        desired_changes=_normalised_changes(posted[0].request_json()) if posted else None,
        exchanges=exchanges,
        seconds=seconds,
    )


# --------------------------------------------------------------------------------------------------------
# Reading what landed on the servers


_LOAD_TOKEN = re.compile(r"(?P<label>[a-z0-9][a-z0-9-]*?)--load-(?P<index>[0-9]+)-", re.IGNORECASE)


def alias_tokens(metadata: Mapping[str, str]) -> dict[str, set[int]]:
    """label -> the ``--load-N-`` indices one server's ``landb-alias*`` keys carry for it."""
    tokens: dict[str, set[int]] = {}
    for key, value in metadata.items():
        if not key.startswith("landb-alias"):
            continue
        for token in value.split(","):
            match = _LOAD_TOKEN.fullmatch(token.strip())
            if match is not None:
                tokens.setdefault(match["label"].lower(), set()).add(int(match["index"]))
    return tokens


# --------------------------------------------------------------------------------------------------------
# A whole world for one test: simulator, webhook, tap, feeder


DOMAIN = "cern.ch"
OWNERSHIP_NAMESPACE = "default"


class E2EStack:
    """The simulated cloud and cluster, ``landb-webhook serve`` pointed at it, the tap in front of the
    webhook, and the feeder holding the desired endpoints; ``run`` is one external-dns loop."""

    def __init__(
        self,
        *,
        simulator: Simulator,
        workdir: Path,
        external_dns: Path,
        feeder: Feeder,
        owner_id: str = "landb-e2e",
    ) -> None:
        self.sim = simulator
        self.state = simulator.state
        self.workdir = workdir
        self.external_dns = external_dns
        self.feeder = feeder
        self.owner_id = owner_id
        self.client_config = simulator.write_client_config(workdir)
        self.registry = "txt"
        self.webhook: WebhookProcess | None = None
        self.tap: WebhookTap | None = None
        self.results: list[Result] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def start_webhook(self, registry: str = "txt", **extra_settings: str) -> WebhookProcess:
        """Start ``landb-webhook serve`` with ``LANDB_REGISTRY=registry`` (it must match external-dns')."""
        if self.webhook is not None:
            raise RuntimeError("webhook already started")
        self.registry = registry
        settings = self.webhook_settings(registry, **extra_settings)
        self.webhook = WebhookProcess(settings, self.workdir / "webhook.log")
        self.webhook.start()
        self.tap = WebhookTap(self.webhook.api_port)
        return self.webhook

    def webhook_settings(self, registry: str = "txt", **extra_settings: str) -> dict[str, str]:
        """The environment every ``landb-webhook`` command of this stack runs with."""
        return {
            "OS_CLIENT_CONFIG_FILE": str(self.client_config.clouds_yaml),
            "LANDB_OS_CLOUD": self.client_config.cloud_name,
            "LANDB_KUBECONFIG": str(self.client_config.kubeconfig),
            "LANDB_OWNERSHIP_NAMESPACE": OWNERSHIP_NAMESPACE,
            "LANDB_REGISTRY": registry,
            "LANDB_LOG_FORMAT": "json",
            "LANDB_LOG_LEVEL": "info",
            **extra_settings,
        }

    def landb_webhook(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``landb-webhook <args>`` (adopt, status) once, with the webhook's settings."""
        return subprocess.run(
            [sys.executable, "-m", "landb_webhook", *args],
            cwd=REPO_ROOT,
            env={**inherited_environment(), **self.webhook_settings(self.registry)},
            capture_output=True,
            text=True,
            timeout=READY_TIMEOUT + EXTERNAL_DNS_TIMEOUT,
            check=False,
        )

    def restart_webhook(self) -> None:
        """Stop the webhook process and start a new one on the same ports (nothing kept in memory)."""
        assert self.webhook is not None
        self.webhook.restart()

    def close(self) -> None:
        if self.tap is not None:
            self.tap.close()
        if self.webhook is not None:
            self.webhook.stop()

    # -- driving external-dns ----------------------------------------------------------------------

    def want(self, *endpoints: Mapping[str, Any]) -> None:
        """The desired endpoints the connector source hands to the next external-dns runs."""
        self.feeder.set_endpoints(endpoints)

    def run(self, *args: str, policy: str = "sync", source: Sequence[str] | None = None) -> Result:
        """One ``external-dns --once`` loop with the registry the webhook was started with."""
        if self.webhook is None:
            self.start_webhook()
        assert self.tap is not None
        if self.registry == "txt":
            registry_args = ["--registry=txt", f"--txt-owner-id={self.owner_id}"]
        else:
            registry_args = [f"--registry={self.registry}"]
        if source is None:
            source = ["--source=connector", f"--connector-source-server={self.feeder.address}"]
        result = run_external_dns(
            self.external_dns,
            *registry_args,
            f"--policy={policy}",
            f"--domain-filter={DOMAIN}",
            *args,
            webhook_url=self.tap.url,
            source=source,
            tap=self.tap,
        )
        self.results.append(result)
        return result

    # -- observing the simulator -------------------------------------------------------------------

    def ingress_server_ids(self) -> list[str]:
        """Servers of the nodes the webhook's default selector picks (``role=ingress``), sorted."""
        key, _, value = ingress_selector().partition("=")
        return sorted(
            server_id_of(node)
            for node in self.state.nodes()
            if node["metadata"].get("labels", {}).get(key) == value
        )

    def ips_of(self, server_ids: Iterable[str]) -> list[str]:
        """The InternalIPs of the nodes behind these servers, sorted as the webhook reports them."""
        wanted = set(server_ids)
        ips = {
            address["address"]
            for node in self.state.nodes()
            if server_id_of(node) in wanted
            for address in node.get("status", {}).get("addresses", [])
            if address.get("type") == "InternalIP"
        }
        return _ip_sorted(ips)

    def add_ingress_node(self, name: str, ip: str) -> str:
        """A new server and its node, labelled for ingress, as when the cluster scales up; its id."""
        key, _, value = ingress_selector().partition("=")
        server_id = str(self.state.add_server(name, ip=ip))
        self.state.add_node(
            name, labels={key: value}, provider_id=f"openstack:///{server_id}", internal_ips=[ip]
        )
        return server_id

    def wait_until_webhook_targets(self, ips: Sequence[str], timeout: float = 10.0) -> None:
        """Wait until the webhook's watch-fed node view gives ``ips`` as the ingress targets.

        Asks the way external-dns does (Records, then AdjustEndpoints), straight to the webhook, so the
        next external-dns run starts from the cluster change the test just made.
        """
        assert self.webhook is not None
        probe = json.dumps([endpoint_json(f"e2e-probe.{DOMAIN}", "A", "192.0.2.1")]).encode()
        headers = {"Content-Type": MEDIA_TYPE, "Accept": MEDIA_TYPE}
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            http_get(self.webhook.api_port, "/records", {"Accept": MEDIA_TYPE})
            status, body = http_post(self.webhook.api_port, "/adjustendpoints", probe, headers)
            seen = json.loads(body) if status == 200 else (status, body)
            if status == 200 and [_ip_sorted(ep["targets"]) for ep in seen] == [list(ips)]:
                return
            time.sleep(0.1)
        raise TimeoutError(f"webhook never targeted {list(ips)} within {timeout} s; last answer: {seen}")

    def node_name_of(self, server_id: str) -> str:
        return next(
            str(node["metadata"]["name"]) for node in self.state.nodes() if server_id_of(node) == server_id
        )

    def all_metadata(self) -> dict[str, dict[str, str]]:
        """server id -> its complete metadata, for every server in the simulated cloud."""
        return {server.id: dict(server.metadata) for server in self.state.servers()}

    def aliases(self) -> dict[str, dict[str, set[int]]]:
        """server id -> label -> ``--load-N-`` indices, for every server."""
        return {server_id: alias_tokens(metadata) for server_id, metadata in self.all_metadata().items()}

    def metadata_write_count(self) -> int:
        """Successful metadata writes made through the Nova API so far (test seeding excluded)."""
        return sum(1 for change in self.state.metadata_history() if change.method != "direct")

    def written_servers_since(self, write_count: int) -> set[str]:
        api_writes = [change for change in self.state.metadata_history() if change.method != "direct"]
        return {change.server_id for change in api_writes[write_count:]}

    def ownership_claims(self) -> dict[str, str]:
        """TXT name -> TXT value, of the ownership records in the webhook's ConfigMap and its spill-overs
        (``<name>-1``, ``<name>-2``, ...)."""
        claims: dict[str, str] = {}
        for number in itertools.count():
            name = ownership_configmap() if number == 0 else f"{ownership_configmap()}-{number}"
            configmap = self.state.configmap(OWNERSHIP_NAMESPACE, name)
            if configmap is None:
                break
            for value in (configmap.get("data") or {}).values():
                record = json.loads(value)
                claims[record["dnsName"]] = record["targets"][0]
        return claims

    def diagnostics(self) -> list[tuple[str, str]]:
        """Report sections for a failed test: the webhook log and every external-dns run."""
        sections = [(f"external-dns run {n}", result.describe()) for n, result in enumerate(self.results, 1)]
        if self.webhook is not None:
            sections.append(("landb-webhook serve log", _tail(self.webhook.log_text(), 400)))
        sections.append(("feeder log", self.feeder.log_path.read_text(errors="replace")))
        return sections


def _ip_sorted(ips: Iterable[str]) -> list[str]:
    return sorted(ips, key=ipaddress.ip_address)


def _tail(text: str, lines: int) -> str:
    kept = text.splitlines()[-lines:]
    return "\n".join(kept)


def server_id_of(node: Mapping[str, Any]) -> str:
    """``openstack:///<uuid>`` -> ``<uuid>``."""
    provider_id = str(node.get("spec", {}).get("providerID", ""))
    return provider_id.rsplit("/", 1)[-1]


def ingress_selector() -> str:
    return str(Settings.model_fields["ingress_selector"].default)


def ownership_configmap() -> str:
    return str(Settings.model_fields["ownership_configmap"].default)
