"""external-dns' TXT ownership records, kept in ConfigMaps next to the webhook.

LanDB cannot hold TXT records, yet the default external-dns registry (``txt``) needs them back
verbatim from Records, or every alias becomes unowned after one loop. They live here.

Format (meant to be read with ``kubectl get cm <name> -o yaml``): one ``data`` key per record, its
value one JSON object in external-dns' own field names::

    data:
      a-app.cern.ch: '{"dnsName":"a-app.cern.ch","recordType":"TXT","targets":["\\"heritage=..."],...}'

The key is the record's lower-case name when that is already a valid ConfigMap key and the record
has no setIdentifier; otherwise a readable form of the name plus ``_`` and 16 hex digits of a hash
of (name, setIdentifier). Plain keys never contain ``_`` and hashed keys always do, so the two can
never collide. The key only places the record: its identity is read back from the JSON value.
The JSON is ASCII-escaped, so any string (quotes, commas, unicode) round-trips byte for byte.

Once start()ed (the service), records are answered from a list+watch-fed cache (adapters.reflector),
so an external-dns loop costs no Kubernetes request: another replica's write, ``adopt`` or an
operator's ``kubectl edit`` arrive by the watch. Our own writes are put into the cache from the API's
reply, so the very next read sees them. Before the cache has synced, or when its watch has failed for
longer than the node cache's bound (``LANDB_NODE_CACHE_MAX_AGE``), records() falls back to a fresh
LIST rather than refusing: the records are few and small, a fresh read is always right, and a watch
that keeps failing while lists work (say, RBAC without ``watch``) then costs a request per loop, not
the service; when the LIST fails too, the UpstreamError is a 503. Not started (the one-shot commands),
every call reads fresh.

Writes use optimistic concurrency: read with resourceVersion, replace with it; on a 409 the
whole change is re-read and re-applied (it is idempotent), never forced. When one ConfigMap would
grow past ``max_bytes`` (900 KiB by default, under the 1 MiB object limit), records spill into
``<name>-1``, ``<name>-2``, ... A record stays in the ConfigMap that holds it; when it must move, it
moves to a higher-numbered one, which is written first; a reader that sees a record twice trusts
the highest-numbered copy, so a record is never missing, even between the two writes.

Only ConfigMaps labelled ``app.kubernetes.io/managed-by=landb-webhook`` are read (one labelled
LIST); a same-named ConfigMap without that label is someone else's and is never overwritten.
RBAC needed in the namespace: configmaps get, list, watch, create, update.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.kubernetes import (
    UPSTREAM,
    json_body,
    release_failed_response,
    upstream_error,
)
from landb_webhook.adapters.reflector import Reflector, WatchOptions
from landb_webhook.backends import UpstreamError, ownership_key
from landb_webhook.endpoint import Endpoint

log = structlog.get_logger(__name__)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "landb-webhook"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
FORMAT_ANNOTATION = "landb-webhook/format"
FORMAT_DESCRIPTION = "one data key per external-dns TXT ownership record; value = the endpoint as JSON"
DEFAULT_MAX_BYTES = 900 * 1024

_MAX_KEY_LENGTH = 253
_PLAIN_KEY = re.compile(r"[-.a-zA-Z0-9]{1,253}")
_UNSAFE_KEY_CHARACTERS = re.compile(r"[^-.a-zA-Z0-9]+")
_HASH_LENGTH = 16
_HTTP_NOT_FOUND = 404
_HTTP_CONFLICT = 409


# -- the record codec ----------------------------------------------------------------------------


def data_key(record: Endpoint) -> str:
    """The ConfigMap data key a record is stored under; a function of its identity only."""
    name, set_identifier = ownership_key(record)
    if not set_identifier and _PLAIN_KEY.fullmatch(name) and not name.startswith(".."):
        return name
    identity = json.dumps([name, set_identifier]).encode("utf-8")
    digest = hashlib.sha256(identity).hexdigest()[:_HASH_LENGTH]
    readable = _UNSAFE_KEY_CHARACTERS.sub("-", name).lstrip(".")[: _MAX_KEY_LENGTH - _HASH_LENGTH - 1]
    return f"{readable or 'record'}_{digest}"


def encode_record(record: Endpoint) -> str:
    document: dict[str, Any] = {
        "dnsName": record.dns_name,
        "recordType": record.record_type,
        "setIdentifier": record.set_identifier,
        "targets": list(record.targets),
        "labels": dict(record.labels),
    }
    if record.record_ttl:
        document["recordTTL"] = record.record_ttl
    if record.provider_specific:
        document["providerSpecific"] = [{"name": n, "value": v} for n, v in record.provider_specific]
    return json.dumps(document, ensure_ascii=True, separators=(",", ":"))


def decode_record(text: str) -> Endpoint:
    """Inverse of encode_record; raises ValueError for anything else."""
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    targets = document.get("targets", [])
    labels = document.get("labels", {})
    provider_specific = document.get("providerSpecific", [])
    ttl = document.get("recordTTL", 0)
    if not (
        isinstance(document.get("dnsName"), str)
        and isinstance(document.get("recordType"), str)
        and isinstance(document.get("setIdentifier", ""), str)
        and isinstance(targets, list)
        and all(isinstance(target, str) for target in targets)
        and isinstance(labels, dict)
        and all(isinstance(value, str) for value in labels.values())
        and isinstance(provider_specific, list)
        and all(
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("value"), str)
            for item in provider_specific
        )
        and isinstance(ttl, int)
    ):
        raise ValueError("fields of the wrong type")
    return Endpoint(
        dns_name=document["dnsName"],
        record_type=document["recordType"],
        set_identifier=document.get("setIdentifier", ""),
        targets=tuple(targets),
        record_ttl=ttl,
        labels=tuple(labels.items()),
        provider_specific=tuple((item["name"], item["value"]) for item in provider_specific),
    )


# -- the store -----------------------------------------------------------------------------------


@dataclass
class _Shard:
    """One ConfigMap of the store, as read; ``raw`` is None while it does not exist."""

    index: int
    raw: dict[str, Any] | None
    data: dict[str, str] = field(default_factory=dict)


class _Conflict(Exception):
    """Someone else changed a ConfigMap between our read and our write."""


class ConfigMapOwnershipStore:
    """backends.OwnershipStore in ConfigMaps ``<name>``, ``<name>-1``, ... of one namespace."""

    def __init__(
        self,
        api: client.CoreV1Api,
        *,
        namespace: str,
        name: str,
        request_timeout: float,
        watch: WatchOptions,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_attempts: int = 5,
    ) -> None:
        """``request_timeout``: seconds one ConfigMap read or write may take; ``watch``: how the cache lists
        and watches once start()ed. Not settings: ``max_bytes`` keeps a ConfigMap under the API server's
        1 MiB object limit; ``max_attempts`` bounds the read-and-write rounds an apply makes while another
        writer keeps changing the ConfigMaps."""
        self._api = api
        self._namespace = namespace
        self._name = name
        self._request_timeout = request_timeout
        self._max_bytes = max_bytes
        self._max_attempts = max_attempts
        self._shard_name = re.compile(rf"{re.escape(name)}(?:-(?P<index>[1-9][0-9]*))?")
        self._write_lock = threading.Lock()
        self._cache: Reflector[dict[str, Any]] = Reflector(
            "ownership ConfigMaps",
            lambda **options: api.list_namespaced_config_map(namespace, **options),
            _without_managed_fields,
            list_options={"label_selector": MANAGED_SELECTOR},
            options=watch,
        )
        self._decoded: tuple[int, list[Endpoint]] | None = None
        """The records decoded from the cache at its version, so a quiet loop decodes nothing."""
        self._cache_unusable = False

    def shard_name(self, index: int) -> str:
        return self._name if index == 0 else f"{self._name}-{index}"

    # -- the cache's lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the watch-fed cache (the service); until then, and without it, every read is fresh."""
        self._cache.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._cache.stop(timeout)

    @property
    def synced(self) -> bool:
        return self._cache.synced

    def wait_synced(self, timeout: float) -> bool:
        return self._cache.wait_synced(timeout)

    # -- backends.OwnershipStore --------------------------------------------------------------------

    def records(self) -> Sequence[Endpoint]:
        """From the cache when it is usable (no request), else from a fresh LIST (module docstring)."""
        cached = self._cached()
        if cached is None:
            return self._decode(self._read())
        items, version = cached
        if self._decoded is not None and self._decoded[0] == version:
            return list(self._decoded[1])
        decoded = self._decode(self._shards(items.values()))
        self._decoded = (version, decoded)
        return list(decoded)

    def _decode(self, shards: Sequence[_Shard]) -> list[Endpoint]:
        found: dict[tuple[str, str], Endpoint] = {}
        for shard in shards:  # ascending index: a higher-numbered copy wins
            for key, value in shard.data.items():
                try:
                    record = decode_record(value)
                except ValueError as exc:
                    log.warning(
                        "unreadable ownership record ignored",
                        configmap=self.shard_name(shard.index),
                        key=key,
                        error=str(exc),
                    )
                    continue
                found[ownership_key(record)] = record
        return [found[key] for key in sorted(found)]

    def apply(self, upserts: Sequence[Endpoint], deletes: Sequence[Endpoint]) -> None:
        """A record both upserted and deleted is upserted (an update's old and new share a key)."""
        if not upserts and not deletes:
            return
        with self._write_lock:
            # Planned from the cache when usable: each write carries the resourceVersion it was
            # planned from, so a cache behind the API costs a 409 and a fresh read, never a lost write.
            cached = self._cached()
            shards = None if cached is None else self._shards(cached[0].values())
            for attempt in range(1, self._max_attempts + 1):
                if shards is None:
                    shards = self._read()
                try:
                    for shard, data in self._plan(shards, upserts, deletes):
                        self._write(shard, data)
                    return
                except _Conflict:
                    log.info("ownership ConfigMap changed concurrently; re-reading", attempt=attempt)
                    shards = None
        raise UpstreamError(
            UPSTREAM, f"ownership ConfigMaps kept changing during {self._max_attempts} attempts"
        )

    # -- internals -------------------------------------------------------------------------------

    def _cached(self) -> tuple[dict[str, dict[str, Any]], int] | None:
        """The cache's ConfigMaps and version; None when not started, not synced yet or stale."""
        if not self._cache.running:
            return None
        try:
            cached = self._cache.items()
        except UpstreamError as error:
            if not self._cache_unusable:
                # Stale is worth a warning; not synced yet is every start-up.
                say = log.warning if self._cache.synced else log.info
                say("ownership cache not usable: reading the ConfigMaps fresh", reason=error.reason)
            self._cache_unusable = True
            return None
        if self._cache_unusable:
            log.info("ownership cache usable again")
        self._cache_unusable = False
        return cached

    def _read(self) -> list[_Shard]:
        """A fresh LIST of our ConfigMaps (one request)."""
        try:
            response: Any = self._api.list_namespaced_config_map(
                self._namespace,
                label_selector=MANAGED_SELECTOR,
                _preload_content=False,
                _request_timeout=self._request_timeout,
            )
            listing = json_body(response)
        except Exception as exc:
            raise upstream_error(exc, "list ownership ConfigMaps") from exc
        items = listing.get("items") or ()
        for raw in items:  # what is read fresh is at least as new as what the cache holds
            self._cache.observe(raw)
        return self._shards(items)

    def _shards(self, configmaps: Iterable[Mapping[str, Any]]) -> list[_Shard]:
        shards: list[_Shard] = []
        for raw in configmaps:
            matched = self._shard_name.fullmatch(str(raw.get("metadata", {}).get("name", "")))
            if matched:
                index = int(matched["index"] or 0)
                shards.append(_Shard(index, dict(raw), dict(raw.get("data") or {})))
        return sorted(shards, key=lambda shard: shard.index)

    def _plan(
        self, shards: Sequence[_Shard], upserts: Sequence[Endpoint], deletes: Sequence[Endpoint]
    ) -> list[tuple[_Shard, dict[str, str]]]:
        """The ConfigMaps to write and their new data, in a safe order: those gaining records first.

        Each ConfigMap's size is summed once and then kept up to date entry by entry, so planning is
        linear in the records (re-summing per record made 8,000 claims take 20 s).
        """
        by_index = {shard.index: shard for shard in shards}
        data = {shard.index: dict(shard.data) for shard in shards}
        sizes = {index: _size(entries) for index, entries in data.items()}
        holders: dict[str, list[int]] = defaultdict(list)
        for shard in shards:
            for key in shard.data:
                holders[key].append(shard.index)

        def take_out(key: str, index: int) -> None:
            sizes[index] -= entry_size(key, data[index].pop(key))

        upserted = {data_key(record): encode_record(record) for record in upserts}
        for key in {data_key(record) for record in deletes} - upserted.keys():
            for index in holders.pop(key, []):
                take_out(key, index)

        gaining: set[int] = set()
        for key, value in upserted.items():
            held_in = holders.pop(key, [])
            for index in held_in:
                take_out(key, index)
            home = held_in[-1] if held_in else None
            needed = entry_size(key, value)
            target = self._place(sizes, key, needed, home)
            data.setdefault(target, {})[key] = value
            sizes[target] = sizes.get(target, 0) + needed
            if by_index.get(target) is None or by_index[target].data.get(key) != value:
                gaining.add(target)

        changed = [
            index for index in sorted(data) if data[index] != by_index.get(index, _Shard(index, None)).data
        ]
        ordered = sorted(changed, key=lambda index: (index not in gaining, index))
        return [(by_index.get(index) or _Shard(index, None), data[index]) for index in ordered]

    def _place(self, sizes: Mapping[int, int], key: str, needed: int, home: int | None) -> int:
        """Where a record of ``needed`` bytes goes: its current ConfigMap (``home``) if it still fits, else
        the first one above with room; ``sizes`` are the ConfigMaps' sizes without it."""
        if needed > self._max_bytes:
            raise UpstreamError(
                UPSTREAM, f"ownership record {key!r} is larger than one ConfigMap may hold", retryable=False
            )
        if home is not None and sizes[home] + needed <= self._max_bytes:
            return home
        index = 0 if home is None else home + 1
        while index in sizes and sizes[index] + needed > self._max_bytes:
            index += 1
        return index

    def _write(self, shard: _Shard, data: dict[str, str]) -> None:
        name = self.shard_name(shard.index)
        configmap = labelled_configmap(shard.raw, name, self._namespace, data, FORMAT_DESCRIPTION)
        try:
            written = create_or_replace(
                self._api, shard.raw is not None, configmap, timeout=self._request_timeout
            )
        except ApiException as exc:
            release_failed_response(exc)
            if exc.status == _HTTP_CONFLICT and shard.raw is None:
                self._refuse_foreign(name)
            if exc.status in (_HTTP_CONFLICT, _HTTP_NOT_FOUND):
                raise _Conflict from exc
            raise upstream_error(exc, f"write ConfigMap {self._namespace}/{name}") from exc
        except Exception as exc:
            raise upstream_error(exc, f"write ConfigMap {self._namespace}/{name}") from exc
        self._cache.observe(written)  # read-your-writes: the next records() sees this write
        log.debug("ownership ConfigMap written", configmap=name, records=len(data))

    def _refuse_foreign(self, name: str) -> None:
        """A ConfigMap we did not see in the labelled list exists: never take over one we do not own."""
        try:
            existing = self._api.read_namespaced_config_map(
                name, self._namespace, _request_timeout=self._request_timeout
            )
        except Exception as exc:
            raise upstream_error(exc, f"read ConfigMap {self._namespace}/{name}") from exc
        labels = (existing.metadata and existing.metadata.labels) or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise UpstreamError(
                UPSTREAM,
                f"ConfigMap {self._namespace}/{name} exists without label "
                f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; refusing to overwrite it",
                retryable=False,
            )


