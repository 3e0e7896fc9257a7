"""The parts of external-dns' planner and TXT registry that decide what ApplyChanges receives.

Written from the contract (shared docs, "Each external-dns loop" and "Registries"), so the loop tests and
the benchmark can run without the Go binary; tests/e2e runs the real one against the same service.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.webhook.wire import MEDIA_TYPE, decode_endpoints, encode_changes, encode_endpoints

OWNED_RECORD = "ownedRecord"


def txt_name(record: Endpoint) -> str:
    return f"{record.record_type.lower()}-{record.dns_name}"


def ownership_record(record: Endpoint, owner: str) -> Endpoint:
    resource = record.label("resource") or "ingress/default/app"
    value = f'"heritage=external-dns,external-dns/owner={owner},external-dns/resource={resource}"'
    return Endpoint(
        dns_name=txt_name(record),
        record_type="TXT",
        targets=(value,),
        set_identifier=record.set_identifier,
        labels=((OWNED_RECORD, record.dns_name),),
    )


def _owner_of(value: str) -> str | None:
    for part in value.strip('"').split(","):
        key, _, found = part.partition("=")
        if key == "external-dns/owner":
            return found
    return None


def _same(current: Endpoint, desired: Endpoint) -> bool:
    if sorted(t.lower() for t in current.targets) != sorted(t.lower() for t in desired.targets):
        return False
    if desired.record_ttl > 0 and desired.record_ttl != current.record_ttl:
        return False
    return dict(current.provider_specific) == dict(desired.provider_specific)


@dataclass(frozen=True)
class Loop:
    changes: Changes
    unowned: tuple[str, ...]


def plan(
    current: Sequence[Endpoint], desired: Sequence[Endpoint], *, owner: str | None, policy: str = "sync"
) -> Loop:
    """The change set one loop sends: registry ``txt`` with ``owner``, or registry ``noop`` (owner None).

    As the planner does it, per name: a record of a desired type that exists is updated, one that does not
    is created -- only if every current record of that name is owned -- and a current record whose name
    or type is not desired is deleted (``sync`` only); with ``txt``, only owned records change or go.
    """
    claims = {e.dns_name: e for e in current if e.record_type == "TXT"}
    records: dict[tuple[str, str, str], Endpoint] = {}
    for endpoint in current:
        if endpoint.record_type != "TXT":
            records.setdefault(endpoint.key, endpoint)  # external-dns keeps one per key

    def is_owned(record: Endpoint) -> bool:
        if owner is None:
            return True
        # The txt registry matches a claim to a record by name and type (a-app.cern.ch claims the A record).
        claim = claims.get(txt_name(record))
        return claim is not None and _owner_of(claim.targets[0]) == owner

    wanted = {e.key: e for e in desired if e.record_type != "TXT"}
    create: list[Endpoint] = []
    update_old: list[Endpoint] = []
    update_new: list[Endpoint] = []
    delete: list[Endpoint] = []
    for name in sorted({key[0] for key in (*records, *wanted)}):
        row = [r for key, r in sorted(records.items()) if key[0] == name]
        asked = [w for key, w in sorted(wanted.items()) if key[0] == name]
        for record in row:
            if record.key not in wanted and is_owned(record) and policy == "sync":
                delete += [record] if owner is None else [record, claims[txt_name(record)]]
        for record in asked:
            existing = records.get(record.key)
            changed = existing is not None and is_owned(existing) and not _same(existing, record)
            if changed and existing is not None and policy != "create-only":
                update_old.append(existing)
                update_new.append(replace(record, labels=existing.labels or record.labels))
        missing = [w for w in asked if w.key not in records]
        if missing and all(is_owned(r) for r in row):
            for record in missing:
                create += [record] if owner is None else [record, ownership_record(record, owner)]
    unowned = tuple(sorted(r.dns_name for r in records.values() if not is_owned(r)))
    return Loop(
        Changes(
            create=tuple(create),
            update_old=tuple(update_old),
            update_new=tuple(update_new),
            delete=tuple(delete),
        ),
        unowned,
    )


class _Response(Protocol):
    status_code: int
    content: bytes


class HttpClient(Protocol):
    """What an httpx.Client (or Starlette's TestClient) offers, with the webhook as its base URL."""

    def get(self, url: str, *, headers: dict[str, str]) -> _Response: ...

    def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> _Response: ...


@dataclass
class HttpLoop:
    statuses: list[int] = field(default_factory=list)
    """The status of every call, in order: external-dns stops at the first one that is not a success."""
    changes: Changes | None = None
    """What ApplyChanges was sent (None: the loop stopped before, or there was nothing to change)."""

    @property
    def succeeded(self) -> bool:
        return all(status in (200, 204) for status in self.statuses)


def loop_over_http(
    client: HttpClient, desired: Sequence[Endpoint], *, owner: str, policy: str = "sync"
) -> HttpLoop:
    """One external-dns loop against a webhook over HTTP: Records, AdjustEndpoints, then ApplyChanges
    if the plan is not empty; it stops at the first reply that is not a success, as external-dns does."""
    loop = HttpLoop()
    accept = {"Accept": MEDIA_TYPE}
    records = client.get("/records", headers=accept)
    loop.statuses.append(records.status_code)
    if records.status_code != 200:
        return loop
    adjusted = client.post(
        "/adjustendpoints", content=encode_endpoints(desired), headers={**accept, "Content-Type": MEDIA_TYPE}
    )
    loop.statuses.append(adjusted.status_code)
    if adjusted.status_code != 200:
        return loop
    changes = plan(
        decode_endpoints(records.content), decode_endpoints(adjusted.content), owner=owner, policy=policy
    ).changes
    if changes == Changes():
        return loop
    loop.changes = changes
    applied = client.post("/records", content=encode_changes(changes), headers={"Content-Type": MEDIA_TYPE})
    loop.statuses.append(applied.status_code)
    return loop


def create_with_claim(label: str, owner: str = "test", domain: str = "cern.ch") -> bytes:
    """The POST /records body external-dns sends to create ``<label>.<domain>`` with its TXT claim."""
    record = Endpoint(f"{label}.{domain}", "A", ("192.0.2.1",))
    return encode_changes(Changes(create=(record, ownership_record(record, owner))))
