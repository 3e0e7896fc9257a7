"""The cluster's nodes, from the Kubernetes API: a list+watch-fed cache kept by a daemon thread.

The provider asks for the node inventory on every external-dns call; answering from a cache keeps
those calls free of Kubernetes round trips and lets ``/readyz`` say whether the inventory is usable.
The cache holds every node (not only ingress nodes): the provider must see all of the cluster's
servers to leave the others' aliases alone and to pick free ``--load-N-`` indices.

Nodes are handled as raw JSON dicts rather than client models: a list of a few thousand nodes then
costs a ``json.loads`` instead of a model tree per node, and only a few fields are read.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.selector import AnySelector
from landb_webhook.config import Settings
from landb_webhook.ports import Node, UpstreamError

log = structlog.get_logger(__name__)

UPSTREAM = "kubernetes"
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_MAX_REASON_LENGTH = 200
_SHORTEST_NORMAL_WATCH = 1.0
"""Seconds; a watch the server ends sooner than this is followed by a short pause."""


def api_client_for(kubeconfig: Path | None) -> client.ApiClient:
    """A dedicated ApiClient: the kubeconfig file if given, else in-cluster, else the default kubeconfig.

    A dedicated client (never the library's global default configuration) keeps the webhook's
    credentials out of reach of any other code in the process that uses the kubernetes package.
    """
    configuration = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def server_id_from_provider_id(provider_id: str | None) -> str | None:
    """``openstack:///<uuid>`` or ``openstack://<region>/<uuid>`` -> ``<uuid>``; anything else -> None."""
    if not provider_id or not provider_id.startswith("openstack://"):
        return None
    region_and_id = provider_id.removeprefix("openstack://")
    region, slash, server_id = region_and_id.rpartition("/")
    if not slash or "/" in region or not _UUID.fullmatch(server_id):
        return None
    return server_id


def internal_ipv4_addresses(addresses: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The node's InternalIP IPv4 addresses, sorted numerically; IPv6 and other types are ignored."""
    found: set[ipaddress.IPv4Address] = set()
    for address in addresses:
        if address.get("type") != "InternalIP":
            continue
        try:
            parsed = ipaddress.ip_address(str(address.get("address", "")))
        except ValueError:
            continue
        if isinstance(parsed, ipaddress.IPv4Address):
            found.add(parsed)
    return tuple(str(ip) for ip in sorted(found))


def epoch_seconds(timestamp: object) -> float | None:
    """An RFC 3339 API timestamp (``2026-11-23T11:36:02Z``) -> epoch seconds; anything else -> None."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The object's status condition of type ``kind``, if it reports one."""
    for found in status.get("conditions") or ():
        if isinstance(found, Mapping) and found.get("type") == kind:
            return found
    return None


class NodeClassifier:
    """Turns a node object into a ports.Node; decides which nodes take ingress traffic."""

    def __init__(self, ingress_selector: str, exclude_label: str) -> None:
        self.selector = AnySelector.parse(ingress_selector)
        self.exclude_label = exclude_label

    def is_ingress(self, labels: Mapping[str, str]) -> bool:
        excluded = bool(self.exclude_label) and self.exclude_label in labels
        return not excluded and self.selector.matches(labels)

    def node(self, obj: Mapping[str, Any]) -> Node:
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        labels = metadata.get("labels") or {}
        ready = condition(status, "Ready") or {}
        deletion = metadata.get("deletionTimestamp")
        return Node(
            name=str(metadata.get("name", "")),
            server_id=server_id_from_provider_id(spec.get("providerID")),
            internal_ips=internal_ipv4_addresses(status.get("addresses") or ()),
            is_ingress=self.is_ingress(labels),
            ready=ready.get("status") == "True",
            ready_changed_at=epoch_seconds(ready.get("lastTransitionTime")),
            deleting=bool(deletion),
            deleting_since=epoch_seconds(deletion),
            unschedulable=spec.get("unschedulable") is True,
        )


def json_body(response: Any) -> Any:
    """The decoded body of a call made with ``_preload_content=False``, its connection given back."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def upstream_error(exc: BaseException, action: str) -> UpstreamError:
    """Map a kubernetes-client or urllib3 failure to an UpstreamError; 4xx other than 429 is not retryable."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, ApiException):
        release_failed_response(exc)
        status = exc.status or 0
        message = _status_message(exc.body) or str(exc.reason or "")
        reason = f"{action}: HTTP {status} {message}".strip() if status else f"{action}: {message}"
        retryable = status in {0, 429} or status >= 500
        return UpstreamError(UPSTREAM, reason[:_MAX_REASON_LENGTH], retryable=retryable)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return UpstreamError(UPSTREAM, f"{action}: {type(exc).__name__}", retryable=True)
    return UpstreamError(UPSTREAM, f"{action}: {type(exc).__name__}: {exc}"[:_MAX_REASON_LENGTH])


def release_failed_response(exc: ApiException) -> None:
    """Close the connection of a failed call now rather than whenever the exception is collected.

    The client leaves a failed response checked out of its pool, reachable only from the frames of
    the exception's traceback; an error kept for a log line or a test would hold the socket open.
    """
    traceback.clear_frames(exc.__traceback__)


def _status_message(body: object) -> str:
    """The ``message`` of a Kubernetes Status body, if the body is one."""
    if not isinstance(body, str | bytes) or not body:
        return ""
    try:
        decoded = json.loads(body)
    except ValueError:
        return ""
    return str(decoded.get("message", "")) if isinstance(decoded, dict) else ""


class KubernetesNodeSource:
    """ports.NodeSource fed by list+watch in a daemon thread; call start() once, stop() at shutdown."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        ingress_selector: str,
        exclude_label: str,
        request_timeout: float = 5.0,
        watch_timeout: int = 60,
        list_page_size: int = 500,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        max_staleness: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Raises selector.InvalidSelector when ``ingress_selector`` is malformed.

        ``max_staleness`` (default: five watch periods) bounds how old the cache may be, counted from
        the last list or watch that ended well, before nodes() refuses to answer from it.
        """
        self._classifier = NodeClassifier(ingress_selector, exclude_label)
        self._core = client.CoreV1Api(api_client)
        self._request_timeout = request_timeout
        self._watch_timeout = watch_timeout
        self._list_page_size = list_page_size
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._max_staleness = 5.0 * watch_timeout if max_staleness is None else max_staleness
        self._clock = clock
        self._last_contact = -math.inf

        self._lock = threading.Lock()
        self._nodes: dict[str, Node] = {}
        self._snapshot: tuple[Node, ...] | None = None
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: watch.Watch | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, api_client: client.ApiClient | None = None
    ) -> KubernetesNodeSource:
        return cls(
            api_client or api_client_for(settings.kubeconfig),
            ingress_selector=settings.ingress_selector,
            exclude_label=settings.exclude_label,
            request_timeout=settings.upstream_timeout,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="landb-node-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the watch thread; returns once it has exited or ``timeout`` has passed."""
        self._stopping.set()
        thread = self._thread
        if thread is None:
            return
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline:
            # Repeated because the thread may be between creating a watch and opening its
            # connection, when Watch.stop() has nothing to close yet.
            current = self._watch
            if current is not None:
                current.stop()  # type: ignore[no-untyped-call]
            thread.join(0.05)

    def __enter__(self) -> KubernetesNodeSource:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # -- ports.NodeSource ------------------------------------------------------------------------

    def nodes(self) -> Sequence[Node]:
        """Every node of the cluster, sorted by name, as last seen by the watch."""
        if not self._synced.is_set():
            raise UpstreamError(UPSTREAM, "node inventory not synced yet")
        age = self._clock() - self._last_contact
        if age > self._max_staleness:
            # Aliases placed from a picture this old could land on nodes that are long gone.
            raise UpstreamError(
                UPSTREAM, f"node inventory is stale: no list or watch succeeded for {age:.0f} s"
            )
        with self._lock:
            if self._snapshot is None:
                self._snapshot = tuple(self._nodes[name] for name in sorted(self._nodes))
            return self._snapshot

    # -- the watch thread ------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        resource_version: str | None = None
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                started = time.monotonic()
                resource_version = self._watch_from(resource_version)
                self._last_contact = self._clock()
                failures = 0
                if time.monotonic() - started < _SHORTEST_NORMAL_WATCH:
                    # A server that ends watches at once would otherwise make this loop spin.
                    self._stopping.wait(self._backoff_initial)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                failures += 1
                delay = min(self._backoff_max, self._backoff_initial * 2 ** (failures - 1))
                reason = upstream_error(exc, "list/watch nodes").reason
                log.warning("relisting nodes", reason=reason, retry_in=delay, attempt=failures)
                resource_version = None
                self._stopping.wait(delay)

    def _relist(self) -> str:
        """List every node (in pages), replace the cache, return the list's resourceVersion."""
        objects: list[dict[str, Any]] = []
        continue_token: str | None = None
        while True:
            # Raw JSON (an urllib3 response) rather than models: see the module docstring.
            response: Any = self._core.list_node(
                limit=self._list_page_size,
                _continue=continue_token,
                _preload_content=False,
                _request_timeout=self._request_timeout,
            )
            page = json_body(response)
            objects.extend(page.get("items") or ())
            list_metadata = page.get("metadata") or {}
            continue_token = list_metadata.get("continue") or None
            if continue_token is None:
                break
        fresh = {node.name: node for node in map(self._classifier.node, objects)}
        with self._lock:
            previous = self._nodes
            self._nodes = fresh
            self._snapshot = None
        for name in sorted(previous.keys() - fresh.keys()):
            log.info("node removed", node=name)
        for name in sorted(fresh):
            self._log_change(previous.get(name), fresh[name])
        self._last_contact = self._clock()
        self._synced.set()
        return str(list_metadata.get("resourceVersion", ""))

    def _watch_from(self, resource_version: str) -> str:
        """Apply watch events until the server ends the watch; return the last resourceVersion seen."""
        current = watch.Watch()  # type: ignore[no-untyped-call]
        self._watch = current
        if self._stopping.is_set():
            return resource_version
        try:
            for event in current.stream(  # type: ignore[no-untyped-call]
                self._core.list_node,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                _request_timeout=(self._request_timeout, self._watch_timeout + self._request_timeout),
            ):
                raw = event["raw_object"]
                resource_version = str((raw.get("metadata") or {}).get("resourceVersion") or resource_version)
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._upsert(self._classifier.node(raw))
                elif event["type"] == "DELETED":
                    self._remove(self._classifier.node(raw).name)
        finally:
            self._watch = None
        return resource_version

    def _upsert(self, node: Node) -> None:
        with self._lock:
            previous = self._nodes.get(node.name)
            if previous == node:
                return
            self._nodes[node.name] = node
            self._snapshot = None
        self._log_change(previous, node)

    def _remove(self, name: str) -> None:
        with self._lock:
            if self._nodes.pop(name, None) is None:
                return
            self._snapshot = None
        log.info("node removed", node=name)

    @staticmethod
    def _log_change(previous: Node | None, node: Node) -> None:
        if previous is None:
            log.info(
                "node added",
                node=node.name,
                ingress=node.is_ingress,
                server_id=node.server_id,
                internal_ips=list(node.internal_ips),
                ready=node.ready,
            )
            return
        if previous.is_ingress != node.is_ingress:
            log.info("node ingress changed", node=node.name, ingress=node.is_ingress)
        health = ("ready", "deleting", "unschedulable")
        if any(getattr(previous, field) != getattr(node, field) for field in health):
            log.info(
                "node health changed",
                node=node.name,
                ready=node.ready,
                deleting=node.deleting,
                unschedulable=node.unschedulable,
            )
