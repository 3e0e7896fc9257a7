"""The cluster's nodes, from the Kubernetes API: list+watch-fed caches kept by daemon threads.

The provider asks for the node inventory on every external-dns call; answering from a cache keeps
those calls free of Kubernetes round trips and lets ``/readyz`` say whether the inventory is usable.
The cache holds every node (not only ingress nodes): the provider must see all of the cluster's
servers to leave the others' aliases alone and to pick free ``--load-N-`` indices. With a pod selector,
a second cache follows the ingress controller's pods, so each node also says whether a Ready one runs
on it.
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import structlog
from kubernetes import client

from landb_webhook.adapters.kubeclient import (
    UPSTREAM,
    api_client_for,
    json_body,
    release_failed_response,
    upstream_error,
)
from landb_webhook.adapters.reflector import Reflector, WatchOptions
from landb_webhook.backends import Node
from landb_webhook.selector import AnySelector, LabelSelector

__all__ = [  # the client helpers are also used from here by the other Kubernetes adapters
    "UPSTREAM",
    "KubernetesNodeSource",
    "NodeClassifier",
    "api_client_for",
    "json_body",
    "release_failed_response",
    "upstream_error",
]

log = structlog.get_logger(__name__)

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


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
    """Turns a node object into a backends.Node; decides which nodes take ingress traffic."""

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


@dataclass(frozen=True)
class ControllerPod:
    """An ingress controller pod as far as node health cares: where it runs and whether it is Ready."""

    node: str
    ready: bool
    changed_at: float | None
    """When it stopped being Ready (or started being deleted); None when unknown."""


def controller_pod(obj: Mapping[str, Any]) -> ControllerPod:
    metadata = obj.get("metadata") or {}
    ready = condition(obj.get("status") or {}, "Ready") or {}
    deletion = metadata.get("deletionTimestamp")
    if deletion:  # a terminating pod takes no new traffic, whatever its condition still says
        return ControllerPod(
            str((obj.get("spec") or {}).get("nodeName") or ""), False, epoch_seconds(deletion)
        )
    return ControllerPod(
        node=str((obj.get("spec") or {}).get("nodeName") or ""),
        ready=ready.get("status") == "True",
        changed_at=epoch_seconds(ready.get("lastTransitionTime")),
    )


class KubernetesNodeSource:
    """backends.NodeSource fed by list+watch in daemon threads; call start() once, stop() at shutdown."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        ingress_selector: str,
        exclude_label: str,
        ingress_pod_selector: str = "",
        ingress_pod_namespace: str | None = None,
        watch: WatchOptions,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """Raises selector.InvalidSelector when a selector is malformed.

        nodes() refuses to answer from a cache older than ``watch.max_staleness``. An empty
        ``ingress_pod_selector`` means pods are not looked at.
        """
        self._classifier = NodeClassifier(ingress_selector, exclude_label)
        core = client.CoreV1Api(api_client)
        self._node_cache: Reflector[Node] = Reflector(
            "nodes", core.list_node, self._classifier.node, on_change=_log_node_change, options=watch
        )
        self._pod_cache: Reflector[ControllerPod] | None = None
        if ingress_pod_selector.strip():
            LabelSelector.parse(ingress_pod_selector)  # the API server takes one selector, no ';'
            list_pods: Callable[..., Any] = (
                core.list_pod_for_all_namespaces
                if ingress_pod_namespace is None
                else lambda **options: core.list_namespaced_pod(ingress_pod_namespace, **options)
            )
            self._pod_cache = Reflector(
                "ingress controller pods",
                list_pods,
                controller_pod,
                on_change=self._pod_changed,
                list_options={"label_selector": ingress_pod_selector},
                options=watch,
            )
        self._wall_clock = wall_clock
        self._pods_gone_at: dict[str, float] = {}
        """Node name -> when the cache last saw a controller pod leave it (to bridge a pod's replacement)."""
        self._lock = threading.Lock()
        self._snapshot: tuple[tuple[int, int], tuple[Node, ...]] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def _caches(self) -> list[Reflector[Any]]:
        return [self._node_cache, *([self._pod_cache] if self._pod_cache is not None else [])]

    def start(self) -> None:
        for cache in self._caches():
            cache.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the watch threads; returns once they have exited or ``timeout`` has passed."""
        for cache in self._caches():
            cache.stop(timeout)

    def __enter__(self) -> KubernetesNodeSource:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return any(cache.running for cache in self._caches())

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self._caches())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(cache.wait_synced(max(0.0, deadline - time.monotonic())) for cache in self._caches())

    def cache_age(self) -> float:
        """Seconds since the stalest of the watches last heard from the API server (infinity before)."""
        return max(cache.age() for cache in self._caches())

    # -- backends.NodeSource ------------------------------------------------------------------------

    def nodes(self) -> Sequence[Node]:
        """Every node of the cluster, sorted by name, as last seen by the watches."""
        nodes, node_version = self._node_cache.items()
        pods, pod_version = self._pod_cache.items() if self._pod_cache is not None else ({}, 0)
        with self._lock:
            if self._snapshot is not None and self._snapshot[0] == (node_version, pod_version):
                return self._snapshot[1]
            gone_at = dict(self._pods_gone_at)
        snapshot = tuple(nodes[name] for name in sorted(nodes))
        if self._pod_cache is not None:
            snapshot = tuple(_with_controller(node, pods.values(), gone_at) for node in snapshot)
        with self._lock:
            self._snapshot = ((node_version, pod_version), snapshot)
        return snapshot

    def _pod_changed(self, key: str, before: ControllerPod | None, after: ControllerPod | None) -> None:
        if before is not None and (after is None or after.node != before.node):
            with self._lock:
                self._pods_gone_at[before.node] = self._wall_clock()
        if after is not None and (before is None or before.ready != after.ready):
            log.info("ingress controller pod", pod=key, node=after.node, ready=after.ready)
        elif after is None and before is not None:
            log.info("ingress controller pod removed", pod=key, node=before.node)


def list_one_node(api_client: client.ApiClient, *, timeout: float) -> str:
    """One list of one node, so that a one-shot command stops at once, naming the API server, when it
    cannot be reached or refuses (rather than after the node watch's retries); returns its URL."""
    host = str(api_client.configuration.host)
    try:
        json_body(
            client.CoreV1Api(api_client).list_node(limit=1, _request_timeout=timeout, _preload_content=False)
        )
    except Exception as error:
        raise upstream_error(error, f"list nodes at {host}") from None
    return host


def _with_controller(node: Node, pods: Iterable[ControllerPod], gone_at: Mapping[str, float]) -> Node:
    """The node, saying whether a Ready controller pod runs on it and, if none does, since when."""
    mine = [pod for pod in pods if pod.node == node.name]
    if any(pod.ready for pod in mine):
        return replace(node, controller_ready=True)
    moments = [pod.changed_at for pod in mine if pod.changed_at is not None]
    if node.name in gone_at:
        moments.append(gone_at[node.name])
    return replace(node, controller_ready=False, controller_changed_at=max(moments, default=None))


def _log_node_change(name: str, previous: Node | None, node: Node | None) -> None:
    if node is None:
        log.info("node removed", node=name)
        return
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
