"""A real DNS server for the DNS watcher's tests and benchmark: Knot DNS (Debian's ``knot``) on a free
loopback port.

It serves a ``cern.ch.`` zone that accepts RFC 2136 dynamic updates from 127.0.0.1 only; the tests play
LanDB by updating it (:meth:`KnotServer.publish`, :meth:`alias`, :meth:`remove`). ``apt-get install knot``
(``.ci/run`` installs it); tests/support/knot.py skips the tests naming the package without it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.update

ZONE = "cern.ch."
STARTUP_TIMEOUT = 20.0


def knotd_path() -> str | None:
    return shutil.which("knotd") or next(
        (str(p) for p in (Path("/usr/sbin/knotd"), Path("/sbin/knotd")) if p.exists()), None
    )


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (the server binds it a moment later)."""
    for _ in range(50):
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = int(tcp.getsockname()[1])
            with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no port free for both UDP and TCP on 127.0.0.1")


CONFIG = """\
server:
    rundir: "{dir}"
    listen: 127.0.0.1@{port}
database:
    storage: "{dir}/db"
log:
  - target: "{dir}/knotd.log"
    any: info
acl:
  - id: loopback_update
    address: 127.0.0.1
    action: update
zone:
  - domain: {zone}
    storage: "{dir}"
    file: "zone"
    acl: loopback_update
    zonefile-sync: -1
    journal-content: none
"""

ZONE_FILE = """\
$ORIGIN {zone}
$TTL 0
@   SOA ns hostmaster 1 3600 600 86400 0
@   NS  ns
ns  A   127.0.0.1
"""


class KnotServer:
    """One running knotd; its address is ``127.0.0.1:<port>``."""

    def __init__(self, directory: Path, port: int, process: subprocess.Popen[bytes]) -> None:
        self.directory = directory
        self.port = port
        self.process = process
        self.updates = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def publish(self, label: str, ips: Iterable[str]) -> None:
        """What LanDB does at its sync: ``<label>.cern.ch`` answers exactly these A records."""
        update = dns.update.UpdateMessage(ZONE)
        update.delete(label)
        for ip in sorted(ips):
            update.add(label, 0, "A", ip)
        self._send(update)

    def alias(self, label: str, target: str) -> None:
        """``<label>.cern.ch`` becomes a CNAME to ``target`` (a plain alias in LanDB)."""
        update = dns.update.UpdateMessage(ZONE)
        update.delete(label)
        update.add(label, 0, "CNAME", target)
        self._send(update)

    def remove(self, label: str) -> None:
        update = dns.update.UpdateMessage(ZONE)
        update.delete(label)
        self._send(update)

    def _send(self, update: dns.update.UpdateMessage) -> None:
        reply = dns.query.tcp(update, "127.0.0.1", port=self.port, timeout=5)
        if reply.rcode() != dns.rcode.NOERROR:
            raise RuntimeError(f"knotd refused the update: {dns.rcode.to_text(reply.rcode())}")
        self.updates += 1

    def answers_soa(self) -> bool:
        query = dns.message.make_query(ZONE, "SOA")
        try:
            reply = dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.5)
        except (OSError, dns.exception.Timeout):
            return False
        return reply.rcode() == dns.rcode.NOERROR and bool(reply.answer)

    def log(self) -> str:
        path = self.directory / "knotd.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running_knot(directory: Path, records: Iterable[str] = ()) -> Iterator[KnotServer]:
    """knotd on a free loopback port with a ``cern.ch.`` zone holding ``records`` (zone file lines such
    as ``app A 10.0.0.1``), stopped on exit."""
    knotd = knotd_path()
    if knotd is None:
        raise FileNotFoundError("knotd is not installed (apt-get install knot)")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "db").mkdir(exist_ok=True)
    port = free_port()
    config = directory / "knot.conf"
    config.write_text(CONFIG.format(dir=directory, port=port, zone=ZONE))
    (directory / "zone").write_text(ZONE_FILE.format(zone=ZONE) + "".join(f"{line}\n" for line in records))
    process = subprocess.Popen(
        [knotd, "--config", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    server = KnotServer(directory, port, process)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.answers_soa():
            if process.poll() is not None or time.monotonic() > deadline:
                stderr = process.stderr.read().decode(errors="replace") if process.poll() is not None else ""
                raise RuntimeError(f"knotd did not start on port {port}: {stderr}{server.log()}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
