"""Properties of one inventory (provider/inventory.py): what it works out once answers as if worked out
every time."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st
from landb_strategies import server_metadata

from landb_webhook.landb.plan import ServerState, carriers
from landb_webhook.ports import Node, Server
from landb_webhook.provider.inventory import Inventory

SERVER_IDS = ("s1", "s2", "s3", "s4")
_addresses = st.lists(st.sampled_from(("10.0.0.2", "10.0.0.10", "10.0.1.1", "192.168.0.9")), max_size=2)


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    """Nodes, some without a server, some sharing one (two nodes resolved to the same server)."""
    count = draw(st.integers(0, 5))
    nodes = tuple(
        Node(f"node-{i}", None, tuple(draw(_addresses)), is_ingress=draw(st.booleans())) for i in range(count)
    )
    servers = {}
    for node in nodes:
        server_id = draw(st.sampled_from((None, *SERVER_IDS)))
        if server_id is not None:
            servers[node.name] = Server(server_id, f"vm-{server_id}", draw(server_metadata()).metadata)
    return Inventory(nodes=nodes, servers=servers, taken_at=0.0)


@given(inventories(), st.lists(st.sets(st.sampled_from((*SERVER_IDS, "unknown"))), max_size=4))
def test_addresses_of_servers_are_their_nodes_addresses_in_numeric_order(
    inventory: Inventory, asked: list[set[str]]
) -> None:
    for server_ids in [*asked, *asked]:  # each set asked twice: the second answer is the kept one
        expected = {
            ip
            for node in inventory.nodes
            if node.name in inventory.servers and inventory.servers[node.name].id in server_ids
            for ip in node.internal_ips
        }
        answer = inventory.ips_of(server_ids)
        assert set(answer) == expected and len(answer) == len(expected)
        assert list(answer) == sorted(answer, key=ipaddress.ip_address)


@given(inventories())
def test_carriers_are_worked_out_from_the_inventory_s_servers(inventory: Inventory) -> None:
    read_afresh = [
        ServerState(s.server_id, s.server_name, s.node_name, dict(s.metadata))
        for s in inventory.server_states()
    ]
    assert inventory.carriers() == carriers(read_afresh)
    assert inventory.carriers() == carriers(read_afresh)  # the second answer is the kept one
