"""Metadata quota headroom: how many aliases fit on one server before it reaches its key quota, and
whether the provider's packing (``landb.plan.plan_changes``) reaches that bound."""

from __future__ import annotations

from dataclasses import dataclass

from landb_simulator.seed import cern_vm_metadata
from landb_webhook.landb.plan import ServerState, plan_changes

QUOTA = 128
MAX_LENGTH = 254


@dataclass(frozen=True)
class Headroom:
    alias_length: int
    foreign_keys: int
    bound: int
    """(quota - foreign keys) x tokens per full value: no layout can hold more."""
    fits_at_bound: bool
    """The provider places ``bound`` aliases on the server..."""
    refused_past_bound: bool
    """...and refuses (writes nothing, says why) one more."""


def _aliases(count: int, length: int) -> list[str]:
    return [f"a{i:0{length - 1}d}" for i in range(count)]


def _placed(count: int, length: int, metadata: dict[str, str]) -> bool:
    server = ServerState("s", "node", "node", metadata)
    plan = plan_changes([server], {alias: frozenset({"s"}) for alias in _aliases(count, length)}, quota=QUOTA)
    return not plan.refusals and sum(len(p.added) for p in plan.servers) == count


def headroom(alias_length: int) -> Headroom:
    """For aliases of ``alias_length`` characters on a server carrying CERN's usual keys (index < 10)."""
    metadata = cern_vm_metadata("cluster", "node")
    token = len("--load-0-") + alias_length
    per_value = (MAX_LENGTH + 1) // (token + 1)
    bound = (QUOTA - len(metadata)) * per_value
    return Headroom(
        alias_length=alias_length,
        foreign_keys=len(metadata),
        bound=bound,
        fits_at_bound=_placed(bound, alias_length, metadata),
        refused_past_bound=not _placed(bound + 1, alias_length, metadata),
    )
