"""``landb-webhook status``'s DNS column, asked of a real DNS server (Knot) playing LanDB's publication."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import test_adopt_and_status
from kubernetes import client
from test_adopt_and_status import NAMESPACE, World, seed_messy

from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.adapters.state import ConfigMapStateStore
from landb_webhook.provider.watch.publications import STATE_KEY
from support.default_options import UPSTREAM_TIMEOUT
from support.knot import KnotServer, knot

world = test_adopt_and_status.world  # the fixture, shared with the status and adopt tests
__all__ = ["knot", "world"]

HOUR = 3600.0


def ips(world: World, *nodes: str) -> list[str]:
    """The InternalIPs of these nodes, as LanDB publishes them."""
    found = [world.sim.state.node(node) for node in nodes]
    return sorted(
        a["address"]
        for node in found
        if node
        for a in node["status"]["addresses"]
        if a["type"] == "InternalIP"
    )


def store_write_times(world: World, written: dict[str, float]) -> None:
    """What the webhook's applies stored: when each name was written."""
    api_client = api_client_for(world.config.kubeconfig)
    try:
        state = ConfigMapStateStore(
            client.CoreV1Api(api_client),
            namespace=NAMESPACE,
            name="landb-webhook-ownership-state",
            request_timeout=UPSTREAM_TIMEOUT,
        )
        state.save(
            {
                STATE_KEY: json.dumps(
                    {
                        "format": 2,
                        "sets": [[]],
                        "names": {n: {"at": at, "ips": 0, "was": 0} for n, at in written.items()},
                    }
                )
            }
        )
    finally:
        api_client.close()


def test_status_says_what_dns_answers_for_each_name_and_how_long_ago_it_was_written(
    world: World, knot: KnotServer
) -> None:
    nodes = seed_messy(world)
    now = round(time.time())
    store_write_times(world, {"app.cern.ch": now - 11 * 60, "dup.cern.ch": now - 2 * HOUR})
    knot.publish("app", ips(world, nodes["n0"], nodes["n1"], nodes["n2"]))
    knot.alias("dup", "somewhere.cern.ch.")
    flags = [*world.flags(), "--dns-watch", f"--dns-resolvers={knot.address}"]

    _, out, _ = world.run("status", "--output=json", flags=flags)
    names = {entry["name"]: entry["dns"] for entry in json.loads(out)["names"]}
    _, table, _ = world.run("status", flags=flags)
    rows: dict[str, str] = {}
    for line in table.splitlines():  # the names table: its rows come first
        if line.split() and line.split()[0].endswith(".cern.ch"):
            rows.setdefault(line.split()[0], line)

    assert (names["app.cern.ch"]["state"], names["app.cern.ch"]["written_at"]) == (
        "published",
        now - 660,
    )
    assert names["dup.cern.ch"] | {"written_at": None} == {
        "state": "conflict",
        "answer": "CNAME somewhere.cern.ch.",
        "written_at": None,
        "expected_ips": ips(world, nodes["n0"], nodes["n1"]),
    }
    assert names["stray.cern.ch"]["state"] == "pending"  # never written by the webhook: a first look
    assert names["www.cern.ch"] is None  # a plain alias only: LanDB's CNAME, not ours to judge
    assert f"DNS: asked {knot.address}" in table
    assert "NAME" in table and " DNS " in table and "WRITTEN" in table
    assert "published" in rows["app.cern.ch"] and "11 min ago" in rows["app.cern.ch"]
    assert "conflict (CNAME somewhere.cern.ch.)" in rows["dup.cern.ch"] and "2 h ago" in rows["dup.cern.ch"]


def test_a_resolver_that_never_answers_is_asked_one_question_and_every_name_is_unknown(
    world: World,
) -> None:
    seed_messy(world)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        code, out, _ = world.run(
            "status", "--output=json", flags=[*world.flags(), "--dns-watch", f"--dns-resolvers={address}"]
        )
        silent.setblocking(False)
        questions = 0
        while True:
            try:
                silent.recv(512)
            except BlockingIOError:
                break
            questions += 1

    report: dict[str, Any] = json.loads(out)
    judged = {entry["name"]: entry["dns"]["state"] for entry in report["names"] if entry["dns"]}
    assert set(judged.values()) == {"unknown"} and len(judged) == 4
    assert questions == 1
    assert code == test_adopt_and_status.EXIT_NEEDS_A_HUMAN  # as without DNS: a silent resolver adds nothing


def test_status_with_the_dns_watch_off_asks_nothing_and_says_so(world: World) -> None:
    seed_messy(world)

    _, table, _ = world.run("status")

    assert "DNS: not asked (LANDB_DNS_WATCH=false)" in table


def test_status_says_what_dns_answers_for_the_names_on_load_balancers(world: World) -> None:
    octavia, landb = world.sim.state.octavia, world.sim.dns
    shop = octavia.add_load_balancer("kube_service_shop", "188.184.30.10", tags=["landb-alias=shop"])
    landb.sync()  # LanDB published the shop's tag; the soon one is tagged after the sync
    octavia.add_load_balancer("kube_service_soon", "188.184.30.20", tags=["landb-alias=soon"])
    flags = [*world.flags(), "--dns-watch", f"--dns-resolvers={landb.address}"]

    _, out, _ = world.run("status", "--output=json", flags=flags)
    _, table, _ = world.run("status", flags=flags)

    by_lb = {lb["name"]: lb["dns"] for lb in json.loads(out)["load_balancers"]}
    assert by_lb["kube_service_shop"]["shop.cern.ch"] | {"written_at": None} == {
        "state": "published",
        "answer": "A 188.184.30.10",
        "written_at": None,
        "expected_ips": ["188.184.30.10"],
    }
    assert by_lb["kube_service_soon"]["soon.cern.ch"]["state"] == "pending"
    assert (
        f"  kube_service_shop ({shop}) 188.184.30.10: shop.cern.ch (published) (unclaimed: shop.cern.ch)"
        in (table.splitlines())
    )
    assert "soon.cern.ch (pending (no such name))" in table
