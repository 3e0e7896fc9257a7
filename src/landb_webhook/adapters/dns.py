"""What DNS answers for a name, asked with dnspython: the only module that knows it.

Every failure of the resolver (timeout, SERVFAIL, REFUSED, unreachable) is an answer of its own
(``NoAnswer``), never an exception: the callers judge names, and a resolver down says nothing about a name.
No cache: each question goes to the resolvers, so what is seen is what LanDB's DNS says now (within the
resolvers' own caching, which honours LanDB's TTLs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import dns.exception
import dns.message
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver

from landb_webhook.landb.propagation import Addresses, Alias, Answer, NoAnswer, NoName

DEFAULT_PORT = 53


class DnsResolver:
    """Asks for a name's A records; ``resolvers`` (address, port) empty means the system's
    (``/etc/resolv.conf``).

    ``timeout`` bounds one question, every resolver tried included. Thread-safe: dnspython's Resolver
    holds no per-question state once configured."""

    def __init__(self, resolvers: Sequence[tuple[str, int]] = (), *, timeout: float = 2.0) -> None:
        self._resolver = dns.resolver.Resolver(configure=not resolvers)
        if resolvers:
            self._resolver.nameservers = [
                dns.nameserver.Do53Nameserver(address, port) for address, port in resolvers
            ]
        self._resolver.cache = None
        self._resolver.lifetime = timeout
        self._resolver.timeout = timeout
        self.where = ",".join(map(_where, self._resolver.nameservers)) or "no resolver configured"
        """The resolvers asked, for log lines."""

    def resolve(self, dns_name: str) -> Answer:
        qname = dns.name.from_text(dns_name)
        try:
            found = self._resolver.resolve(qname, "A", search=False, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN as gone:
            return _alias_in(gone.responses().values(), qname) or NoName()  # type: ignore[no-untyped-call]
        except dns.resolver.LifetimeTimeout:
            return NoAnswer(f"no reply from {self.where} within {self._resolver.lifetime:g} s")
        except dns.resolver.NoNameservers as failed:
            return NoAnswer(f"every resolver failed ({_first_line(failed)})")
        except dns.exception.DNSException as failed:
            return NoAnswer(f"{type(failed).__name__}: {_first_line(failed)}")
        if found.canonical_name != qname:
            return Alias(found.canonical_name.to_text())
        ips = frozenset(record.to_text() for record in found.rrset or ())
        return Addresses(ips) if ips else NoName()


def _alias_in(responses: Iterable[object], qname: dns.name.Name) -> Alias | None:
    """The CNAME of ``qname`` an NXDOMAIN came with (its target does not exist), if any."""
    for response in responses:
        if not isinstance(response, dns.message.Message):
            continue
        for rrset in response.answer:
            if rrset.name == qname and rrset.rdtype == dns.rdatatype.CNAME:
                return Alias(rrset[0].target.to_text())
    return None


def _where(server: str | dns.nameserver.Nameserver) -> str:
    if isinstance(server, dns.nameserver.Do53Nameserver) and server.port != DEFAULT_PORT:
        return (
            f"[{server.address}]:{server.port}"
            if ":" in server.address
            else f"{server.address}:{server.port}"
        )
    return server.address if isinstance(server, dns.nameserver.AddressAndPortNameserver) else str(server)


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
