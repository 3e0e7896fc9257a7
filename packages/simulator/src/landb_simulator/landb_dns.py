"""The simulated LanDB's DNS side: an authoritative server for ``cern.ch`` on loopback, UDP and TCP.

LanDB does not publish a metadata write at once: it syncs about every 15 minutes. So does this server.
Every ``sync_period`` it takes a snapshot of the simulated Nova servers' metadata and the Octavia load
balancers' tags (landb_zone.publish) and answers from that snapshot until the next one; ``sync()`` takes
one at once, so tests and the demo never wait for a period to pass. The wire protocol is real (dnspython
encodes and decodes the messages), so any resolver or ``dig @127.0.0.1 -p PORT`` can ask it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import socket
import struct
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any, cast

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from landb_simulator.landb_zone import ZONE, OtherDevice, PublishedZone, Rejection, publish
from landb_simulator.state import SimulatorState

log = logging.getLogger(__name__)

LANDB_SYNC_PERIOD = 900.0
"""LanDB's own period: about 15 minutes between a metadata write and DNS."""
RECORD_TTL = 60
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
UDP_PAYLOAD = 512
"""What a UDP answer may hold when the query offers no larger EDNS buffer (RFC 1035)."""

_ORIGIN = dns.name.from_text(ZONE)
_SERIAL_START = 2026010100


