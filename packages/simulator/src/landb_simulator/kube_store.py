"""The Kubernetes object store behind the simulated API: nodes, pods, configmaps and leases,
resourceVersions, watches.

It keeps the API server's contracts that clients build on: one global resourceVersion counter (strings on
the wire), optimistic concurrency on update, a bounded event history so a watch can resume from a recent
resourceVersion and gets 410 Gone when it asks for one that was compacted away, and label-selector watches
that turn an object leaving or entering the selection into DELETED / ADDED, as the real API server does.
Finalizers hold a deleted object: it gets a ``deletionTimestamp`` and goes once its last finalizer does.
"""

from __future__ import annotations

import copy
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonpatch

from landb_simulator import kube_gateways
from landb_simulator.kube_services import default_and_check_status, prepare_new_service
from landb_simulator.selectors import FieldSelector
from landb_webhook.selector import LabelSelector, is_valid_label_key, is_valid_label_value

NODES = "nodes"
PODS = "pods"
CONFIGMAPS = "configmaps"
LEASES = "leases"
SERVICES = "services"
INGRESSES = "ingresses"
EVENTS = "events"
"""events.k8s.io/v1 Events (the core /api/v1 events are always an empty list)."""
GATEWAY_RESOURCES = frozenset(kube_gateways.KINDS)
"""gateway.networking.k8s.io/v1 (landb_simulator.kube_gateways)."""
KINDS = {
    NODES: "Node",
    PODS: "Pod",
    CONFIGMAPS: "ConfigMap",
    LEASES: "Lease",
    SERVICES: "Service",
    INGRESSES: "Ingress",
    EVENTS: "Event",
    **kube_gateways.KINDS,
}
NAMESPACED = {
    NODES: False,
    PODS: True,
    CONFIGMAPS: True,
    LEASES: True,
    SERVICES: True,
    INGRESSES: True,
    EVENTS: True,
    **{resource: resource != kube_gateways.GATEWAY_CLASSES for resource in GATEWAY_RESOURCES},
}
API_VERSIONS = {
    NODES: "v1",
    PODS: "v1",
    CONFIGMAPS: "v1",
    LEASES: "coordination.k8s.io/v1",
    SERVICES: "v1",
    INGRESSES: "networking.k8s.io/v1",
    EVENTS: "events.k8s.io/v1",
    **{resource: kube_gateways.API_VERSION for resource in GATEWAY_RESOURCES},
}
MAX_EVENT_NOTE_BYTES = 1024
_EVENT_TYPES = ("Normal", "Warning")
WITH_STATUS_SUBRESOURCE = frozenset({SERVICES, *GATEWAY_RESOURCES})
"""Resources whose status only the ``/status`` subresource writes (the simulator's nodes and pods take
theirs with the object, as its helpers need)."""

MAX_CONFIGMAP_BYTES = 1024 * 1024
DEFAULT_EVENT_WINDOW = 10_000

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_LEASE_INTEGERS = ("leaseDurationSeconds", "leaseTransitions")
_LEASE_TIMES = ("acquireTime", "renewTime")

Obj = dict[str, Any]

_PATCH_TYPES = (
    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
)
_LABEL_RULE = 'must be 63 characters or less and consist of alphanumeric characters, "-", "_" or "."'
_KEY_RULE = 'a valid config key must consist of alphanumeric characters, "-", "_" or "."'