def _without_managed_fields(configmap: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap as the cache keeps it; managedFields are never written back (see _write)."""
    metadata = {k: v for k, v in (configmap.get("metadata") or {}).items() if k != "managedFields"}
    return {**configmap, "metadata": metadata}


def entry_size(key: str, value: str) -> int:
    """The bytes one data entry counts towards a ConfigMap's size limit."""
    return len(key.encode("utf-8")) + len(value.encode("utf-8"))


def _size(data: Mapping[str, str]) -> int:
    return sum(entry_size(key, value) for key, value in data.items())


def labelled_configmap(
    found: Mapping[str, Any] | None, name: str, namespace: str, data: Mapping[str, str], format: str
) -> client.V1ConfigMap:
    """The body that writes ``data`` into ConfigMap ``name`` (``found``: as last read, None to create
    it): labelled as ours, its format annotated, at ``found``'s resourceVersion."""
    body: dict[str, Any] = dict(found or {"apiVersion": "v1", "kind": "ConfigMap"})
    metadata: dict[str, Any] = dict(body.get("metadata") or {"name": name, "namespace": namespace})
    metadata.pop("managedFields", None)
    metadata["labels"] = {**(metadata.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), FORMAT_ANNOTATION: format}
    configmap = client.V1ConfigMap.from_dict({**body, "metadata": metadata, "data": dict(data)})
    assert configmap is not None
    return configmap


def create_or_replace(
    api: client.CoreV1Api, exists: bool, configmap: client.V1ConfigMap, *, timeout: float
) -> Any:
    """One create (``exists`` False) or replace of ``configmap``; the ConfigMap as written (JSON). A 409
    or 404 is left to the caller as the ApiException."""
    metadata = configmap.metadata
    assert metadata is not None and metadata.name is not None and metadata.namespace is not None
    if exists:
        response: Any = api.replace_namespaced_config_map(
            metadata.name, metadata.namespace, configmap, _preload_content=False, _request_timeout=timeout
        )
    else:
        response = api.create_namespaced_config_map(
            metadata.namespace, configmap, _preload_content=False, _request_timeout=timeout
        )
    return json_body(response)
