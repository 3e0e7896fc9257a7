"""Reading the simulator's recorded metadata history for the make-before-break invariant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from landb_simulator.state import MetadataChange
from landb_webhook.landb.metadata import read_aliases


def carriers(metadata_by_server: Mapping[str, Mapping[str, str]]) -> dict[str, set[str]]:
    """alias label -> the servers whose metadata carries a ``--load-N-`` token of it."""
    found: dict[str, set[str]] = {}
    for server_id, metadata in metadata_by_server.items():
        for token in read_aliases(metadata).load_tokens():
            found.setdefault(token.label, set()).add(server_id)
    return found


def assert_never_without_carrier(
    start: Mapping[str, Mapping[str, str]],
    changes: Iterable[MetadataChange],
    kept: Iterable[str],
    context: str,
) -> None:
    """Replay ``changes`` from ``start`` (server id -> metadata): after every single one, each alias in
    ``kept`` still has a carrier."""
    replay = {server_id: dict(metadata) for server_id, metadata in start.items()}
    kept = sorted(kept)
    for change in changes:
        replay[change.server_id] = change.metadata
        alive = carriers(replay)
        for label in kept:
            assert alive.get(label), f"{context}: {label} had no carrier after change {change.seq}"