class KubeError(Exception):
    """An API error, rendered as a ``Status`` object by the HTTP layer."""

    def __init__(self, code: int, reason: str, message: str, *, name: str = "", resource: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.resource = resource


def not_found(resource: str, name: str) -> KubeError:
    return KubeError(404, "NotFound", f'{resource} "{name}" not found', name=name, resource=resource)


@dataclass(frozen=True)
class WatchEvent:
    resource_version: int
    type: str
    """ADDED, MODIFIED or DELETED."""
    resource: str
    namespace: str | None
    object: Obj
    previous: Obj | None
    """The object before a MODIFIED change, so selector watches can tell entering from leaving."""

    def for_selection(self, labels: LabelSelector, fields: FieldSelector) -> tuple[str, Obj] | None:
        """The event a watcher with these selectors sees, or None if it sees nothing."""

        def selected(obj: Obj | None) -> bool:
            if obj is None:
                return False
            return labels.matches(obj["metadata"].get("labels") or {}) and fields.matches(obj)

        now = selected(self.object)
        if self.type != "MODIFIED":
            return (self.type, self.object) if now else None
        before = selected(self.previous)
        if now and before:
            return "MODIFIED", self.object
        if now:
            return "ADDED", self.object
        if before:
            return "DELETED", self.object
        return None


class Subscription:
    """A live watch registration: ``deliver`` gets every later event of the resource (and namespace).

    ``deliver`` runs under the store's lock, in the order of the changes, so it must only hand the event
    over (for instance with ``loop.call_soon_threadsafe``). Close the subscription when the stream ends.
    """

    def __init__(
        self, store: KubeStore, resource: str, namespace: str | None, deliver: Callable[[WatchEvent], None]
    ) -> None:
        self._store = store
        self.resource = resource
        self.namespace = namespace
        self.deliver = deliver

    def wants(self, event: WatchEvent) -> bool:
        return self.resource == event.resource and self.namespace in (None, event.namespace)

    def close(self) -> None:
        self._store._unsubscribe(self)


class Gone(Exception):
    """The requested resourceVersion is older than the retained event history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj["metadata"]
    return metadata.get("namespace") or "", metadata["name"]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for the fields the simulator's clients touch (labels, annotations, data).

    Maps merge as in a merge patch and ``$``-directives are dropped; lists are replaced wholesale, which
    differs from the real API server only for lists with merge keys (conditions, addresses).
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def apply_patch(obj: Obj, patch_type: str, patch: Any) -> Obj:
    """Apply one of the three patch flavours by Content-Type; KubeError on a bad or unsupported patch."""
    if patch_type == "application/json-patch+json":
        if not isinstance(patch, list):
            raise KubeError(400, "BadRequest", "json patch must be a list of operations")
        try:
            result = jsonpatch.apply_patch(obj, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise KubeError(
                422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
        if not isinstance(result, dict):
            raise KubeError(422, "Invalid", "json patch must leave an object")
        return result
    if not isinstance(patch, dict):
        raise KubeError(400, "BadRequest", "patch body must be a JSON object")
    if patch_type == "application/merge-patch+json":
        result = merge_patch(obj, patch)
    elif patch_type == "application/strategic-merge-patch+json":
        result = strategic_merge_patch(obj, patch)
    else:
        raise KubeError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{_PATCH_TYPES}",
        )
    assert isinstance(result, dict)
    return result


def _take_request_namespace(resource: str, metadata: dict[str, Any], namespace: str | None) -> None:
    """A namespaced object lives in the namespace of the URL (one that names another is refused, as by
    the API server); a cluster-scoped one has no namespace."""
    if not NAMESPACED[resource]:
        metadata.pop("namespace", None)
        return
    if metadata.get("namespace") not in (None, "", namespace):
        raise KubeError(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        )
    metadata["namespace"] = namespace


def _validate(resource: str, obj: Obj) -> None:
    """The subset of API-server validation that clients of the simulator can trip over."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise KubeError(422, "Invalid", f"{KINDS[resource]} is invalid: metadata: Required value")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise KubeError(
            422, "Invalid", f"{KINDS[resource]} is invalid: metadata.name: Required value: name is required"
        )
    problems: list[str] = []
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain is required')
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            problems.append(f"metadata.{field}: Invalid value: values must be strings")
            continue
        if field == "labels":
            for key, value in values.items():
                if not is_valid_label_key(key):
                    problems.append(f'metadata.labels: Invalid value: "{key}": {_LABEL_RULE}')
                if not is_valid_label_value(value):
                    problems.append(f'metadata.labels: Invalid value: "{value}": {_LABEL_RULE}')
    if resource == CONFIGMAPS:
        size = 0
        for field in ("data", "binaryData"):
            values = obj.get(field) or {}
            if not isinstance(values, dict):
                problems.append(f"{field}: Invalid value: must be a map")
                continue
            for key, value in values.items():
                if not _CONFIGMAP_KEY.match(key):
                    problems.append(f'{field}[{key}]: Invalid value: "{key}": {_KEY_RULE}')
                if not isinstance(value, str):
                    problems.append(f"{field}[{key}]: Invalid value: must be a string")
                    continue
                size += len(key) + len(value.encode())
        if size > MAX_CONFIGMAP_BYTES:
            problems.append(f"[]: Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes")
    if resource == LEASES:
        problems += _lease_problems(obj.get("spec") or {})
    if resource == EVENTS:
        problems += _event_problems(obj)
    _refuse(resource, obj, problems)


