"""One consistent picture of the cluster: its nodes and the Nova servers behind them."""

from __future__ import annotations

import functools
import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from threading import Lock

from landb_webhook.landb.plan import ServerState
from landb_webhook.ports import Node, NodeSource, Server, ServerStore
from landb_webhook.provider.health import HealthPolicy, Verdict, judge


@functools.lru_cache(maxsize=65536)
def _ip_order(ip: str) -> tuple[int, int]:
    """Numeric order, parsed once per address: Records sorts the same node addresses for every alias."""
    address = ipaddress.ip_address(ip)
    return address.version, int(address)


def sorted_ips(ips: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(ips), key=_ip_order))


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[Node, ...]
    servers: Mapping[str, Server]
    """Node name -> its server, for the nodes whose server was found."""
    taken_at: float

    def server_states(self) -> list[ServerState]:
        return [
            ServerState(server.id, server.name, node.name, server.metadata)
            for node in self.nodes
            if (server := self.servers.get(node.name)) is not None
        ]

    def ingress_server_ids(self) -> frozenset[str]:
        return frozenset(
            self.servers[node.name].id for node in self.nodes if node.is_ingress and node.name in self.servers
        )

    def verdicts(self, policy: HealthPolicy, now: float) -> list[Verdict]:
        """The health verdict of every ingress node that has a server."""
        return [
            judge(node, policy, now) for node in self.nodes if node.is_ingress and node.name in self.servers
        ]

    def eligible_server_ids(self, verdicts: Iterable[Verdict]) -> frozenset[str]:
        return frozenset(self.servers[verdict.node].id for verdict in verdicts if verdict.carries)

    def ips_of(self, server_ids: Iterable[str]) -> tuple[str, ...]:
        wanted = set(server_ids)
        return sorted_ips(
            ip
            for node in self.nodes
            if (server := self.servers.get(node.name)) is not None and server.id in wanted
            for ip in node.internal_ips
        )

    def unresolved_nodes(self) -> list[str]:
        return sorted(node.name for node in self.nodes if node.name not in self.servers)


class InventoryReader:
    """Reads the inventory; lets AdjustEndpoints reuse the one Records just read in the same loop."""

    def __init__(
        self,
        nodes: NodeSource,
        servers: ServerStore,
        *,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nodes = nodes
        self._servers = servers
        self._max_age = max_age
        self._clock = clock
        self._last: Inventory | None = None
        self._lock = Lock()

    def fresh(self) -> Inventory:
        nodes = tuple(self._nodes.nodes())
        servers = self._servers.servers_for(nodes)
        inventory = Inventory(nodes=nodes, servers=dict(servers), taken_at=self._clock())
        with self._lock:
            self._last = inventory
        return inventory

    def recent(self) -> Inventory:
        with self._lock:
            last = self._last
        if last is not None and self._clock() - last.taken_at <= self._max_age:
            return last
        return self.fresh()
