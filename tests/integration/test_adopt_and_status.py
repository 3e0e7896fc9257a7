"""``landb-webhook status`` and ``adopt`` as an operator runs them: the real command line, the real
kubernetes and openstacksdk clients, the simulator over HTTP. The simulator records every call, so
"read-only" and "writes nothing" are checked on the wire.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.demo import demo_instructions
from landb_simulator.external_dns import ownership_record, plan
from landb_simulator.kube_store import NODES
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore, decode_record
from landb_webhook.cli import main
from landb_webhook.config import Settings
from landb_webhook.embedding import (
    EXIT_CANNOT_START,
    EXIT_INVALID_SETTINGS,
    EXIT_NEEDS_A_HUMAN,
    EXIT_READER_LEFT,
)
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.metrics import Metrics
from landb_webhook.provider import ApplyError, LandbProvider
from landb_webhook.wiring import Adapters, build_provider
from support.default_options import UPSTREAM_TIMEOUT, watch_options
from support.logging_state import restored_logging

OWNER = "test-cluster"
OTHER_OWNER = "other-cluster"
NAMESPACE = "default"
CONFIGMAP = "landb-webhook-ownership"
READS = {"GET", "HEAD"}


@dataclass
class World:
    sim: Simulator
    config: ClientConfig
    nodes: list[str]
    capsys: pytest.CaptureFixture[str]

    def server_id(self, node: str) -> str:
        return next(s.id for s in self.sim.state.servers() if s.name == node)

    def set_aliases(self, node: str, **keys: str) -> None:
        """Set ``landb-alias*`` keys by hand, as a person or the landb-alias-controller did."""
        server_id = self.server_id(node)
        self.sim.state.set_metadata_direct(server_id, {**self.sim.state.metadata(server_id), **keys})

    def flags(self) -> list[str]:
        return [
            f"--os-cloud={self.config.cloud_name}",
            f"--kubeconfig={self.config.kubeconfig}",
            f"--ownership-namespace={NAMESPACE}",
            "--no-dns-watch",  # status asks no DNS here: tests/integration/test_status_dns.py does
        ]

    def run(self, command: str, *args: str, flags: list[str] | None = None) -> tuple[int, str, str]:
        """``landb-webhook <command> <args>`` with the simulator's settings: exit code, stdout, stderr."""
        self.capsys.readouterr()
        with restored_logging():
            code = main([command, *(self.flags() if flags is None else flags), *args])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def aliases(self) -> dict[str, dict[str, int]]:
        """node -> label -> N, of every ``--load-N-`` alias (a label held twice keeps its last N)."""
        return {
            node: {
                t.label: t.index
                for t in read_aliases(self.sim.state.metadata(self.server_id(node))).load_tokens()
            }
            for node in self.nodes
        }

    def claims(self) -> dict[str, Endpoint]:
        """TXT name -> the ownership record stored in the webhook's ConfigMap."""
        configmap = self.sim.state.configmap(NAMESPACE, CONFIGMAP)
        records = [decode_record(value) for value in ((configmap or {}).get("data") or {}).values()]
        return {record.dns_name: record for record in records}

    def store_claims(self, *claims: Endpoint) -> None:
        api_client = api_client_for(self.config.kubeconfig)
        try:
            store = ConfigMapOwnershipStore(
                client.CoreV1Api(api_client),
                namespace=NAMESPACE,
                name=CONFIGMAP,
                request_timeout=UPSTREAM_TIMEOUT,
                watch=watch_options(),
            )
            store.apply(list(claims), [])
        finally:
            api_client.close()

    def writes(self) -> list[Any]:
        """Every answered request that could change something, Keystone's token requests aside."""
        return [
            call
            for call in self.sim.state.api_calls()
            if call.method not in READS and not call.path.endswith("/auth/tokens")
        ]