def _event_problems(event: Obj) -> list[str]:
    """The events.k8s.io/v1 checks of the API server's validation (core/validation ValidateEventCreate)
    that an event writer can trip over."""
    problems = []
    if not (isinstance(event.get("eventTime"), str) and _MICRO_TIME.match(event["eventTime"])):
        problems.append("eventTime: Required value")
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        value = event.get(field)
        if not isinstance(value, str) or not value:
            problems.append(f"{field}: Required value")
        elif len(value) > 128:
            problems.append(f"{field}: Too long: may not be longer than 128")
    if len(str(event.get("note") or "").encode()) > MAX_EVENT_NOTE_BYTES:
        problems.append(f"note: Too long: may not be longer than {MAX_EVENT_NOTE_BYTES}")
    if event.get("type") not in _EVENT_TYPES:
        problems.append(
            f'type: Unsupported value: "{event.get("type")}": supported values: "Normal", "Warning"'
        )
    if not isinstance(event.get("regarding"), dict):
        problems.append("regarding: Required value")
    series = event.get("series")
    if series is not None:
        count = series.get("count") if isinstance(series, dict) else None
        if not isinstance(count, int) or count < 2:
            problems.append("series.count: Invalid value: should be at least 2")
        last = series.get("lastObservedTime") if isinstance(series, dict) else None
        if not (isinstance(last, str) and _MICRO_TIME.match(last)):
            problems.append("series.lastObservedTime: Required value")
    return problems


def _lease_problems(spec: Any) -> list[str]:
    """The Lease spec checks of the API server's validation (coordination/validation)."""
    if not isinstance(spec, dict):
        return ["spec: Invalid value: must be an object"]
    problems = []
    for field in _LEASE_INTEGERS:
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            problems.append(f"spec.{field}: Invalid value: must be an integer")
        elif field == "leaseDurationSeconds" and value is not None and value <= 0:
            problems.append(f"spec.{field}: Invalid value: {value}: must be greater than 0")
        elif field == "leaseTransitions" and value is not None and value < 0:
            problems.append(f"spec.{field}: Invalid value: {value}: must be greater than or equal to 0")
    for field in _LEASE_TIMES:
        value = spec.get(field)
        if value is not None and not (isinstance(value, str) and _MICRO_TIME.match(value)):
            problems.append(f"spec.{field}: Invalid value: must be an RFC 3339 time with microseconds")
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        problems.append("spec.holderIdentity: Invalid value: must be a string")
    return problems


