"""What the simulated LanDB publishes in ``cern.ch`` from the servers' ``landb-alias*`` metadata and the
load balancers' ``landb-alias=<name>`` tags.

Read independently of the webhook's own parser, from the published rules (docs/landb-nova-facts.md), so
a test of the webhook checks it against LanDB's reading, not against itself:

- every key starting with ``landb-alias`` is read; a value is a comma-separated list of bare names, or
  the per-interface form ``IFACE_FQDN:alias1,alias2;IFACE2_FQDN:alias3``;
- ``alias--load-N-`` (suffix case-insensitive) gives an A record (AAAA for an IPv6 address) for ``alias``
  with the address of the interface that carries it; several servers give round-robin records;
- a plain ``alias`` gives a CNAME to the carrying interface's host name;
- every server with an address is published under its own name (the device's host name);
- a load balancer's ``landb-alias=<name>`` tag gives an A record (AAAA for IPv6) for ``name`` with its
  VIP (LanDB names the VIP's device), one tag per name; several load balancers give round-robin records.

Devices outside the simulated project (another project's VM, a physical host: ``OtherDevice``) can be
added with their address and the ``landb-alias`` value LanDB holds for them: they are read exactly as a
server is, so ``indico--load-0-`` makes ``indico`` answer their address (another device's A record) and a
plain ``www`` makes ``www`` a CNAME to their host name; the webhook never sees them in Nova.

Where the documents are silent the simulator decides, and names what it ignored (``Rejection``): the
first server by name keeps an ``alias--load-N-`` that another server also holds (N is unique across
LanDB), and a plain alias that another server also holds; a name with load-balanced carriers is never
also a CNAME; an alias never shadows a device name; an interface other than the server's own host name carries
nothing (a simulated server has one). A name both servers (``alias--load-N-``) and load balancers' tags
publish is answered with all their addresses, round robin, as the webhook's Records reports it (``shared``,
said once): so a name moving from ingress nodes to a load balancer answers both while both hold it, and a
load balancer's tag, being A records, takes a name from a plain alias as ``alias--load-N-`` does.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from landb_simulator.octavia_store import LoadBalancerInfo
from landb_simulator.state import ServerInfo

ZONE = "cern.ch"
ALIAS_KEY_PREFIX = "landb-alias"
ALIAS_TAG_PREFIX = "landb-alias="

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LOAD_BALANCED = re.compile(r"^(?P<alias>.+?)--load-(?P<index>[0-9]+)-$", re.IGNORECASE)


class Device(Protocol):
    """What LanDB reads of a device: a simulated Nova server, or another device (``OtherDevice``)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def ip(self) -> str | None: ...
    @property
    def metadata(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class OtherDevice:
    """A LanDB device that is no server of the simulated project, and its ``landb-alias`` value."""

    name: str
    """Its host name (``webfarm``: ``webfarm.cern.ch``)."""
    ip: str
    aliases: str
    """``indico--load-0-,www``: what LanDB holds for it, read as a server's ``landb-alias`` value."""

    @property
    def id(self) -> str:
        return f"other-device-{self.name}"

    @property
    def metadata(self) -> Mapping[str, str]:
        return {"landb-alias": self.aliases}

    def describe(self) -> str:
        """``webfarm.cern.ch 10.9.9.9: indico--load-0-,www``."""
        return f"{self.name}.{ZONE} {self.ip}: {self.aliases}"

    @classmethod
    def parse(cls, text: str) -> OtherDevice:
        """``NAME=IPV4:ALIAS[,ALIAS...]`` (``webfarm=10.9.9.9:indico--load-0-,www``), or ValueError."""
        name, equals, rest = text.partition("=")
        ip, colon, aliases = rest.partition(":")
        name = name.strip()
        if not equals or not colon or not _LABEL.match(name) or not aliases.strip():
            example = "webfarm=10.9.9.9:indico--load-0-,www"
            raise ValueError(f"{text!r}: expected NAME=IPV4:ALIAS[,ALIAS...], e.g. {example}")
        try:
            ipaddress.ip_address(ip.strip())
        except ValueError:
            raise ValueError(f"{text!r}: {ip.strip()!r} is not an IP address") from None
        return cls(name, ip.strip(), aliases.strip())


@dataclass(frozen=True)
class Rejection:
    """An alias the simulated LanDB does not publish, and why (logged once by the DNS server)."""

    server: str
    """The server's name, or the load balancer's for a tag (``holder``)."""
    item: str
    reason: str
    holder: str = "server"

    def describe(self) -> str:
        return f"simulated LanDB ignores {self.item!r} on {self.holder} {self.server}: {self.reason}"


@dataclass(frozen=True)
class PublishedZone:
    """One sync's snapshot: relative names (``myapp``) to what DNS answers for ``myapp.cern.ch``."""

    addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Name -> its addresses (IPv4 and IPv6), sorted: aliases with load-balanced carriers, and devices."""
    canonical: Mapping[str, str] = field(default_factory=dict)
    """Plain alias -> the relative host name its CNAME points at."""
    hosts: frozenset[str] = frozenset()
    """The names in ``addresses`` that are devices' own host names, not aliases."""
    rejected: tuple[Rejection, ...] = ()
    shared: frozenset[str] = frozenset()
    """Names both servers' ``alias--load-N-`` metadata and load balancers' tags publish: round robin across
    all of them (the simulator's choice, said once by the DNS server)."""

    def describe(self, name: str) -> str | None:
        """``A 188.184.1.1, 188.184.1.2`` or ``CNAME node-0.cern.ch``; None when the name is not published."""
        if name in self.canonical:
            return f"CNAME {self.canonical[name]}.{ZONE}"
        if name in self.addresses:
            return ", ".join(self.addresses[name])
        return None


@dataclass(frozen=True)
class _Claim:
    server: str
    item: str
    alias: str
    interface: str
    address: str
    index: int | None
    """N of ``alias--load-N-``; None for a plain alias."""


def publish(
    servers: Iterable[ServerInfo],
    load_balancers: Iterable[LoadBalancerInfo] = (),
    others: Iterable[OtherDevice] = (),
) -> PublishedZone:
    """The zone LanDB would publish for ``servers``, ``load_balancers`` and ``others`` as they are now."""
    devices_read: list[Device] = [*servers, *others]
    ordered = sorted(devices_read, key=lambda server: (server.name, server.id))
    devices: dict[str, list[str]] = {}
    for server in ordered:
        host = server.name.lower()
        if server.ip is not None and _LABEL.match(host):
            devices.setdefault(host, []).append(server.ip)
    rejected: list[Rejection] = []
    claims: list[_Claim] = []
    for server in ordered:
        for claim_or_rejection in _read_server(server):
            if isinstance(claim_or_rejection, Rejection):
                rejected.append(claim_or_rejection)
            else:
                claims.append(claim_or_rejection)

    tagged: dict[str, set[str]] = {}
    for lb, item, alias in _read_tags(load_balancers):
        refused = _tag_refused(alias, devices)
        if refused is not None:
            rejected.append(Rejection(lb.name or lb.id, item, refused, holder="load balancer"))
        else:
            tagged.setdefault(alias, set()).add(lb.vip_address)

    addresses = {name: set(ips) for name, ips in devices.items()}
    canonical: dict[str, str] = {}
    holders: dict[tuple[str, int | None], str] = {}
    load_balanced = {claim.alias for claim in claims if claim.index is not None} | tagged.keys()
    for claim in claims:
        if claim.alias in devices:
            rejected.append(Rejection(claim.server, claim.item, f"{claim.alias} is a device's host name"))
            continue
        if claim.index is None and claim.alias in load_balanced:
            reason = f"{claim.alias} has load-balanced carriers, so it gets A records, not a CNAME"
            rejected.append(Rejection(claim.server, claim.item, reason))
            continue
        holder = holders.setdefault((claim.alias, claim.index), claim.server)
        if holder != claim.server:
            rejected.append(Rejection(claim.server, claim.item, f"server {holder} already holds it"))
            continue
        if claim.index is None:
            canonical[claim.alias] = claim.interface
        else:
            addresses.setdefault(claim.alias, set()).add(claim.address)
    shared = frozenset(tagged.keys() & addresses.keys())
    for alias, vips in tagged.items():
        addresses.setdefault(alias, set()).update(vips)
    return PublishedZone(
        addresses={name: tuple(sorted(ips, key=_address_order)) for name, ips in addresses.items()},
        canonical=canonical,
        hosts=frozenset(devices),
        rejected=tuple(rejected),
        shared=shared,
    )


def _read_tags(load_balancers: Iterable[LoadBalancerInfo]) -> Iterable[tuple[LoadBalancerInfo, str, str]]:
    """Each ``landb-alias=`` tag as (load balancer, tag, alias), the load balancers by name."""
    for lb in sorted(load_balancers, key=lambda lb: (lb.name, lb.id)):
        for tag in lb.tags:
            if tag.startswith(ALIAS_TAG_PREFIX):
                yield lb, tag, tag[len(ALIAS_TAG_PREFIX) :].lower()


def _tag_refused(alias: str, devices: Mapping[str, object]) -> str | None:
    if not _LABEL.match(alias):
        return "not a bare name (one DNS label of [a-z0-9-], at most 63 characters)"
    if alias in devices:
        return f"{alias} is a device's host name"
    return None


def _address_order(ip: str) -> tuple[int, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    address = ipaddress.ip_address(ip)
    return address.version, address


def _read_server(server: Device) -> Iterable[_Claim | Rejection]:
    host = server.name.lower()
    for key in sorted(server.metadata):
        if not key.startswith(ALIAS_KEY_PREFIX):
            continue
        value = server.metadata[key]
        groups = [(host, value)]
        if ":" in value:
            groups = [(part.partition(":")[0], part.partition(":")[2]) for part in value.split(";")]
        for named_interface, items in groups:
            interface = named_interface.strip().lower().removesuffix(f".{ZONE}")
            for item in (item.strip() for item in items.split(",")):
                if not item:
                    continue
                if interface != host:
                    reason = f"{interface!r} is not an interface of this server (its only one is {host!r})"
                    yield Rejection(server.name, item, reason)
                elif server.ip is None or not _LABEL.match(host):
                    yield Rejection(server.name, item, "the server has no address or no valid host name")
                else:
                    yield _claim(server.name, item, host, server.ip)


def _claim(server: str, item: str, interface: str, address: str) -> _Claim | Rejection:
    match = _LOAD_BALANCED.match(item)
    alias, index = (match["alias"], int(match["index"])) if match else (item, None)
    alias = alias.lower()
    if not _LABEL.match(alias):
        return Rejection(server, item, "not a bare name (one DNS label of [a-z0-9-], at most 63 characters)")
    return _Claim(server, item, alias, interface, address, index)