@pytest.fixture
def world(
    simulator: Simulator,
    sim_clients: ClientConfig,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> World:
    for name in [name for name in os.environ if name.startswith("LANDB_")]:
        monkeypatch.delenv(name)
    nodes = seed_cluster(simulator.state, ingress_nodes=3, workers=1)
    return World(simulator, sim_clients, nodes, capsys)


# -- a seeded messy cluster ---------------------------------------------------------------------------


def seed_messy(world: World) -> dict[str, Any]:
    """Three ingress nodes, a worker, a node without a server, and every kind of trouble status reports."""
    n0, n1, n2, worker = world.nodes
    world.set_aliases(
        n0, **{"landb-alias": "app--load-0-,dup--load-0-", "landb-alias1": "eth0.cern.ch:old--load-7-"}
    )
    world.set_aliases(n1, **{"landb-alias": "app--load-1-,dup--load-0-"})
    world.set_aliases(n2, **{"landb-alias": "app--load-2-,www", **{f"user-key-{i}": "x" for i in range(3)}})
    world.set_aliases(worker, **{"landb-alias": "stray--load-3-"})
    world.sim.state.add_node(
        "ghost-node",
        labels={"role": "ingress"},
        provider_id="openstack:///00000000-0000-4000-8000-000000000000",
    )
    world.sim.state.set_quota(12)  # n2 holds 7 CERN keys + landb-alias + 3 of its own = 11 > 80% of 12
    world.sim.state.set_node_ready(n1, False)
    world.sim.state.kube.mutate(NODES, None, n2, lambda node: node["spec"].update(unschedulable=True))
    world.store_claims(
        ownership_record(Endpoint("app.cern.ch", "A", labels=(("resource", "ingress/default/app"),)), OWNER)
    )
    return {"n0": n0, "n1": n1, "n2": n2, "worker": worker}


def test_status_json_reports_every_name_and_everything_that_needs_a_human(world: World) -> None:
    nodes = seed_messy(world)
    world.sim.state.reset_api_calls()

    code, out, _ = world.run("status", "--output=json")

    assert code == EXIT_NEEDS_A_HUMAN
    report = json.loads(out)
    names = {entry["name"]: entry for entry in report["names"]}
    assert sorted(names) == ["app.cern.ch", "dup.cern.ch", "old.cern.ch", "stray.cern.ch", "www.cern.ch"]
    www = names["www.cern.ch"]
    assert (www["carriers"], www["plain_alias_nodes"], www["problems"]) == ([], [nodes["n2"]], [])
    assert [n for n, entry in names.items() if entry["plain_alias_nodes"]] == ["www.cern.ch"]

    app = names["app.cern.ch"]
    assert app["label"] == "app"
    assert app["claimed"] is True and app["owners"] == [OWNER]
    assert app["resources"] == ["ingress/default/app"]
    assert report["read_from"] == {
        "ingress_selector": "role=ingress",
        "registry": "txt",
        "namespace": NAMESPACE,
        "namespace_source": "LANDB_OWNERSHIP_NAMESPACE",
        "configmap": CONFIGMAP,
        "writer_lease": f"{NAMESPACE}/landb-webhook: nobody: no Lease yet (no webhook has run with leader "
        "election)",
        "load_balancers": "on",
    }
    assert [
        (c["node"], c["index"], c["key"], c["frozen"], c["ingress"], c["ready"]) for c in app["carriers"]
    ] == [
        (nodes["n0"], 0, "landb-alias", False, True, True),
        (nodes["n1"], 1, "landb-alias", False, True, False),
        (nodes["n2"], 2, "landb-alias", False, True, True),
    ]
    assert app["carriers"][0]["server_id"] == world.server_id(nodes["n0"])
    assert app["problems"] == []

    assert names["dup.cern.ch"]["claimed"] is False and names["dup.cern.ch"]["owners"] == []
    assert [c["node"] for c in names["dup.cern.ch"]["carriers"]] == [nodes["n0"], nodes["n1"]]
    assert len(names["dup.cern.ch"]["problems"]) == 1 and "N=0" in names["dup.cern.ch"]["problems"][0]
    old = names["old.cern.ch"]["carriers"]
    assert [(c["node"], c["index"], c["key"], c["frozen"]) for c in old] == [
        (nodes["n0"], 7, "landb-alias1", True)
    ]
    assert [(c["node"], c["ingress"]) for c in names["stray.cern.ch"]["carriers"]] == [
        (nodes["worker"], False)
    ]

    assert report["metadata_key_quota"] == 12
    assert report["servers_over_key_quota"] == [
        {
            "node": nodes["n2"],
            "server_id": world.server_id(nodes["n2"]),
            "server_name": nodes["n2"],
            "keys": 11,
            "quota": 12,
        }
    ]
    assert report["nodes_without_server"] == ["ghost-node"]
    assert report["aliases_on_non_ingress_nodes"] == [
        {
            "name": "stray.cern.ch",
            "node": nodes["worker"],
            "server_id": world.server_id(nodes["worker"]),
            "index": 3,
            "key": "landb-alias",
            "frozen": False,
            "ingress": False,
            "ready": True,
        }
    ]
    assert report["duplicate_indices"] == [
        {"name": "dup.cern.ch", "index": 0, "nodes": [nodes["n0"], nodes["n1"]]}
    ]
    assert report["frozen_forms"] == [
        {
            "node": nodes["n0"],
            "server_id": world.server_id(nodes["n0"]),
            "key": "landb-alias1",
            "value": "eth0.cern.ch:old--load-7-",
        }
    ]
    nodes_seen = {entry["name"]: entry for entry in report["nodes"]}
    assert nodes_seen["ghost-node"] == {
        "name": "ghost-node",
        "ingress": True,
        "ready": True,
        "deleting": False,
        "unschedulable": False,
        "problems": [],
        "internal_ips": [],
        "server_id": None,
        "server_name": None,
    }
    assert nodes_seen[nodes["worker"]]["ingress"] is False
    assert (nodes_seen[nodes["n1"]]["ready"], nodes_seen[nodes["n1"]]["unschedulable"]) == (False, False)
    assert (nodes_seen[nodes["n2"]]["ready"], nodes_seen[nodes["n2"]]["unschedulable"]) == (True, True)
    needs = report["needs_human"]
    # quota, the ghost node, the NotReady carrier, the duplicate N, the stray alias; not the frozen form,
    # not the cordoned node
    assert len(needs) == 5, needs
    assert f"node {nodes['n1']} is NotReady and still carries app, dup" in " ".join(needs)
    assert any(nodes["n2"] in line and "11 of its 12" in line for line in needs)
    assert any("ghost-node" in line for line in needs)
    assert any(line.startswith("dup.cern.ch:") for line in needs)
    assert any(line.startswith("stray.cern.ch:") and nodes["worker"] in line for line in needs)
    assert world.writes() == [], "status must only read"


def test_status_table_shows_the_same_findings_in_key_lines(world: World) -> None:
    nodes = seed_messy(world)
    world.sim.state.reset_api_calls()

    code, out, _ = world.run("status")

    assert code == EXIT_NEEDS_A_HUMAN
    lines = out.splitlines()
    assert lines[:4] == [
        "Ingress selector: role=ingress   Registry: txt",
        f"Claims: ConfigMap {NAMESPACE}/{CONFIGMAP} (namespace from LANDB_OWNERSHIP_NAMESPACE)",
        "Writer lease: default/landb-webhook: nobody: no Lease yet (no webhook has run with leader election)",
        "Load balancers: on",
    ]
    assert lines[4] == "DNS: not asked (LANDB_DNS_WATCH=false)"
    assert lines[6].split() == ["NAME", "CLAIM", "INGRESS", "CARRIERS"]
    row = next(line for line in lines if line.startswith("app.cern.ch "))
    assert f"owner {OWNER}  ingress/default/app" in row
    assert f"{nodes['n0']} N=0, {nodes['n1']} N=1 (not Ready), {nodes['n2']} N=2" in row
    assert f"{nodes['n0']} N=7 (landb-alias1)" in next(
        line for line in lines if line.startswith("old.cern.ch ")
    )
    assert "unclaimed" in next(line for line in lines if line.startswith("dup.cern.ch "))
    assert f"{nodes['n2']} (plain CNAME)" in next(line for line in lines if line.startswith("www.cern.ch "))
    assert f"{nodes['worker']} N=3 (not ingress)" in next(
        line for line in lines if line.startswith("stray.cern.ch ")
    )
    assert "Servers over 80% of their key quota (12 keys):" in lines
    assert f"  {nodes['n2']} (node {nodes['n2']}): 11 keys" in lines
    assert "Nodes without a server:" in lines and "  ghost-node" in lines
    assert f"  stray.cern.ch on {nodes['worker']}: N=3 in landb-alias" in lines
    assert f"  dup.cern.ch N=0 on {nodes['n0']}, {nodes['n1']}" in lines
    assert f"  {nodes['n0']} landb-alias1 = eth0.cern.ch:old--load-7-" in lines
    assert [line.split()[:3] for line in lines if line.startswith(nodes["n1"] + " ")] == [
        [nodes["n1"], "ingress", "NotReady"]
    ]
    assert [line.split()[:3] for line in lines if line.startswith(nodes["n2"] + " ")] == [
        [nodes["n2"], "ingress", "Ready,cordoned"]
    ]
    assert "Needs a human (5):" in lines
    assert world.writes() == []


def test_status_into_a_reader_that_left_stops_quietly(world: World) -> None:
    controller_aliases(world)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head, less) has gone before the first line is written
    try:
        process = subprocess.run(
            [sys.executable, "-m", "landb_webhook", "status", *world.flags()],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)

    assert (process.returncode, process.stderr) == (EXIT_READER_LEFT, "")