class KubeStore:
    """Objects by resource and (namespace, name); every mutation bumps the global resourceVersion."""

    def __init__(self, lock: threading.RLock, *, event_window: int = DEFAULT_EVENT_WINDOW) -> None:
        self._lock = lock
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {resource: {} for resource in KINDS}
        self._resource_version = 0
        self._events: deque[WatchEvent] = deque()
        self._event_window = event_window
        self._oldest_watchable = 0
        """A watch may start from this resourceVersion or later; older ones get 410 Gone."""
        self._subscribers: list[Subscription] = []

    # -- reads ---------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._resource_version

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        with self._lock:
            obj = self._objects[resource].get((namespace or "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def select(
        self,
        resource: str,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> tuple[list[Obj], int]:
        """Matching objects sorted by (namespace, name), and the resourceVersion they were read at."""
        labels = labels or LabelSelector()
        fields = fields or FieldSelector()
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for key, obj in sorted(self._objects[resource].items())
                if (namespace is None or key[0] == namespace)
                and labels.matches(obj["metadata"].get("labels") or {})
                and fields.matches(obj)
            ]
            return items, self._resource_version

    # -- writes --------------------------------------------------------------------------------------

    def create(self, resource: str, namespace: str | None, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        _take_request_namespace(resource, metadata, namespace)
        obj["apiVersion"] = API_VERSIONS[resource]
        obj["kind"] = KINDS[resource]
        _validate(resource, obj)
        with self._lock:
            if resource == SERVICES:
                _refuse(resource, obj, prepare_new_service(obj, self._objects[SERVICES].values()))
            key = _key(obj)
            if key in self._objects[resource]:
                raise KubeError(
                    409,
                    "AlreadyExists",
                    f'{resource} "{key[1]}" already exists',
                    name=key[1],
                    resource=resource,
                )
            metadata.pop("resourceVersion", None)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = _now()
            if resource in GATEWAY_RESOURCES:  # custom resources count their spec's generations
                metadata["generation"] = 1
                obj["status"] = {}
            return self._store(resource, obj, "ADDED", None)

    def update(
        self, resource: str, namespace: str | None, name: str, obj: Obj, *, status: bool = False
    ) -> Obj:
        """PUT semantics: a non-empty metadata.resourceVersion must equal the stored one (409 otherwise).

        ``status``: a write to the status subresource, which changes the status only."""
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        if metadata.get("name") != name:
            raise KubeError(
                400,
                "BadRequest",
                f"the name of the object ({metadata.get('name')}) does not match the name on the URL "
                f"({name})",
            )
        _take_request_namespace(resource, metadata, namespace)
        with self._lock:
            current = self._require(resource, namespace, name)
            return self._replace(resource, current, _scoped(resource, current, obj, status=status))

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        *,
        status: bool = False,
    ) -> Obj:
        with self._lock:
            current = self._require(resource, namespace, name)
            patched = apply_patch(copy.deepcopy(current), patch_type, patch)
            if patched.get("metadata", {}).get("name") != name:
                raise KubeError(422, "Invalid", "metadata.name: Invalid value: field is immutable")
            return self._replace(resource, current, _scoped(resource, current, patched, status=status))

    def mutate(self, resource: str, namespace: str | None, name: str, change: Callable[[Obj], None]) -> Obj:
        """Change an object in place through a callback (for the simulator's own helpers)."""
        with self._lock:
            current = self._require(resource, namespace, name)
            updated = copy.deepcopy(current)
            change(updated)
            return self._replace(resource, current, updated)

    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        resource_version: str | None = None,
        uid: str | None = None,
    ) -> Obj:
        """Delete, optionally only if the object still has this resourceVersion / uid (409 otherwise).

        An object with finalizers is only marked (``deletionTimestamp``, a MODIFIED event) and returned.
        """
        with self._lock:
            current = self._require(resource, namespace, name)
            for field, expected in (("resourceVersion", resource_version), ("uid", uid)):
                if expected and current["metadata"].get(field) != expected:
                    raise KubeError(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {resource} "{name}": Precondition failed: '
                        f"{field} in precondition: {expected}, "
                        f"{field} in object meta: {current['metadata'].get(field)}",
                        name=name,
                        resource=resource,
                    )
            if current["metadata"].get("finalizers"):
                if current["metadata"].get("deletionTimestamp"):
                    return copy.deepcopy(current)
                marked = copy.deepcopy(current)
                marked["metadata"]["deletionTimestamp"] = _now()
                return self._store(resource, marked, "MODIFIED", current)
            return self._remove(resource, current)

    def _remove(self, resource: str, current: Obj) -> Obj:
        with self._lock:
            del self._objects[resource][_key(current)]
            self._resource_version += 1
            deleted = copy.deepcopy(current)
            deleted["metadata"]["resourceVersion"] = str(self._resource_version)
            self._record(
                WatchEvent(
                    self._resource_version,
                    "DELETED",
                    resource,
                    deleted["metadata"].get("namespace"),
                    deleted,
                    current,
                )
            )
            return copy.deepcopy(deleted)

    def _require(self, resource: str, namespace: str | None, name: str) -> Obj:
        obj = self._objects[resource].get((namespace or "", name))
        if obj is None:
            raise not_found(resource, name)
        return obj

    def _replace(self, resource: str, current: Obj, updated: Obj) -> Obj:
        metadata = updated.setdefault("metadata", {})
        sent_version = metadata.get("resourceVersion")
        if sent_version not in (None, "") and sent_version != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            raise KubeError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                name=name,
                resource=resource,
            )
        for immutable in ("uid", "creationTimestamp", "deletionTimestamp", "name", "namespace"):
            if immutable in current["metadata"]:
                metadata[immutable] = current["metadata"][immutable]
            else:
                metadata.pop(immutable, None)
        updated["apiVersion"] = API_VERSIONS[resource]
        updated["kind"] = KINDS[resource]
        _validate(resource, updated)
        if _without_version(updated) == _without_version(current):
            # A write that changes nothing keeps the resourceVersion and emits no event, as on a real cluster.
            return copy.deepcopy(current)
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            return self._remove(resource, updated)  # the last finalizer is gone: so is the object
        return self._store(resource, updated, "MODIFIED", current)

    def _store(self, resource: str, obj: Obj, event_type: str, previous: Obj | None) -> Obj:
        self._resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[resource][_key(obj)] = obj
        self._record(
            WatchEvent(
                self._resource_version,
                event_type,
                resource,
                obj["metadata"].get("namespace"),
                copy.deepcopy(obj),
                previous,
            )
        )
        return copy.deepcopy(obj)

    # -- watch ---------------------------------------------------------------------------------------

    def _record(self, event: WatchEvent) -> None:
        self._events.append(event)
        while len(self._events) > self._event_window:
            self._oldest_watchable = self._events.popleft().resource_version
        for subscriber in list(self._subscribers):
            if subscriber.wants(event):
                subscriber.deliver(event)

    def compact(self) -> int:
        """Forget the event history, as etcd compaction does: watches from older versions get 410 Gone."""
        with self._lock:
            self._events.clear()
            self._oldest_watchable = self._resource_version
            return self._oldest_watchable

    def watch(
        self,
        resource: str,
        namespace: str | None,
        since: int | None,
        deliver: Callable[[WatchEvent], None],
    ) -> tuple[list[WatchEvent], Subscription]:
        """Events after ``since`` (or synthetic ADDED events for every object when None) plus a
        subscription for later ones; taken under one lock so nothing falls between the two."""
        with self._lock:
            if since is None:
                backlog = [
                    WatchEvent(
                        self._resource_version, "ADDED", resource, key[0] or None, copy.deepcopy(obj), None
                    )
                    for key, obj in sorted(self._objects[resource].items())
                    if namespace is None or key[0] == namespace
                ]
            else:
                if since < self._oldest_watchable:
                    raise Gone(since, self._oldest_watchable)
                backlog = [
                    event
                    for event in self._events
                    if event.resource_version > since
                    and event.resource == resource
                    and namespace in (None, event.namespace)
                ]
            subscription = Subscription(self, resource, namespace, deliver)
            self._subscribers.append(subscription)
            return backlog, subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscribers:
                self._subscribers.remove(subscription)

    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)


def _scoped(resource: str, current: Obj, updated: Obj, *, status: bool) -> Obj:
    """What a write may change where a status subresource exists: the status alone through it, everything
    but the status through the object itself (the API server drops the rest without an error)."""
    if resource not in WITH_STATUS_SUBRESOURCE:
        return updated
    if status:
        _refuse(resource, updated, default_and_check_status(updated))
        scoped = copy.deepcopy(current)
        scoped["status"] = updated.get("status") or {}
        scoped["metadata"]["resourceVersion"] = updated.get("metadata", {}).get("resourceVersion")
        return scoped
    updated["status"] = copy.deepcopy(current.get("status") or {})
    return updated


def _refuse(resource: str, obj: Obj, problems: list[str]) -> None:
    if problems:
        name = obj["metadata"]["name"]
        raise KubeError(
            422,
            "Invalid",
            f'{KINDS[resource]} "{name}" is invalid: {"; ".join(problems)}',
            name=name,
            resource=resource,
        )


def _without_version(obj: Mapping[str, Any]) -> Obj:
    stripped = copy.deepcopy(dict(obj))
    stripped.get("metadata", {}).pop("resourceVersion", None)
    return stripped
