"""A reference :class:`~landb_webhook.provider.interface.WebhookProvider` that keeps records in memory.

It is what external-dns' ``inmemory`` provider is to external-dns: plain DNS semantics with no LanDB
behind them. It lets the HTTP layer be tested on its own, with real behaviour rather than canned replies.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint, RecordKey
from landb_webhook.provider.interface import ApplyError, Readiness


class InMemoryProvider:
    """One endpoint per (name, type, setIdentifier); ApplyChanges checks every change before applying any."""

    def __init__(self, domain_filter: DomainFilter | None = None, records: Iterable[Endpoint] = ()) -> None:
        self._domain_filter = domain_filter if domain_filter is not None else DomainFilter()
        self._lock = threading.Lock()
        self._records: dict[RecordKey, Endpoint] = {endpoint.key: endpoint for endpoint in records}

    def domain_filter(self) -> DomainFilter:
        return self._domain_filter

    def records(self) -> list[Endpoint]:
        with self._lock:
            return sorted(self._records.values(), key=lambda endpoint: endpoint.key)

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        """Names are stored lower-case and without a TTL, so that is what the planner must expect."""
        return [replace(endpoint, dns_name=endpoint.dns_name.lower(), record_ttl=0) for endpoint in endpoints]

    def apply_changes(self, changes: Changes) -> None:
        with self._lock:
            problems = [
                f"create {key}: already exists" for key in _keys(changes.create) if key in self._records
            ]
            problems += [
                f"{verb} {key}: no such record"
                for verb, endpoints in (("update", changes.update_old), ("delete", changes.delete))
                for key in _keys(endpoints)
                if key not in self._records
            ]
            if len(changes.update_old) != len(changes.update_new):
                problems.append(
                    f"{len(changes.update_old)} updateOld but {len(changes.update_new)} updateNew endpoints"
                )
            if problems:
                raise ApplyError("; ".join(problems))
            for endpoint in (*changes.delete, *changes.update_old):
                self._records.pop(endpoint.key, None)
            for endpoint in (*changes.create, *changes.update_new):
                self._records[endpoint.key] = replace(
                    endpoint, dns_name=endpoint.dns_name.lower(), record_ttl=0
                )

    def readiness(self) -> Readiness:
        return Readiness(True, "records in memory")


def _keys(endpoints: Iterable[Endpoint]) -> list[RecordKey]:
    return [endpoint.key for endpoint in endpoints]
