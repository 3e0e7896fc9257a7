"""Properties of one inventory (provider/read/inventory.py): what it works out once answers as if worked out
every time."""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from landb_strategies import server_metadata

from landb_webhook.backends import Node, Server
from landb_webhook.landb.plan import ServerState, carriers
from landb_webhook.provider.read.inventory import Inventory

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


def _answers(inventory: Inventory, asked: list[set[str]]) -> tuple[object, ...]:
    return (
        inventory.server_states(),
        inventory.carriers(),
        inventory.frozen_carriers(),
        inventory.plain_aliases("cern.ch"),
        inventory.plain_aliases("example.org"),
        [inventory.ips_of(server_ids) for server_ids in asked],
        inventory.holders().editable,
        inventory.holders().pinned,
    )


def _copy(inventory: Inventory) -> Inventory:
    """The same facts in new objects, as the next read of an unchanged cluster gives them."""
    return Inventory(
        nodes=tuple(replace(node) for node in inventory.nodes),
        servers={
            name: Server(server.id, server.name, dict(server.metadata))
            for name, server in inventory.servers.items()
        },
        taken_at=1.0,
    )


@st.composite
def _changed(draw: st.DrawFn, inventory: Inventory) -> Inventory:
    """The same cluster read again with one fact changed, or none."""
    current = _copy(inventory)
    nodes, servers = list(current.nodes), dict(current.servers)
    change = draw(st.sampled_from(("none", "addresses", "health", "relabel", "metadata", "server", "gone")))
    if nodes and change in ("addresses", "health", "relabel"):
        i = draw(st.integers(0, len(nodes) - 1))
        node = nodes[i]
        nodes[i] = (
            replace(node, internal_ips=tuple(draw(_addresses)))
            if change == "addresses"
            else replace(node, ready=not node.ready)
            if change == "health"
            else replace(node, is_ingress=not node.is_ingress)
        )
    elif servers and change in ("metadata", "server", "gone"):
        name = draw(st.sampled_from(sorted(servers)))
        server = servers[name]
        if change == "metadata":
            servers[name] = replace(server, metadata=draw(server_metadata()).metadata)
        elif change == "server":
            servers[name] = replace(server, id=draw(st.sampled_from(SERVER_IDS)))
        else:
            del servers[name]
    return Inventory(nodes=tuple(nodes), servers=servers, taken_at=1.0)


@given(st.data(), st.lists(st.sets(st.sampled_from((*SERVER_IDS, "unknown"))), max_size=4))
def test_an_inventory_carrying_over_the_last_one_s_results_answers_as_worked_out_afresh(
    data: st.DataObject, asked: list[set[str]]
) -> None:
    """Unchanged, or changed in servers, metadata, addresses, node health or labels, or read from
    another cluster: the kept results are taken exactly when they still hold."""
    previous = data.draw(inventories())
    current = data.draw(st.one_of(_changed(previous), inventories()))
    _answers(previous, asked)  # everything worked out, to be carried over
    afresh = _answers(_copy(current), asked)
    current.carry_over(previous)
    assert _answers(current, asked) == afresh
    if current.nodes == previous.nodes and current.servers == previous.servers:
        assert current.carriers() is previous.carriers()  # the kept answer, not worked out again
    earlier = {(state.node_name, state.server_id): state for state in previous.server_states()}
    once = Counter(state.server_id for state in current.server_states())
    for state in current.server_states():
        if earlier.get((state.node_name, state.server_id)) == state:
            # an unchanged server keeps its state, and so its aliases as read, whatever else changed
            assert state is earlier[(state.node_name, state.server_id)]
            if (
                once[state.server_id] == 1
                and previous.holders().indexed.get(state.server_id) is state.aliases
            ):
                # ... and its place in the holder index, not read again
                for text, label, _ in state.aliases.editable_load():
                    assert (
                        current.holders().editable[label][state.server_id]
                        is previous.holders().editable[label][state.server_id]
                    ), text
