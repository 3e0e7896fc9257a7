"""The ``names_needing_attention`` gauge alone: ``count_needing_attention`` at 500 ingress nodes (and as many
workers) x 1,000 names, in three cases, CPU best of 5. Records counts it after every write.

    .venv/bin/python -m bench.attention

The holder index is made once per inventory beforehand, as Records keeps it across loops."""

from __future__ import annotations

import time
from dataclasses import replace

from bench.scenarios import CLUSTER, alias_names
from landb_webhook.backends import Node, Server
from landb_webhook.landb.metadata import slot_key
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.status.problems import count_needing_attention

INGRESS, NAMES, DOMAIN = 500, 1000, "cern.ch"
VALUE_LENGTH = 255
"""Characters of one ``landb-alias*`` value."""


def _packed(tokens: list[str]) -> dict[str, str]:
    """The tokens in as few values as fit, in order."""
    values: list[list[str]] = [[]]
    length = 0
    for token in tokens:
        if values[-1] and length + 1 + len(token) > VALUE_LENGTH:
            values.append([])
            length = 0
        length += len(token) + (1 if values[-1] else 0)
        values[-1].append(token)
    return {slot_key(k + 1): ",".join(v) for k, v in enumerate(values)}


def cases() -> list[tuple[str, Inventory]]:
    """Every ingress node holds every name with N = its number; the workers hold none."""
    names = alias_names(NAMES)
    nodes, servers = [], {}
    for i in range(2 * INGRESS):
        name = f"{CLUSTER}-abcdefabcdef-node-{i}"
        nodes.append(Node(name, f"id-{i}", (f"10.0.{i // 250}.{i % 250}",), i < INGRESS))
        tokens = [f"{label}--load-{i}-" for label in names] if i < INGRESS else []
        servers[name] = Server(f"id-{i}", name, _packed(tokens))
    steady = Inventory(nodes=tuple(nodes), servers=servers, taken_at=0.0)
    out = tuple(replace(n, is_ingress=False) if k == INGRESS // 2 else n for k, n in enumerate(nodes))
    twin = replace(nodes[-1], name=f"{nodes[-1].name}-twin")  # a worker's server, holding nothing
    shared = replace(steady, nodes=(*nodes, twin), servers={**servers, twin.name: servers[nodes[-1].name]})
    return [
        ("steady state (every name certainly fine)", steady),
        ("a node relabelled out (every name flagged)", replace(steady, nodes=out)),
        ("two nodes on one server (every name judged, none flagged)", shared),
    ]


def main() -> None:
    for what, inventory in cases():
        inventory.holders()
        inventory.plain_aliases(DOMAIN)
        runs = []
        for _ in range(5):
            start = time.process_time()
            flagged = count_needing_attention(inventory, domain=DOMAIN)
            runs.append(time.process_time() - start)
        print(f"{what}: {flagged} flagged, {1000 * min(runs):.0f} ms CPU")


if __name__ == "__main__":
    main()
