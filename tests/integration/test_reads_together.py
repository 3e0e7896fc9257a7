"""The requests of one phase go out together (provider.together): an apply's state ConfigMap, servers, load
balancers, claims and metadata quota, and Records' servers, load balancers and claims, are in flight at
the same time: one round trip each, not one per read; after its writes, an apply drops the claims and
stores the state together.

Each read of the real adapters (over HTTP, against the simulator) is made to wait, while the check is
armed, until as many reads as the phase has are in flight at once. Reads sent one after the other never
get there: the first one's wait breaks (threading.BrokenBarrierError) and the call fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from landb_simulator.external_dns import plan
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.octavia import OctaviaLoadBalancers
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.adapters.state import ConfigMapStateStore
from landb_webhook.endpoint import Changes
from support.provider_cluster import OWNER

READS = (
    (ConfigMapStateStore, "load"),
    (OpenStackServerStore, "servers_for"),
    (OctaviaLoadBalancers, "load_balancers"),
    (ConfigMapOwnershipStore, "records"),
    (OpenStackServerStore, "max_metadata_items"),
)


class Rendezvous:
    """While armed with ``parties``, each wrapped read waits until that many are in flight together; the
    first meeting disarms it (a read made later, alone, goes through)."""

    def __init__(self) -> None:
        self._barrier: threading.Barrier | None = None
        self.met: list[str] = []

    def arm(self, parties: int) -> None:
        self.met = []
        self._barrier = threading.Barrier(parties, timeout=10)

    def wrap(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def read(this: Any, *args: Any, **kwargs: Any) -> Any:
            barrier = self._barrier
            if barrier is not None:
                self.met.append(f"{owner.__name__}.{name}")
                barrier.wait()
                self._barrier = None
            return original(this, *args, **kwargs)

        monkeypatch.setattr(owner, name, read)


@pytest.fixture
def rendezvous(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rendezvous]:
    meeting = Rendezvous()
    for owner, name in READS:
        meeting.wrap(monkeypatch, owner, name)
    yield meeting


def test_an_apply_sends_its_five_reads_together(make_cluster: Any, rendezvous: Rendezvous) -> None:
    cluster = make_cluster(leader_election=False)
    cluster.want("app.cern.ch")
    current = cluster.provider.records()
    adjusted = cluster.provider.adjust_endpoints(cluster.desired)
    changes = plan(current, adjusted, owner=OWNER).changes
    assert changes != Changes()

    rendezvous.arm(len(READS))
    cluster.provider.apply_changes(changes)

    assert sorted(rendezvous.met) == sorted(f"{owner.__name__}.{name}" for owner, name in READS)
    assert set(cluster.aliases(cluster.nodes[0])) == {"app"}


def test_records_sends_its_three_reads_together(make_cluster: Any, rendezvous: Rendezvous) -> None:
    cluster = make_cluster(leader_election=False)
    cluster.want("app.cern.ch")
    cluster.settle()

    rendezvous.arm(3)
    records = cluster.provider.records()

    assert sorted(rendezvous.met) == [
        "ConfigMapOwnershipStore.records",
        "OctaviaLoadBalancers.load_balancers",
        "OpenStackServerStore.servers_for",
    ]
    assert "app.cern.ch" in {e.dns_name for e in records}


def test_after_its_writes_an_apply_drops_the_claims_and_stores_the_state_together(
    make_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = make_cluster(leader_election=False)
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()
    after_writes = Rendezvous()
    after_writes.wrap(monkeypatch, ConfigMapOwnershipStore, "apply")
    after_writes.wrap(monkeypatch, ConfigMapStateStore, "save")

    cluster.want("web.cern.ch")
    after_writes.arm(2)
    cluster.loop()

    assert sorted(after_writes.met) == ["ConfigMapOwnershipStore.apply", "ConfigMapStateStore.save"]
    assert set(cluster.aliases(cluster.nodes[0])) == {"web"}
    cluster.settle()
