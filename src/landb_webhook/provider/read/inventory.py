"""One consistent picture of the cluster: its nodes and the Nova servers behind them."""

from __future__ import annotations

import functools
import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from threading import Lock
from typing import NamedTuple

from landb_webhook.backends import Node, NodeSource, Server, ServerStore
from landb_webhook.landb.holders import Holders
from landb_webhook.landb.plan import ServerState, carriers, carriers_since, frozen_carriers, plain_aliases
from landb_webhook.provider.read.departed import Remembered
from landb_webhook.provider.read.health import HealthPolicy, Verdict, judge


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
    departed: tuple[tuple[Remembered, Server], ...] = ()
    """Servers whose node left the cluster, still holding owned tokens (provider.departed): they are among
    the server states and carriers (LanDB still publishes them), never ingress, eligible or a node."""
    departed_gone: frozenset[str] = frozenset()
    """Remembered server ids Nova answered 404 for."""

    @functools.cached_property
    def _server_inputs(self) -> tuple[tuple[str, Server], ...]:
        """Everything the server states (and so carriers and plain aliases) are worked out from."""
        return (
            *((node.name, server) for node, server in self._nodes_with_servers()),
            *((gone.node_name, server) for gone, server in self.departed),
        )

    @functools.cached_property
    def _address_inputs(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Everything ``ips_of`` answers from: each server's id and its node's addresses."""
        return (
            *((server.id, node.internal_ips) for node, server in self._nodes_with_servers()),
            *((server.id, gone.internal_ips) for gone, server in self.departed),
        )

    def _nodes_with_servers(self) -> Iterable[tuple[Node, Server]]:
        return ((node, server) for node in self.nodes if (server := self.servers.get(node.name)) is not None)

    def carry_over(self, previous: Inventory) -> None:
        """Take what ``previous`` already worked out from the same inputs, rather than work it out again.

        In a settled cluster every Records reads the same servers and nodes: comparing the inputs costs a
        fraction of a millisecond, reading 300 servers' aliases and their carriers tens of milliseconds.
        Each kept result is taken only when exactly the inputs it is computed from are equal.
        """
        for inputs, results in (
            ("_server_inputs", _SERVER_RESULTS),
            ("_address_inputs", _ADDRESS_RESULTS),
        ):
            if getattr(previous, inputs) == getattr(self, inputs):
                kept = previous.__dict__
                self.__dict__.update({name: kept[name] for name in results if name in kept})
        if "_server_states" not in self.__dict__ and "_server_states" in previous.__dict__:
            # Something changed, most often a few servers' metadata (our own writes): every other server
            # keeps its state, and with it its aliases as already read.
            earlier = {(state.node_name, state.server_id): state for state in previous._server_states}
            self.__dict__["_server_states"] = self._states_keeping(earlier)
            if "_carriers" not in self.__dict__ and "_carriers" in previous.__dict__:
                self.__dict__["_carriers"] = carriers_since(
                    previous._carriers, previous._server_states, self._server_states
                )
        if "_holders" not in self.__dict__:
            # Made only when an apply plans, from the last one made: only the servers changed since then
            # are read again (landb.holders).
            self.__dict__["_holders_basis"] = previous.__dict__.get("_holders", previous._holders_basis)

    @functools.cached_property
    def _server_states(self) -> tuple[ServerState, ...]:
        """Built once per inventory: each state reads its server's aliases once (ServerState.aliases)."""
        return self._states_keeping({})

    def _states_keeping(self, kept: Mapping[tuple[str, str], ServerState]) -> tuple[ServerState, ...]:
        """A state per server; one of ``kept`` (by node name and server id) where its server is unchanged."""
        states = []
        for node_name, server in self._server_inputs:
            state = kept.get((node_name, server.id))
            if state is None or state.server_name != server.name or state.metadata != server.metadata:
                state = ServerState(server.id, server.name, node_name, server.metadata)
            states.append(state)
        return tuple(states)

    def server_states(self) -> list[ServerState]:
        return list(self._server_states)

    @property
    def _holders_basis(self) -> Holders:
        """The last holder index made before this inventory (an empty one at start)."""
        basis: Holders = self.__dict__.get("_holders_basis", _NO_HOLDERS)
        return basis

    @functools.cached_property
    def _holders(self) -> Holders:
        return self._holders_basis.of({state.server_id: state.aliases for state in self._server_states})

    def holders(self) -> Holders:
        """Who holds which alias among the server states, for planning; made from the last index made,
        reading again only the servers whose aliases changed since. Shared: never modify it."""
        return self._holders

    @functools.cached_property
    def _carriers(self) -> dict[str, set[str]]:
        return carriers(self._server_states)

    def carriers(self) -> dict[str, set[str]]:
        """``landb.plan.carriers`` of this inventory, worked out once: Records and AdjustEndpoints
        both need it, and it has one entry per alias and carrier. Shared: never modify it."""
        return self._carriers

    @functools.cached_property
    def _frozen_carriers(self) -> dict[str, set[str]]:
        return frozen_carriers(self._server_states)

    def frozen_carriers(self) -> dict[str, set[str]]:
        """``landb.plan.frozen_carriers`` of this inventory, worked out once. Shared: never modify it."""
        return self._frozen_carriers

    @functools.cached_property
    def _plain_aliases(self) -> dict[str, dict[str, set[str]]]:
        """By DNS domain (one in practice)."""
        return {}

    def plain_aliases(self, domain: str) -> dict[str, set[str]]:
        """``landb.plan.plain_aliases`` of this inventory, worked out once. Shared: never modify it."""
        answer = self._plain_aliases.get(domain)
        if answer is None:
            answer = self._plain_aliases[domain] = plain_aliases(self._server_states, domain)
        return answer

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

    @functools.cached_property
    def _ips_by_server(self) -> Mapping[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {}
        for server_id, ips in self._address_inputs:
            found.setdefault(server_id, []).extend(ips)
        return {server_id: tuple(ips) for server_id, ips in found.items()}

    @functools.cached_property
    def _sorted_ips_of(self) -> dict[frozenset[str], tuple[str, ...]]:
        """Answers by set of servers: most aliases of a cluster share the same carriers."""
        return {}

    def ips_of(self, server_ids: Iterable[str]) -> tuple[str, ...]:
        wanted = frozenset(server_ids)
        answer = self._sorted_ips_of.get(wanted)
        if answer is None:
            by_server = self._ips_by_server
            answer = sorted_ips(ip for server_id in wanted for ip in by_server.get(server_id, ()))
            self._sorted_ips_of[wanted] = answer
        return answer

    def unresolved_nodes(self) -> list[str]:
        return sorted(node.name for node in self.nodes if node.name not in self.servers)


_SERVER_RESULTS = ("_server_states", "_carriers", "_frozen_carriers", "_plain_aliases", "_holders")
_NO_HOLDERS = Holders()
_ADDRESS_RESULTS = ("_ips_by_server", "_sorted_ips_of")


class Listing(NamedTuple):
    nodes: tuple[Node, ...]
    servers: Mapping[str, Server]
    """Node name -> its server (ServerStore.servers_for)."""


class InventoryReader:
    """Reads the inventory; lets AdjustEndpoints reuse the one Records just read in the same loop."""

    def __init__(
        self,
        nodes: NodeSource,
        servers: ServerStore,
        *,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
        departed: Callable[[], Iterable[Remembered]] = tuple,
    ) -> None:
        """``departed``: the remembered servers to look for beyond the nodes' own (provider.departed)."""
        self._departed = departed
        self._nodes = nodes
        self._servers = servers
        self._max_age = max_age
        self._clock = clock
        self._last: Inventory | None = None
        self._lock = Lock()

    def listing(self) -> Listing:
        """The nodes and Nova's listing of their servers: the inventory's one round trip, which may be sent
        together with other reads (provider.together); ``fresh`` completes it."""
        nodes = tuple(self._nodes.nodes())
        return Listing(nodes, self._servers.servers_for(nodes))

    def fresh(self, listing: Listing | None = None) -> Inventory:
        """The inventory of ``listing`` (read now if None), with the departed servers it does not show
        looked up one by one: who they are comes from the state store, which may have been read beside
        the listing."""
        nodes, servers = listing if listing is not None else self.listing()
        present = {server.id for server in servers.values()}
        departed: list[tuple[Remembered, Server]] = []
        gone: set[str] = set()
        for remembered in self._departed():
            if remembered.server_id in present:
                continue
            server = self._servers.server(remembered.server_id)
            if server is None:
                gone.add(remembered.server_id)
            else:
                departed.append((remembered, server))
        inventory = Inventory(
            nodes=nodes,
            servers=dict(servers),
            taken_at=self._clock(),
            departed=tuple(departed),
            departed_gone=frozenset(gone),
        )
        with self._lock:  # taking over costs a comparison of the inputs: done before anyone else sees it
            if self._last is not None:
                inventory.carry_over(self._last)
            self._last = inventory
        return inventory

    def wrote(self, read: Inventory, metadata: Mapping[str, Mapping[str, str]]) -> None:
        """The writes of an apply planned on ``read`` landed: ``metadata`` is server id -> its metadata as
        they left it. The next read finds those servers' values already parsed and indexed (a server whose
        metadata is then exactly this keeps its state), so the loop after a write reads only what someone
        else changed: after a first publish of 1,000 names on 500 nodes that loop parsed and indexed
        500,000 tokens, seconds of CPU. Done here, by the apply; nothing if another read came since."""
        if not metadata:
            return
        with self._lock:
            if self._last is not read:
                return
        servers = {
            node: replace(server, metadata=metadata[server.id]) if server.id in metadata else server
            for node, server in read.servers.items()
        }
        departed = tuple(
            (gone, replace(server, metadata=metadata[server.id]) if server.id in metadata else server)
            for gone, server in read.departed
        )
        written = replace(read, servers=servers, departed=departed)
        written.carry_over(read)
        written.carriers()
        written.holders()
        with self._lock:
            if self._last is read:
                self._last = written

    def recent(self) -> Inventory:
        with self._lock:
            last = self._last
        if last is not None and self._clock() - last.taken_at <= self._max_age:
            return last
        return self.fresh()
