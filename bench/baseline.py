"""The approach this project replaces, kept only to measure against: N = the node's position in the
sorted list of ingress nodes, and every node's landb-alias* keys rebuilt from scratch each time
(the draft design, and how earlier CERN controllers worked)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from landb_webhook.landb.metadata import is_alias_key, slot_key


def positional_metadata(
    ingress: Sequence[str], aliases: Sequence[str], max_length: int
) -> dict[str, dict[str, str]]:
    """node name -> its complete landb-alias* keys."""
    layout: dict[str, dict[str, str]] = {}
    for position, node in enumerate(sorted(ingress)):
        values: list[str] = []
        for token in (f"{alias}--load-{position}-" for alias in sorted(aliases)):
            if values and len(values[-1]) + 1 + len(token) <= max_length:
                values[-1] += "," + token
            else:
                values.append(token)
        layout[node] = {slot_key(i + 1): value for i, value in enumerate(values)}
    return layout


def positional_writes(
    current: Mapping[str, Mapping[str, str]], wanted: Mapping[str, Mapping[str, str]]
) -> dict[str, tuple[dict[str, str], list[str]]]:
    """node -> (keys to POST, keys to DELETE) turning each node's alias keys into the wanted ones."""
    writes: dict[str, tuple[dict[str, str], list[str]]] = {}
    for node in sorted(set(current) | set(wanted)):
        have = {k: v for k, v in current.get(node, {}).items() if is_alias_key(k)}
        want = dict(wanted.get(node, {}))
        upserts = {k: v for k, v in want.items() if have.get(k) != v}
        deletes = sorted(set(have) - set(want))
        if upserts or deletes:
            writes[node] = (upserts, deletes)
    return writes
