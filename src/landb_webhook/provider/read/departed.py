"""DEPARTED SERVERS: the server of a node that left the cluster while its VM runs is cleaned of our tokens.

``kubectl delete node`` on a drained node removes it at once, without the grace period's deletionTimestamp:
from then on the node is not in the inventory, so nothing would ever remove its ``...--load-N-`` tokens,
LanDB would keep publishing the VM for those names, and their N would be invisible to the index rule.
So every apply remembers the servers whose slots hold an owned token of ours (with their node's name and
addresses), in the webhook's state ConfigMap under ``carrying-servers``: every server of the cluster
carrying an owned alias is there (after the first apply, every ingress server), its node gone or not. A
remembered server whose node is gone is *departed*: it stays in the inventory (its N stay taken, Records
reports it as the carrier LanDB still publishes), and each apply moves its owned aliases to their
carriers (make) before taking its tokens off (break). It is
forgotten once it holds no owned slot token, or when Nova answers 404 for it. Frozen forms, plain
aliases, foreign keys and unowned tokens stay where they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from landb_webhook.landb.plan import ServerState

STATE_KEY = "carrying-servers"
"""Its key in the state store (backends.StateStore): the servers carrying our aliases, departed or not."""


@dataclass(frozen=True)
class Remembered:
    """A server the webhook wrote tokens to, as last seen with its node."""

    server_id: str
    node_name: str
    internal_ips: tuple[str, ...]


def owned_slot_labels(state: ServerState, owned: Callable[[str], bool]) -> set[str]:
    """The aliases this server holds in our slots and form whose names are ours."""
    return {label for _, label, _ in state.aliases.editable_load() if owned(label)}


def holds_owned(state: ServerState, owned: Callable[[str], bool]) -> bool:
    """Whether any of ``owned_slot_labels`` exists: checked for every server at each apply, so it stops
    at the first."""
    return any(owned(label) for _, label, _ in state.aliases.editable_load())


def remembered_after(
    remembered: Mapping[str, Remembered],
    carrying: Mapping[str, Remembered],
    departed_now: Mapping[str, ServerState | None],
    owned: Callable[[str], bool],
) -> dict[str, Remembered]:
    """Whom to remember after an apply.

    ``carrying``: the servers of the cluster's nodes that hold (or were just given) an owned slot token;
    ``departed_now``: remembered servers not in the cluster as read after the apply, None when Nova
    answered 404; a departed server not read (an error) stays remembered."""
    kept = dict(carrying)
    for server_id, found in remembered.items():
        if server_id in kept:
            continue
        if server_id not in departed_now:
            kept[server_id] = found
            continue
        state = departed_now[server_id]
        if state is not None and holds_owned(state, owned):
            kept[server_id] = found
    return kept


def to_json(remembered: Mapping[str, Remembered]) -> str:
    return json.dumps(
        {
            server_id: {"node": found.node_name, "internalIPs": list(found.internal_ips)}
            for server_id, found in sorted(remembered.items())
        },
        separators=(",", ":"),
    )


def from_state(stored: Mapping[str, str]) -> dict[str, Remembered]:
    """The servers remembered in the state store's data. Raises ValueError as ``from_json``."""
    return from_json(stored.get(STATE_KEY, "{}"))


def from_json(text: str) -> dict[str, Remembered]:
    """Raises ValueError on anything but what to_json writes."""
    try:
        found = json.loads(text)
        if not isinstance(found, dict):
            raise ValueError("an object by server id was expected")
        return {
            str(server_id): Remembered(str(server_id), _text(entry["node"]), _texts(entry["internalIPs"]))
            for server_id, entry in found.items()
        }
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"not a list of servers carrying our aliases: {error}") from None


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"text expected, not {type(value).__name__}")
    return value


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"a list expected, not {type(value).__name__}")
    return tuple(_text(item) for item in value)
