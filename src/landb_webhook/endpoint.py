"""The external-dns data model (endpoints and change sets), as plain immutable values.

These types are what the provider speaks; the webhook layer converts them to and from JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RecordKey = tuple[str, str, str]
"""(dnsName, recordType, setIdentifier): the identity external-dns uses to pair records."""


@dataclass(frozen=True)
class Endpoint:
    dns_name: str
    record_type: str
    targets: tuple[str, ...] = ()
    set_identifier: str = ""
    record_ttl: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    provider_specific: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> RecordKey:
        return (self.dns_name.lower(), self.record_type.upper(), self.set_identifier)

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


@dataclass(frozen=True)
class Changes:
    create: tuple[Endpoint, ...] = ()
    update_old: tuple[Endpoint, ...] = ()
    update_new: tuple[Endpoint, ...] = ()
    delete: tuple[Endpoint, ...] = ()


@dataclass(frozen=True)
class DomainFilter:
    include: tuple[str, ...] = field(default_factory=tuple)
    exclude: tuple[str, ...] = field(default_factory=tuple)

    def matches(self, dns_name: str) -> bool:
        """Whether external-dns' domain filter keeps ``dns_name``: under an included suffix (or no suffix
        included) and under no excluded one."""
        name = dns_name.strip().rstrip(".").lower()

        def under(suffixes: tuple[str, ...]) -> bool:
            return any(name == suffix or name.endswith("." + suffix) for suffix in suffixes)

        return (not self.include or under(self.include)) and not under(self.exclude)