def test_status_of_a_tidy_cluster_exits_zero(world: World) -> None:
    for index, node in enumerate(world.nodes[:3]):
        world.set_aliases(node, **{"landb-alias": f"app--load-{index}-"})

    code, out, _ = world.run("status")

    assert code == 0
    assert "Nothing needs a human." in out.splitlines()
    assert "Aliases on non-ingress nodes: none" in out.splitlines()


def test_status_exits_one_when_the_cloud_cannot_be_read(world: World) -> None:
    world.sim.state.inject_fault(api="nova", times=None)

    code, out, err = world.run("status", "--output=json")

    assert code == EXIT_CANNOT_START
    assert out == ""
    assert "status: cannot talk to the cluster or the cloud: nova" in err


def test_status_stops_at_once_naming_an_api_server_it_cannot_reach(world: World, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    kubeconfig = yaml.safe_load(world.config.kubeconfig.read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(yaml.safe_dump(kubeconfig))

    code, out, err = world.run(
        "status", flags=[f"--os-cloud={world.config.cloud_name}", f"--kubeconfig={unreachable}"]
    )

    assert (code, out) == (EXIT_CANNOT_START, "")
    lines = err.splitlines()
    assert lines[-1] == (
        "landb-webhook status: cannot talk to the cluster or the cloud: kubernetes: list nodes at "
        f"https://127.0.0.1:{port}: Connection refused"
    )
    assert len(lines) <= 4  # the HTTP client's own retries, then that line; no node watch retrying


FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}


def refuse(world: World, path_pattern: str) -> None:
    """Every Kubernetes request whose path matches is refused as RBAC refuses it."""
    world.sim.state.inject_fault(
        api="kubernetes", path_pattern=path_pattern, status=403, body=FORBIDDEN, times=None
    )


@pytest.mark.parametrize("command", ["status", "adopt"])
def test_a_refused_configmap_read_from_a_context_without_namespace_names_the_namespace_setting(
    world: World, command: str, tmp_path: Path
) -> None:
    """The chart's RBAC grants ConfigMaps in the webhook's namespace only; a kubeconfig context naming no
    namespace sends the reads to ``default``, where the answer is a bare 403."""
    kubeconfig = yaml.safe_load(world.config.kubeconfig.read_text())
    del kubeconfig["contexts"][0]["context"]["namespace"]
    workstation = tmp_path / "kubeconfig"
    workstation.write_text(yaml.safe_dump(kubeconfig))
    refuse(world, r"/namespaces/default/configmaps")
    args = ["--output=json"] if command == "status" else [f"--owner-id={OWNER}", "--all-unclaimed"]

    code, out, err = world.run(
        command,
        *args,
        flags=[f"--os-cloud={world.config.cloud_name}", f"--kubeconfig={workstation}", "--no-dns-watch"],
    )

    assert (code, out) == (EXIT_CANNOT_START, "")
    [line] = [line for line in err.splitlines() if "cannot talk" in line]
    assert "ConfigMap" in line and "HTTP 403 Forbidden" in line
    assert line.endswith(
        "; the claims and the webhook's state are read in namespace default (default: kubeconfig context "
        "'simulator' names no namespace): set --ownership-namespace (LANDB_OWNERSHIP_NAMESPACE) to the "
        "webhook's namespace, or run this in its admin pod"
    )


def test_a_refused_configmap_read_in_the_namespace_set_says_to_check_the_setting(world: World) -> None:
    refuse(world, rf"/namespaces/{NAMESPACE}/configmaps")

    code, _, err = world.run("status")

    assert code == EXIT_CANNOT_START
    assert err.rstrip().endswith(
        f"; the claims and the webhook's state are read in namespace {NAMESPACE}, as --ownership-namespace "
        "(LANDB_OWNERSHIP_NAMESPACE) says: check it is the webhook's namespace and that your account may "
        "read ConfigMaps there"
    )


def test_a_refused_node_list_is_not_blamed_on_the_namespace(world: World) -> None:
    refuse(world, r"/api/v1/nodes")

    code, _, err = world.run("status")

    assert code == EXIT_CANNOT_START
    assert "HTTP 403" in err and "OWNERSHIP_NAMESPACE" not in err


def test_status_exits_two_on_invalid_settings(world: World, tmp_path: Path) -> None:
    code, _, err = world.run("status", "--registry=bogus")
    assert code == EXIT_INVALID_SETTINGS
    assert "--registry (LANDB_REGISTRY)" in err

    code, out, err = world.run("status", f"--kubeconfig={tmp_path / 'missing'}")
    assert code == EXIT_INVALID_SETTINGS
    assert out == "" and "--kubeconfig (LANDB_KUBECONFIG)" in err


# -- the demo's banner ----------------------------------------------------------------------------------


def test_the_status_and_adopt_lines_the_demo_prints_work_as_printed(world: World) -> None:
    n0 = world.nodes[0]
    world.set_aliases(n0, **{"landb-alias": "legacy--load-0-"})
    world.sim.dns.sync()  # the simulated LanDB publishes it
    text = demo_instructions(
        api="http://127.0.0.1:1",
        health="http://127.0.0.1:2",
        state_dir=world.config.kubeconfig.parent,
        cloud_name=world.config.cloud_name,
        ingress_ips=["192.0.2.1"],
        node_name=n0,
        dns=world.sim.dns.address,
        dns_sync_period=30,
    )
    lines = [shlex.split(line) for line in text.splitlines() if line.lstrip().startswith("LANDB_")]
    assignments_of = [next(i for i, word in enumerate(words) if "=" not in word) for words in lines]
    assert [words[n + 1] for words, n in zip(lines, assignments_of, strict=True)] == ["status", "adopt"]
    # Only what the line sets: none of the simulator's variables the test session exported.
    clean = {
        name: value for name, value in os.environ.items() if not name.startswith(("OS_", "KUBE", "LANDB_"))
    }

    ran = []
    for words, n in zip(lines, assignments_of, strict=True):
        assignments = dict(word.split("=", 1) for word in words[:n])
        ran.append(
            subprocess.run(
                words[n:],
                env={**clean, **assignments},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        )

    status, adopt = ran
    assert (status.returncode, status.stderr) == (0, "")
    assert f"Claims: ConfigMap default/{CONFIGMAP}" in status.stdout
    assert "landb-webhook adopt --owner-id <external-dns --txt-owner-id> --names legacy" in status.stdout
    assert re.search(r"legacy\.cern\.ch +published ", status.stdout), (
        status.stdout
    )  # asked the simulated LanDB
    assert (adopt.returncode, adopt.stderr) == (0, "")
    assert adopt.stdout.splitlines()[-1] == "1 to claim, 0 left."
    assert world.claims() == {}


# -- adopt ---------------------------------------------------------------------------------------------


def controller_aliases(world: World) -> dict[str, dict[str, int]]:
    """What the landb-alias-controller leaves behind: app on every ingress node, web on two of them
    (the third joined later), and a per-interface value it never wrote."""
    n0, n1, n2, _ = world.nodes
    world.set_aliases(n0, **{"landb-alias": "app--load-0-,web--load-0-"})
    world.set_aliases(n1, **{"landb-alias": "app--load-1-,web--load-1-"})
    world.set_aliases(n2, **{"landb-alias": "app--load-2-"})
    return world.aliases()


def test_adopt_dry_run_prints_the_claims_and_writes_nothing(world: World) -> None:
    controller_aliases(world)
    world.sim.state.reset_api_calls()

    code, out, _ = world.run("adopt", f"--owner-id={OWNER}", "--all-unclaimed", "--dry-run")

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Adopting existing aliases for owner id {OWNER} (dry run: nothing is written)"
    app = next(line for line in lines if line.split()[:2] == ["claim", "app.cern.ch"])
    assert "a-app.cern.ch" in app
    web = next(line for line in lines if line.split()[:2] == ["claim", "web.cern.ch"])
    assert f"the next loop adds it to {world.nodes[2]}" in web
    assert lines[-1] == "2 to claim, 0 left."
    assert world.writes() == []
    assert world.claims() == {}


def test_adopt_under_a_selector_that_matches_no_node_says_so_naming_it(world: World) -> None:
    controller_aliases(world)

    code, out, _ = world.run(
        "adopt", f"--owner-id={OWNER}", "--all-unclaimed", "--ingress-selector=role=ingres"
    )

    assert code == 0
    left = [line for line in out.splitlines() if line.startswith("leave")]
    assert len(left) == 2
    assert all(
        "the ingress selector role=ingres matches none of the 4 nodes: fix LANDB_INGRESS_SELECTOR" in line
        for line in left
    )
    assert "not an ingress node" not in out
    assert world.claims() == {}


def test_adopt_from_a_workstation_writes_where_the_kubeconfig_context_points_and_says_where(
    world: World, tmp_path: Path
) -> None:
    controller_aliases(world)
    kubeconfig = yaml.safe_load(world.config.kubeconfig.read_text())
    kubeconfig["contexts"][0]["context"]["namespace"] = "external-dns"
    workstation = tmp_path / "kubeconfig"
    workstation.write_text(yaml.safe_dump(kubeconfig))

    code, out, _ = world.run(
        "adopt",
        f"--owner-id={OWNER}",
        "--names=app",
        flags=[f"--os-cloud={world.config.cloud_name}", f"--kubeconfig={workstation}"],
    )

    assert code == 0
    assert out.splitlines()[2] == (
        f"Claims: ConfigMap external-dns/{CONFIGMAP} (namespace from the namespace of kubeconfig context "
        f"'simulator' ({workstation}))"
    )
    stored = world.sim.state.configmap("external-dns", CONFIGMAP) or {}
    assert [decode_record(value).dns_name for value in (stored.get("data") or {}).values()] == [
        "a-app.cern.ch"
    ]
    assert world.claims() == {}  # nothing in the namespace 'default' the old default wrote to


def test_adopt_writes_even_when_the_webhooks_dry_run_setting_is_on_and_says_so(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller_aliases(world)
    monkeypatch.setenv("LANDB_DRY_RUN", "true")  # what the chart's values set for the webhook

    code, out, err = world.run("adopt", f"--owner-id={OWNER}", "--names=app", "--dry-run")
    assert (code, world.claims()) == (0, {})
    assert err == ""

    code, out, err = world.run("adopt", f"--owner-id={OWNER}", "--names=app")
    assert code == 0
    assert err == (
        "landb-webhook adopt: LANDB_DRY_RUN=true is the webhook's setting and does not apply to adopt: the "
        "claims below are written. Pass --dry-run to see them first.\n"
    )
    assert out.splitlines()[-1] == "1 claimed, 0 left."
    assert sorted(world.claims()) == ["a-app.cern.ch"]


def test_adopt_without_names_says_so_in_two_lines(world: World) -> None:
    with pytest.raises(SystemExit) as exited:
        world.run("adopt", f"--owner-id={OWNER}", "--dry-run")

    assert exited.value.code == EXIT_INVALID_SETTINGS
    assert world.capsys.readouterr().err.splitlines() == [
        "usage: landb-webhook adopt --owner-id OWNER_ID (--names NAMES | --all-unclaimed) [--dry-run] "
        "[settings]",
        "landb-webhook adopt: error: one of the arguments --names --all-unclaimed is required",
    ]


def test_adopt_writes_the_claims_external_dns_would_write_byte_for_byte(world: World) -> None:
    before = controller_aliases(world)
    metadata_before = {s.id: dict(s.metadata) for s in world.sim.state.servers()}

    code, out, _ = world.run("adopt", f"--owner-id={OWNER}", "--names=app,web.cern.ch")

    assert code == 0, out
    assert out.splitlines()[-1] == "2 claimed, 0 left."
    claims = world.claims()
    assert sorted(claims) == ["a-app.cern.ch", "a-web.cern.ch"]
    app = claims["a-app.cern.ch"]
    assert app.record_type == "TXT"
    assert app.targets == (f'"heritage=external-dns,external-dns/owner={OWNER}"',)
    assert app.labels == (("ownedRecord", "app.cern.ch"),)
    assert (app.set_identifier, app.record_ttl, app.provider_specific) == ("", 0, ())
    # Not one metadata write: every alias keeps its N.
    assert {s.id: dict(s.metadata) for s in world.sim.state.servers()} == metadata_before
    assert world.aliases() == before


def test_adopt_honours_the_txt_prefix_external_dns_uses(world: World) -> None:
    controller_aliases(world)
    code, _, _ = world.run(
        "adopt", f"--owner-id={OWNER}", "--names=app", "--txt-prefix=%{record_type}-owner."
    )
    assert code == 0
    assert sorted(world.claims()) == ["a-owner.app.cern.ch"]


def test_adopt_leaves_what_it_cannot_take_safely_and_says_why(world: World) -> None:
    n0, n1, _, worker = world.nodes
    world.set_aliases(
        n0, **{"landb-alias": "mine--load-0-,theirs--load-0-,dup--load-0-,twice--load-0-,twice--load-4-"}
    )
    world.set_aliases(n1, **{"landb-alias": "dup--load-0-,stray--load-1-"})
    world.set_aliases(worker, **{"landb-alias": "stray--load-2-"})
    world.store_claims(
        ownership_record(Endpoint("mine.cern.ch", "A", labels=(("resource", "ingress/a/mine"),)), OWNER),
        ownership_record(
            Endpoint("theirs.cern.ch", "A", labels=(("resource", "ingress/b/theirs"),)), OTHER_OWNER
        ),
    )
    claims_before = world.claims()

    code, out, _ = world.run("adopt", f"--owner-id={OWNER}", "--names=mine,theirs,dup,twice,stray,absent")

    assert code == 0
    left = {line.split()[1]: line for line in out.splitlines() if line.startswith("leave ")}
    assert sorted(left) == [f"{n}.cern.ch" for n in ("absent", "dup", "mine", "stray", "theirs", "twice")]
    assert "already claimed by this owner" in left["mine.cern.ch"]
    assert f"already claimed by {OTHER_OWNER}" in left["theirs.cern.ch"]
    assert f"N=0 is held by 2 nodes ({n0}, {n1})" in left["dup.cern.ch"]
    assert f"node {n0} holds it 2 times (N=0, 4)" in left["twice.cern.ch"]
    assert f"carried by {worker}, which is not an ingress node" in left["stray.cern.ch"]
    assert "no node carries it" in left["absent.cern.ch"]
    assert out.splitlines()[-1] == "0 claimed, 6 left."
    assert world.claims() == claims_before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--owner-id=a,b", "--all-unclaimed"], "comma"),
        (["--owner-id=x", "--names=a.b.cern.ch"], "more than one label"),
        (["--owner-id=x", "--names=app", "--txt-prefix=p-", "--txt-suffix=-s"], "cannot both be set"),
        (["--owner-id=x", "--all-unclaimed", "--registry=noop"], "registry noop"),
        (["--owner-id=x", "--all-unclaimed", "--ownership-store=memory"], "memory ownership store"),
    ],
)
def test_adopt_refuses_bad_arguments_before_reading_anything(
    world: World, args: list[str], message: str
) -> None:
    world.sim.state.reset_api_calls()
    code, out, err = world.run("adopt", *args)
    assert code == EXIT_INVALID_SETTINGS
    assert message in err and out == ""
    assert world.sim.state.api_calls() == []


# -- adoption through external-dns' loop (landb_simulator.external_dns) ------------------------------


@pytest.fixture
def make_provider(world: World) -> Iterator[Callable[..., LandbProvider]]:
    built: list[Adapters] = []

    def make(**overrides: Any) -> LandbProvider:
        settings = Settings(
            os_cloud=world.config.cloud_name,
            kubeconfig=world.config.kubeconfig,
            ownership_namespace=NAMESPACE,
            inventory_max_age=0,
            **overrides,
        )
        provider, adapters = build_provider(settings, Metrics.create(process_metrics=False))
        built.append(adapters)
        assert adapters.nodes.wait_synced(5)
        return provider

    yield make
    for adapters in built:
        adapters.close()


def desired(*labels: str) -> list[Endpoint]:
    return [
        Endpoint(f"{label}.cern.ch", "A", ("192.0.2.1",), labels=(("resource", f"ingress/default/{label}"),))
        for label in labels
    ]


def loop(provider: LandbProvider, wanted: list[Endpoint]) -> Changes:
    changes = plan(provider.records(), provider.adjust_endpoints(wanted), owner=OWNER).changes
    if changes != Changes():
        provider.apply_changes(changes)
    return changes


def assert_no_alias_lost_or_renumbered(world: World, before: dict[str, dict[str, int]]) -> None:
    """At every metadata state the simulator passed through, each carrier still holds its N."""
    by_id = {world.server_id(node): node for node in world.nodes}
    for change in world.sim.state.metadata_history():
        if change.method == "direct" or change.server_id not in by_id:
            continue
        held = {t.label: t.index for t in read_aliases(change.metadata).load_tokens()}
        for label, index in before[by_id[change.server_id]].items():
            assert held.get(label) == index, f"{label}--load-{index}- lost at {change}"


def test_adopted_names_are_external_dns_own_and_the_second_loop_writes_nothing(
    world: World, make_provider: Callable[..., LandbProvider]
) -> None:
    before = controller_aliases(world)
    assert world.run("adopt", f"--owner-id={OWNER}", "--all-unclaimed")[0] == 0
    provider = make_provider()

    first = loop(provider, desired("app", "web"))

    # app was complete: nothing to do. web lacked the third ingress node: one update adds it there.
    assert [e.dns_name for e in first.create] == []
    assert [e.dns_name for e in first.update_new if e.record_type == "A"] == ["web.cern.ch"]
    assert first.delete == ()
    after = world.aliases()
    assert after[world.nodes[2]] == {"app": 2, "web": 2}
    assert_no_alias_lost_or_renumbered(world, before)
    world.sim.state.reset_api_calls()
    assert loop(provider, desired("app", "web")) == Changes()
    assert world.writes() == []
    assert sorted(world.claims()) == ["a-app.cern.ch", "a-web.cern.ch"]


def test_adopt_existing_claims_a_desired_unclaimed_alias_through_the_loop(
    world: World, make_provider: Callable[..., LandbProvider]
) -> None:
    before = controller_aliases(world)
    provider = make_provider(adopt_existing=True)

    first = loop(provider, desired("app"))

    assert sorted((e.dns_name, e.record_type) for e in first.create) == [
        ("a-app.cern.ch", "TXT"),
        ("app.cern.ch", "A"),
    ]
    assert sorted(world.claims()) == ["a-app.cern.ch"]  # web is not desired: still unclaimed
    assert world.aliases() == before  # every ingress node already carried app: no write at all
    assert_no_alias_lost_or_renumbered(world, before)
    assert loop(provider, desired("app")) == Changes()
    # web, unclaimed and not wanted, is left alone; once wanted it is adopted too, keeping its Ns.
    second = loop(provider, desired("app", "web"))
    assert [e.dns_name for e in second.create if e.record_type == "A"] == ["web.cern.ch"]
    assert world.aliases()[world.nodes[0]]["web"] == 0 and world.aliases()[world.nodes[1]]["web"] == 1
    assert_no_alias_lost_or_renumbered(world, before)
    assert loop(provider, desired("app", "web")) == Changes()


def test_without_adopt_existing_a_create_over_an_unclaimed_alias_is_refused_and_not_claimed(
    world: World, make_provider: Callable[..., LandbProvider]
) -> None:
    before = controller_aliases(world)
    provider = make_provider()
    record = provider.adjust_endpoints(desired("app"))[0]
    claim = ownership_record(record, OWNER)

    with pytest.raises(ApplyError, match="app: no ownership record"):
        provider.apply_changes(Changes(create=(record, claim)))

    assert world.claims() == {}
    assert world.aliases() == before
