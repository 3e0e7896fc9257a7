"""The three strategies measured side by side, each behind Records / AdjustEndpoints / ApplyChanges.

- ``landb-webhook``: this project's provider, wired by its composition root (``wiring.build_provider``)
  to the real kubernetes client (watch-fed node cache, ownership ConfigMap) and openstacksdk.
- ``(a) draft``: the draft design (``design-draft.md``) as its author describes it: list the ingress
  nodes, list every server of the project and keep those named like them, ``N`` = position in the
  sorted list of ingress nodes, every server's values rebuilt, written one server after the other.
- ``(b) per-node lookup``: the same positional rule and sequential writes, but one anchored
  ``name`` lookup per ingress node instead of a project-wide listing.

Both references answer AdjustEndpoints exactly as this project does (one A record per alias, the
ingress nodes' addresses, read from one node listing) so that external-dns settles with them too, and
keep external-dns' TXT ownership records in memory (their designs store none): their counts therefore
include no ownership traffic, which ours does (the claims' writes; they are read from a watch-fed cache).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import openstack
import openstack.config
import openstack.connection
from kubernetes import client
from openstack.compute.v2.server import Server as SdkServer

from bench.baseline import positional_metadata, positional_writes
from landb_webhook.adapters.kubernetes import api_client_for, internal_ipv4_addresses, json_body
from landb_webhook.adapters.memory import InMemoryOwnershipStore
from landb_webhook.adapters.nova import list_servers
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.backends import Server
from landb_webhook.config import Settings
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.landb.names import InvalidName, dns_name_for, label_for
from landb_webhook.metrics import Metrics
from landb_webhook.provider.read.inventory import sorted_ips
from landb_webhook.provider.read.txt_registry import is_ownership_record
from landb_webhook.wiring import Adapters, build_provider

OURS = "landb-webhook"
DRAFT = "(a) draft: list project"
PER_NODE = "(b) per-node lookup"
STRATEGIES = (OURS, DRAFT, PER_NODE)

INGRESS_SELECTOR = "role=ingress"
DOMAIN = "cern.ch"
MAX_VALUE_LENGTH = 254


@dataclass(frozen=True)
class Endpoints:
    """Where the simulator is, for a strategy running in another process."""

    clouds_yaml: Path
    kubeconfig: Path
    cloud: str
    write_concurrency: int


class Strategy(Protocol):
    def records(self) -> list[Endpoint]: ...
    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]: ...
    def apply_changes(self, changes: Changes) -> None: ...
    def ingress_names(self) -> set[str]:
        """The ingress nodes the strategy would use now (to wait for a watch to catch up)."""
        ...

    def events_written(self) -> bool:
        """Every Kubernetes Event told so far has been written (true for a strategy that writes none)."""
        ...

    def close(self) -> None: ...


class Ours:
    def __init__(self, where: Endpoints) -> None:
        settings = Settings(
            os_cloud=where.cloud,
            kubeconfig=where.kubeconfig,
            ingress_selector=INGRESS_SELECTOR,
            ownership_store="configmap",
            ownership_namespace="default",
            write_concurrency=where.write_concurrency,
            dns_watch=False,  # DNS first's lookups are measured apart: bench/first_look.py
        )
        self._provider, self._adapters = build_provider(settings, Metrics.create(process_metrics=False))
        self.records = self._provider.records
        self.adjust_endpoints = self._provider.adjust_endpoints
        self.apply_changes = self._provider.apply_changes
        ownership = self._adapters.ownership
        if not self._adapters.nodes.wait_synced(30):
            raise RuntimeError("the node cache did not sync")
        if isinstance(ownership, ConfigMapOwnershipStore) and not ownership.wait_synced(30):
            raise RuntimeError("the ownership cache did not sync")

    @property
    def adapters(self) -> Adapters:
        return self._adapters

    def ingress_names(self) -> set[str]:
        return {node.name for node in self._adapters.nodes.nodes() if node.is_ingress}

    def events_written(self) -> bool:
        return self._adapters.events is None or self._adapters.events.idle()

    def close(self) -> None:
        self._adapters.close()


@dataclass(frozen=True)
class _IngressNode:
    name: str
    ips: tuple[str, ...]


ServerLookup = Callable[[openstack.connection.Connection, Sequence[str]], dict[str, Server]]


# Both read Nova's JSON as this project's adapter does (list_servers), not through SDK objects,
# so their cost is their requests, as in the compiled languages their authors wrote them in.


def list_project(conn: openstack.connection.Connection, names: Sequence[str]) -> dict[str, Server]:
    """(a): every server of the project, kept when named like an ingress node."""
    wanted = set(names)
    return {s.name: s for s in list_servers(conn, {}) if s.name in wanted}


def lookup_each(conn: openstack.connection.Connection, names: Sequence[str]) -> dict[str, Server]:
    """(b): one anchored name search per ingress node."""
    found: dict[str, Server] = {}
    for name in names:
        for server in list_servers(conn, {"name": f"^{re.escape(name)}$"}):
            if server.name == name:
                found[name] = server
    return found


class Positional:
    """``N`` = position in the sorted ingress nodes; values rebuilt; servers written one by one."""

    def __init__(self, where: Endpoints, lookup: ServerLookup) -> None:
        loader = openstack.config.OpenStackConfig(config_files=[str(where.clouds_yaml)], load_envvars=False)
        self._conn = openstack.connection.Connection(config=loader.get_one(cloud=where.cloud))
        self._api_client = api_client_for(where.kubeconfig)
        self._core = client.CoreV1Api(self._api_client)
        self._lookup = lookup
        self._claims = InMemoryOwnershipStore()

    def _ingress(self) -> list[_IngressNode]:
        listing = json_body(self._core.list_node(label_selector=INGRESS_SELECTOR, _preload_content=False))
        nodes = [
            _IngressNode(
                item["metadata"]["name"], internal_ipv4_addresses(item.get("status", {}).get("addresses", ()))
            )
            for item in listing.get("items") or ()
        ]
        return sorted(nodes, key=lambda node: node.name)

    def _state(self) -> tuple[list[_IngressNode], dict[str, Server]]:
        nodes = self._ingress()
        return nodes, self._lookup(self._conn, [node.name for node in nodes])

    def events_written(self) -> bool:
        return True

    def ingress_names(self) -> set[str]:
        return {node.name for node in self._ingress()}

    def records(self) -> list[Endpoint]:
        nodes, servers = self._state()
        targets: dict[str, list[str]] = {}
        for node in nodes:
            server = servers.get(node.name)
            if server is None:
                continue
            for token in read_aliases(server.metadata).load_tokens():
                targets.setdefault(token.label, []).extend(node.ips)
        aliases = [
            Endpoint(dns_name_for(label, DOMAIN), "A", sorted_ips(ips))
            for label, ips in sorted(targets.items())
        ]
        return [*aliases, *self._claims.records()]

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        targets = sorted_ips(ip for node in self._ingress() for ip in node.ips)
        adjusted: dict[str, Endpoint] = {}
        passed = []
        for endpoint in endpoints:
            if is_ownership_record(endpoint):
                passed.append(endpoint)
                continue
            try:
                label = label_for(endpoint.dns_name, DOMAIN)
            except InvalidName:
                continue
            adjusted.setdefault(label, Endpoint(endpoint.dns_name, "A", targets, labels=endpoint.labels))
        return [*(adjusted[label] for label in sorted(adjusted)), *passed]

    def apply_changes(self, changes: Changes) -> None:
        nodes, servers = self._state()
        aliases = {
            token.label
            for server in servers.values()
            for token in read_aliases(server.metadata).load_tokens()
        }

        def labels(endpoints: Sequence[Endpoint]) -> set[str]:
            return {label_for(e.dns_name, DOMAIN) for e in endpoints if not is_ownership_record(e)}

        aliases -= labels(changes.delete) | labels(changes.update_old)
        aliases |= labels(changes.create) | labels(changes.update_new)
        claims = [e for e in (*changes.create, *changes.update_new) if is_ownership_record(e)]
        gone = [e for e in (*changes.delete, *changes.update_old) if is_ownership_record(e)]
        self._claims.apply(claims, [])

        names = [node.name for node in nodes if node.name in servers]
        current = {name: dict(servers[name].metadata) for name in names}
        wanted = positional_metadata(names, sorted(aliases), MAX_VALUE_LENGTH)
        for name, (upserts, deletes) in positional_writes(current, wanted).items():
            server = SdkServer.existing(id=servers[name].id)
            if upserts:
                server.set_metadata(self._conn.compute, metadata=upserts)
            for key in deletes:
                server.delete_metadata_item(self._conn.compute, key)
        self._claims.apply([], [e for e in gone if e.key not in {c.key for c in claims}])

    def close(self) -> None:
        self._conn.close()
        self._api_client.close()


def build(kind: str, where: Endpoints) -> Strategy:
    if kind == OURS:
        return Ours(where)
    if kind == DRAFT:
        return Positional(where, list_project)
    if kind == PER_NODE:
        return Positional(where, lookup_each)
    raise ValueError(f"unknown strategy {kind!r}")