class LandbDnsServer:
    """Answers ``<name>.cern.ch`` as the last sync published it: A/AAAA (rotated per answer, as a
    round-robin server does), CNAME (with the target's addresses), NXDOMAIN for unknown names, REFUSED
    outside ``cern.ch``.

    ``with LandbDnsServer(state) as server:`` binds UDP and TCP on the same port (port 0: any free one),
    takes a first snapshot, and serves from a daemon thread until exit.
    """

    def __init__(
        self,
        state: SimulatorState,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        sync_period: float = LANDB_SYNC_PERIOD,
        ttl: int = RECORD_TTL,
        other_devices: Iterable[OtherDevice] = (),
    ) -> None:
        """``other_devices``: devices outside the simulated project whose aliases LanDB publishes too
        (another device's A record, someone's plain alias): see ``add_other_device``."""
        if sync_period <= 0:
            raise ValueError(f"the DNS sync period must be positive, got {sync_period!r}")
        self.state = state
        self.host = host
        self.sync_period = sync_period
        self.ttl = ttl
        self._requested_port = port
        self._port: int | None = None
        self._published = PublishedZone()
        self._others: dict[str, OtherDevice] = {device.name: device for device in other_devices}
        self._syncs = 0
        self._synced = threading.Condition()
        self._rotation = itertools.count()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the simulated LanDB DNS server is not started")
        return self._port

    @property
    def address(self) -> str:
        """``host:port``, the form a resolver setting takes."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def published(self) -> PublishedZone:
        """What the last sync published: what the server answers now."""
        return self._published

    @property
    def syncs(self) -> int:
        """How many snapshots were taken since start (the first one at start counts)."""
        with self._synced:
            return self._syncs

    @property
    def other_devices(self) -> list[OtherDevice]:
        with self._synced:
            return list(self._others.values())

    def add_other_device(self, device: OtherDevice) -> None:
        """A device outside the simulated project (``OtherDevice``, replacing one of the same name), published
        from the next sync on: its aliases answer its address (``app--load-N-``) or a CNAME (``app``)."""
        with self._synced:
            self._others[device.name] = device

    def remove_other_device(self, name: str) -> None:
        """The device leaves LanDB (its holder let its names go): gone from the next sync on."""
        with self._synced:
            self._others.pop(name, None)

    def sync(self) -> PublishedZone:
        """Take the snapshot now, as LanDB's next sync would, and answer from it from now on."""
        published = publish(self.state.servers(), self.state.octavia.load_balancers(), self.other_devices)
        with self._synced:
            previous, self._published = self._published, published
            self._syncs += 1
            number = self._syncs
            self._synced.notify_all()
        _log_changes(number, previous, published)
        return published

    def wait_for_syncs(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` snapshots in all were taken; False if ``timeout`` passed first."""
        with self._synced:
            return self._synced.wait_for(lambda: self._syncs >= count, timeout)

    def start(self) -> LandbDnsServer:
        if self._thread is not None:
            raise RuntimeError("the simulated LanDB DNS server is already started")
        udp, tcp = _bind_udp_and_tcp(self.host, self._requested_port)
        self._port = udp.getsockname()[1]
        self.sync()
        self._ready.clear()
        self._thread = threading.Thread(
            target=self._run, args=(udp, tcp), name=f"landb-dns-{self._port}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT) or self._failure is not None:
            self.stop()
            raise RuntimeError(f"the simulated LanDB DNS server did not start on {self.address}") from (
                self._failure
            )
        log.debug("simulated LanDB DNS listening on %s (UDP and TCP)", self.address)
        return self

    def stop(self) -> None:
        """Stop serving and release the port. Safe to call twice."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed already
                loop.call_soon_threadsafe(stopping.set)
        if thread is not None:
            thread.join(STOP_TIMEOUT)
            if thread.is_alive():
                log.warning("simulated LanDB DNS server did not stop within %.0fs", STOP_TIMEOUT)
        self._thread = self._loop = self._stopping = None

    def __enter__(self) -> LandbDnsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self, udp: socket.socket, tcp: socket.socket) -> None:
        try:
            asyncio.run(self._serve(udp, tcp))
        except BaseException as exc:
            self._failure = exc
            log.exception("simulated LanDB DNS server stopped with an error")
        finally:
            udp.close()
            tcp.close()
            self._ready.set()

    async def _serve(self, udp: socket.socket, tcp: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._stopping = loop, asyncio.Event()
        transport, _ = await loop.create_datagram_endpoint(lambda: _UdpProtocol(self), sock=udp)
        server = await asyncio.start_server(self._serve_tcp, sock=tcp)
        syncing = asyncio.create_task(self._sync_every_period())
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            syncing.cancel()
            transport.close()
            server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), STOP_TIMEOUT / 2)

    async def _sync_every_period(self) -> None:
        while True:
            await asyncio.sleep(self.sync_period)
            self.sync()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """RFC 1035 4.2.2: each message prefixed with its 2-byte length; several per connection."""
        try:
            while True:
                (length,) = struct.unpack("!H", await reader.readexactly(2))
                answer = self.answer(await reader.readexactly(length), max_size=65535)
                if answer is not None:
                    writer.write(struct.pack("!H", len(answer)) + answer)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            writer.close()

    def answer(self, wire: bytes, *, max_size: int | None = None) -> bytes | None:
        """The reply to one query in wire format; None for something that is not a DNS query at all.

        ``max_size`` None means UDP: the query's EDNS buffer size, else 512 bytes, with TC set beyond.
        """
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException:
            return _format_error(wire)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if query.opcode() != dns.opcode.QUERY:
            response.set_rcode(dns.rcode.NOTIMP)
        elif len(query.question) != 1:
            response.set_rcode(dns.rcode.FORMERR)
        else:
            self._resolve(query.question[0], response)
        if max_size is None:
            max_size = max(query.payload, UDP_PAYLOAD) if query.edns >= 0 else UDP_PAYLOAD
        # The order is ours (rotated in _resolve), not dnspython's random shuffle: tests can count on it.
        return response.to_wire(max_size=max_size, prefer_truncation=True, want_shuffle=False)

    def _resolve(self, question: dns.rrset.RRset, response: dns.message.Message) -> None:
        name, rdtype = question.name, question.rdtype
        if not name.is_subdomain(_ORIGIN):
            response.flags &= ~dns.flags.AA
            response.set_rcode(dns.rcode.REFUSED)
            return
        published = self._published
        relative = name.relativize(_ORIGIN).to_text().lower()
        if name == _ORIGIN:
            if rdtype in (dns.rdatatype.SOA, dns.rdatatype.ANY):
                response.answer.append(self._soa())
            else:
                response.authority.append(self._soa())
            return
        target = published.canonical.get(relative)
        if target is not None:
            target_name = dns.name.from_text(target, _ORIGIN)
            response.answer.append(self._rrset(name, dns.rdatatype.CNAME, [target_name.to_text()]))
            if rdtype == dns.rdatatype.CNAME:
                return
            name, relative = target_name, target
        addresses = published.addresses.get(relative)
        if addresses is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.append(self._soa())
            return
        wanted = [ip for ip in addresses if _rdtype_of(ip) == rdtype or rdtype == dns.rdatatype.ANY]
        if not wanted:
            response.authority.append(self._soa())  # NODATA: the name exists, not with this type
            return
        shift = next(self._rotation) % len(wanted)
        rotated = wanted[shift:] + wanted[:shift]
        for rdtype_of_set in dict.fromkeys(_rdtype_of(ip) for ip in rotated):
            matching = [ip for ip in rotated if _rdtype_of(ip) == rdtype_of_set]
            response.answer.append(self._rrset(name, rdtype_of_set, matching))

    def _rrset(
        self, name: dns.name.Name, rdtype: dns.rdatatype.RdataType, values: list[str]
    ) -> dns.rrset.RRset:
        return dns.rrset.from_text_list(name, self.ttl, dns.rdataclass.IN, rdtype, values)

    def _soa(self) -> dns.rrset.RRset:
        serial = _SERIAL_START + self.syncs
        value = f"ns.{ZONE}. hostmaster.{ZONE}. {serial} 900 300 604800 {self.ttl}"
        return self._rrset(_ORIGIN, dns.rdatatype.SOA, [value])


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: LandbDnsServer) -> None:
        self._server = server
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        answer = self._server.answer(data)
        if answer is not None and self._transport is not None:
            self._transport.sendto(answer, addr)


def _rdtype_of(ip: str) -> dns.rdatatype.RdataType:
    return dns.rdatatype.A if ipaddress.ip_address(ip).version == 4 else dns.rdatatype.AAAA


def _format_error(wire: bytes) -> bytes | None:
    """FORMERR under the query's id, or None when not even a header arrived (nothing to answer)."""
    if len(wire) < 12:
        return None
    reply = dns.message.Message(id=struct.unpack("!H", wire[:2])[0])
    reply.flags = dns.flags.QR
    reply.set_rcode(dns.rcode.FORMERR)
    return reply.to_wire()


def _bind_udp_and_tcp(host: str, port: int) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket on the same port, as resolvers expect; with port 0, retried until a free
    UDP port is also free for TCP."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(20 if port == 0 else 1):
        udp = socket.socket(family, socket.SOCK_DGRAM)
        tcp = socket.socket(family, socket.SOCK_STREAM)
        try:
            udp.bind((host, port))
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((host, udp.getsockname()[1]))
            tcp.listen(64)
        except OSError:
            udp.close()
            tcp.close()
            if port != 0:
                raise
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        return udp, tcp
    raise OSError(f"no port on {host} is free for both UDP and TCP")


def _log_changes(number: int, previous: PublishedZone, published: PublishedZone) -> None:
    """One line per alias whose answer changed, and one per newly ignored alias: what the demo shows."""
    names = sorted({*previous.addresses, *previous.canonical, *published.addresses, *published.canonical})
    for name in names:
        before, after = previous.describe(name), published.describe(name)
        if before == after:
            continue
        level = logging.DEBUG if name in previous.hosts | published.hosts else logging.INFO
        if after is None:
            log.log(level, "simulated LanDB sync %d: %s.%s withdrawn (was %s)", number, name, ZONE, before)
        else:
            log.log(level, "simulated LanDB sync %d: %s.%s now answers %s", number, name, ZONE, after)
    for name in sorted(published.shared - previous.shared):
        log.warning(
            "simulated LanDB answers %s.%s from both servers' metadata and load balancer tags: "
            "round robin across all of them",
            name,
            ZONE,
        )
    known: set[Rejection] = set(previous.rejected)
    for rejection in published.rejected:
        if rejection not in known:
            log.warning("%s", rejection.describe())
