"""A name's whole life as DNS sees it, with the real external-dns and the simulator's LanDB DNS server.

The webhook writes the metadata at once; LanDB publishes it only at its next sync (every 15 minutes, here
forced with ``sync()``). So a new Ingress's name is first not answered (pending), then answers its ingress
nodes (published); a deleted Ingress's name still answers them until the next sync (stale), then is gone.
The webhook's DNS watcher, asking the simulated LanDB, says each of these states once in its log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
from ingress_world import TARGET_ANNOTATION, IngressWorld

from landb_simulator import Simulator
from support.kube_apiserver import KubeApiServer
from support.waiting import eventually

pytestmark = pytest.mark.e2e

NAME = "myapp.cern.ch"
WATCHER_DEADLINE = 60.0
"""Seconds for the watcher to notice: it looks again within 15 s, asks each name every recheck period."""


@pytest.fixture
def world(kube_apiserver: KubeApiServer, external_dns_binary: Path, tmp_path: Path) -> Iterator[IngressWorld]:
    with Simulator() as simulator:  # LanDB's 15-minute period: nothing is published unless a test syncs
        watch = {
            "LANDB_DNS_WATCH": "true",
            "LANDB_DNS_RESOLVERS": simulator.dns.address,
            "LANDB_DNS_RECHECK_PERIOD": "10",
        }
        running = IngressWorld(kube_apiserver, simulator, external_dns_binary, tmp_path, watch)
        try:
            yield running
        finally:
            running.close()


def answered(world: IngressWorld, name: str = NAME) -> list[str] | None:
    """The addresses the simulated LanDB answers for ``name``; None for NXDOMAIN."""
    query = dns.message.make_query(f"{name}.", "A")
    reply = dns.query.udp(query, world.sim.dns.host, port=world.sim.dns.port, timeout=5)
    if reply.rcode() == dns.rcode.NXDOMAIN:
        return None
    assert reply.rcode() == dns.rcode.NOERROR, dns.rcode.to_text(reply.rcode())
    return sorted(
        rdata.to_text() for rrset in reply.answer if rrset.rdtype == dns.rdatatype.A for rdata in rrset
    )


def watcher_lines(world: IngressWorld) -> list[dict[str, Any]]:
    """The watcher's log lines about the name, in order (JSON lines carrying ``dns``, its new state)."""
    entries = [json.loads(line) for line in world.webhook.log_text().splitlines() if line.startswith("{")]
    return [entry for entry in entries if entry.get("name") == NAME and "dns" in entry]


def watcher_says(world: IngressWorld, state: str) -> dict[str, Any]:
    """Wait (bounded) for the watcher's log line putting the name in ``state``; return it."""
    said: list[dict[str, Any]] = eventually(
        lambda: [entry for entry in watcher_lines(world) if entry["dns"] == state],
        what=f"the DNS watcher to say {NAME} is {state}",
        timeout=WATCHER_DEADLINE,
        every=0.2,
    )
    return said[0]


def converge(world: IngressWorld) -> None:
    result = world.run()
    assert result.returncode == 0, result.describe()
    assert world.run().up_to_date, world.results[-1].describe()


def test_an_ingress_name_goes_pending_published_stale_gone(world: IngressWorld) -> None:
    world.add_ingress("myapp", NAME, {TARGET_ANNOTATION: "192.0.2.80"})
    converge(world)
    assert world.servers_carrying("myapp") == world.ingress_server_ids()
    assert answered(world) is None  # pending: written, LanDB has not synced yet
    assert watcher_says(world, "pending")["event"].startswith(
        f"{NAME} does not resolve to its 3 ingress nodes"
    )

    world.sim.dns.sync()
    assert answered(world) == world.ingress_node_ips()  # published: every ingress node, round robin
    assert watcher_says(world, "published")["event"].startswith(f"{NAME} resolves to its 3 ingress nodes, ")

    world.delete_ingress("myapp")
    converge(world)
    assert world.servers_carrying("myapp") == set()
    assert answered(world) == world.ingress_node_ips()  # stale: removed, LanDB still answers
    watcher_says(world, "stale")

    world.sim.dns.sync()
    assert answered(world) is None  # gone
    watcher_says(world, "gone")
    assert [entry["dns"] for entry in watcher_lines(world)] == [
        "pending",
        "published",
        "stale",
        "gone",
    ]  # each said once, in order
