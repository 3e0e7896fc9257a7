"""Where one name is published, write by write, across the simulated Nova and Octavia: the servers whose
metadata holds it as a ``--load-N-`` token and the load balancers whose tags hold ``landb-alias=<name>``.

Both stores report each change before its reply is sent, under the simulator's one lock, so the writes
recorded here are in the order the cloud applied them: what DNS (LanDB) could have published in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from landb_simulator.state import SimulatorState
from landb_webhook.landb.metadata import read_aliases

Home = tuple[str, str]
"""(``server`` or ``load balancer``, its id)."""


def holds(metadata: dict[str, str], label: str) -> bool:
    return label in {token.label for token in read_aliases(metadata).load_tokens()}


@dataclass
class Homes:
    label: str
    before: dict[Home, bool]
    writes: list[tuple[Home, bool]] = field(default_factory=list)

    def on_metadata(self, change: Any) -> None:
        self.writes.append((("server", change.server_id), holds(change.metadata, self.label)))

    def on_tags(self, change: Any) -> None:
        self.writes.append((("load balancer", change.load_balancer_id), self._tag in change.tags))

    @property
    def _tag(self) -> str:
        return f"landb-alias={self.label}"

    def tag_writes(self) -> list[tuple[str, bool]]:
        """(load balancer id, holds the name after the write), in order."""
        return [(home[1], held) for home, held in self.writes if home[0] == "load balancer"]

    def assert_never_homeless(self) -> None:
        """The name was held somewhere before, and after every recorded write."""
        held = dict(self.before)
        assert any(held.values()), f"{self.label} was not published to begin with"
        for step, (home, now) in enumerate(self.writes):
            held[home] = now
            assert any(held.values()), f"{self.label} had no home after write {step}: {self.writes}"


@contextmanager
def watching(state: SimulatorState, label: str) -> Iterator[Homes]:
    """Record every metadata and tag write while the block runs."""
    before: dict[Home, bool] = {("server", s.id): holds(s.metadata, label) for s in state.servers()}
    before |= {
        ("load balancer", lb.id): f"landb-alias={label}" in lb.tags for lb in state.octavia.load_balancers()
    }
    homes = Homes(label, before)
    state.observe_metadata_changes(homes.on_metadata)
    state.octavia.observe_tag_changes(homes.on_tags)
    try:
        yield homes
    finally:
        state.observe_metadata_changes(None)
        state.octavia.observe_tag_changes(None)
