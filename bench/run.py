"""Counts, side by side in one run, for the claims the README makes.

1. Metadata writes per cluster change: this project's planner (sticky indices, edited layout) versus
   positional indices with rebuilt values (bench/baseline.py), on the same cluster and the same changes.
2. Nova calls to read the inventory: the batched anchored-name search the webhook uses, versus one
   GET per server, versus listing every server of the project -- real openstacksdk against the simulator.

Everything reported is a count (API calls, writes, renumbered tokens), never a time.
Run: make bench   (or: .venv/bin/python -m bench.run --ingress 10 --aliases 40 --project-servers 500)
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import openstack

from bench.baseline import positional_metadata, positional_writes
from landb_webhook.adapters.openstack import OpenStackServerStore
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.landb.plan import ServerState, plan_changes
from landb_webhook.ports import Node
from landb_webhook.simulator import Simulator, seed_cluster

Metadata = dict[str, dict[str, str]]


@dataclass(frozen=True)
class Cost:
    servers_written: int
    keys_written: int
    tokens_renumbered: int
    duplicate_moments: int
    """(alias, N) pairs held by two servers at some point while the writes are applied in order:
    LanDB needs N unique per alias, so each is a moment DNS may reject or drop a record."""


def _tokens(metadata: Mapping[str, str]) -> set[tuple[str, int]]:
    return {(t.label, t.index) for t in read_aliases(metadata).load_tokens()}


def _renumbered(before: Metadata, after: Metadata) -> int:
    count = 0
    for node, metadata in before.items():
        old = dict(_tokens(metadata))
        new = dict(_tokens(after.get(node, {})))
        count += sum(1 for label, index in old.items() if label in new and new[label] != index)
    return count


def _duplicates_during(states: list[Metadata]) -> int:
    seen: set[tuple[str, int]] = set()
    for state in states:
        holders: dict[tuple[str, int], int] = {}
        for metadata in state.values():
            for token in _tokens(metadata):
                holders[token] = holders.get(token, 0) + 1
        seen.update(token for token, count in holders.items() if count > 1)
    return len(seen)


def ours(current: Metadata, ingress: list[str], aliases: list[str], max_length: int) -> tuple[Metadata, Cost]:
    servers = [ServerState(node, node, node, current.get(node, {})) for node in sorted(current)]
    withdrawn = {t.label for m in current.values() for t in read_aliases(m).load_tokens()} - set(aliases)
    wanted = {a: frozenset(ingress) for a in aliases} | {a: frozenset() for a in withdrawn}
    plan = plan_changes(servers, wanted, max_length=max_length)
    state = {node: dict(metadata) for node, metadata in current.items()}
    states = [state]
    keys = 0
    for phase in ("make", "brk"):
        for server_plan in plan.servers:
            write = getattr(server_plan, phase)
            if not write:
                continue
            state = {n: dict(m) for n, m in state.items()}
            metadata = state[server_plan.server.server_id]
            metadata.update(write.upserts)
            for key in write.deletes:
                metadata.pop(key, None)
            keys += len(write.upserts) + len(write.deletes)
            states.append(state)
    cost = Cost(len(plan.servers), keys, _renumbered(current, state), _duplicates_during(states))
    return state, cost


def positional(
    current: Metadata, ingress: list[str], aliases: list[str], max_length: int
) -> tuple[Metadata, Cost]:
    wanted = positional_metadata(ingress, aliases, max_length)
    writes = positional_writes(current, wanted)
    state = {node: dict(metadata) for node, metadata in current.items()}
    states = [state]
    keys = 0
    for node, (upserts, deletes) in writes.items():  # one server after the other, in name order
        state = {n: dict(m) for n, m in state.items()}
        state[node].update(upserts)
        for key in deletes:
            state[node].pop(key, None)
        keys += len(upserts) + len(deletes)
        states.append(state)
    cost = Cost(len(writes), keys, _renumbered(current, state), _duplicates_during(states))
    return state, cost


Strategy = Callable[[Metadata, list[str], list[str], int], tuple[Metadata, Cost]]


def write_benchmark(n_ingress: int, n_aliases: int, max_length: int) -> None:
    nodes = [f"cluster-abcdefghijkl-node-{i:02d}" for i in range(1, n_ingress + 2)]
    ingress = nodes[1:]  # node-01 is not ingress at first: it sorts first when it joins
    aliases = [f"app{i:03d}" for i in range(n_aliases)]
    empty: Metadata = {node: {"landb-mainuser": "kubernetes-admins"} for node in nodes}
    middle = ingress[len(ingress) // 2]
    scenarios: list[tuple[str, list[str], list[str]]] = [
        ("nothing changed (a settled loop)", ingress, aliases),
        ("one alias added", ingress, [*aliases, "zzz-new"]),
        ("one alias removed", ingress, aliases[1:]),
        ("a node joins, sorting last", [*ingress, "cluster-abcdefghijkl-node-99"], aliases),
        ("a node joins, sorting first", [nodes[0], *ingress], aliases),
        ("a middle node leaves", [n for n in ingress if n != middle], aliases),
    ]
    strategies: dict[str, Strategy] = {"landb-webhook": ours, "positional rebuild": positional}
    print(f"## Metadata writes per change ({n_ingress} ingress nodes, {n_aliases} aliases)")
    print()
    print("| change | strategy | servers written | keys written | tokens renumbered | duplicate moments |")
    print("|---|---|---:|---:|---:|---:|")
    totals = {name: 0 for name in strategies}
    for title, wanted_ingress, wanted_aliases in scenarios:
        for name, strategy in strategies.items():
            start = {**empty, "cluster-abcdefghijkl-node-99": {"landb-mainuser": "x"}}
            settled, _ = strategy(start, ingress, aliases, max_length)
            _, cost = strategy(settled, wanted_ingress, wanted_aliases, max_length)
            totals[name] += cost.keys_written
            print(
                f"| {title} | {name} | {cost.servers_written} | {cost.keys_written} | "
                f"{cost.tokens_renumbered} | {cost.duplicate_moments} |"
            )
    ratio = totals["positional rebuild"] / max(totals["landb-webhook"], 1)
    print()
    print(
        f"Keys written over all changes: landb-webhook {totals['landb-webhook']}, "
        f"positional rebuild {totals['positional rebuild']} (ratio {ratio:.1f}x)."
    )
    print()


def lookup_benchmark(n_cluster: int, n_project: int) -> None:
    with Simulator() as sim, tempfile.TemporaryDirectory() as tmp:
        names = seed_cluster(sim.state, cluster="bench", ingress_nodes=n_cluster, workers=0)
        for i in range(n_project - n_cluster):
            sim.state.add_server(f"other-vm-{i:04d}", {"landb-mainuser": "someone"})
        config = sim.write_client_config(Path(tmp))
        os.environ["OS_CLIENT_CONFIG_FILE"] = str(config.clouds_yaml)
        servers = {s.name: s.id for s in sim.state.servers()}
        with_id = [Node(n, servers[n], (), True) for n in names]
        by_name = [Node(n, None, (), True) for n in names]

        conn = openstack.connect(cloud=config.cloud_name)
        conn.compute.get_server(servers[names[0]])  # authenticate and discover before counting

        def count(action: Callable[[], int]) -> tuple[int, int]:
            """(Nova GETs, server records transferred) for one inventory read."""
            sim.state.reset_api_calls()
            transferred = action()
            return len([c for c in sim.state.api_calls("nova") if c.method == "GET"]), transferred

        store = OpenStackServerStore(config.cloud_name, clouds_yaml=config.clouds_yaml)
        store.servers_for(with_id)  # authenticate
        rows = [
            ("landb-webhook, nodes with providerID", count(lambda: len(store.servers_for(with_id)))),
            ("landb-webhook, nodes without providerID", count(lambda: len(store.servers_for(by_name)))),
            (
                "one GET /servers/{id} per node",
                count(lambda: len([conn.compute.get_server(servers[n]) for n in names])),
            ),
            (
                "list every server of the project",
                count(lambda: len(list(conn.compute.servers(details=True)))),
            ),
        ]
        store.close()
        conn.close()
    print(
        f"## Nova GETs to read the inventory ({n_cluster} cluster nodes in a project of {n_project} servers)"
    )
    print()
    print("| strategy | Nova GETs | servers transferred |")
    print("|---|---:|---:|")
    for title, (gets, transferred) in rows:
        print(f"| {title} | {gets} | {transferred} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ingress", type=int, default=10)
    parser.add_argument("--aliases", type=int, default=40)
    parser.add_argument("--max-length", type=int, default=254)
    parser.add_argument("--cluster-nodes", type=int, default=30)
    parser.add_argument("--project-servers", type=int, default=2500)
    args = parser.parse_args()
    write_benchmark(args.ingress, args.aliases, args.max_length)
    lookup_benchmark(args.cluster_nodes, args.project_servers)


if __name__ == "__main__":
    main()
