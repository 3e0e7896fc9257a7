"""The write times the DNS watcher counts from, as the provider keeps them: learnt from Records and
ApplyChanges, stored in the state ConfigMap with the apply that wrote, read back after a restart.

Driven through the provider wired to the real clients against the simulator, with external-dns' own loop.
"""

from __future__ import annotations

import json
from typing import Any

from landb_webhook.endpoint import Changes
from landb_webhook.provider.watch.publications import STATE_KEY
from support.provider_cluster import Cluster

STATE = "landb-webhook-ownership-state"
T = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T

    def __call__(self) -> float:
        return self.now


def stored(cluster: Cluster) -> dict[str, Any]:
    configmap = cluster.sim.state.configmap("default", STATE)
    assert configmap is not None
    found: dict[str, Any] = json.loads(configmap["data"][STATE_KEY])
    sets = found["sets"]
    return {
        name: {"at": entry["at"], "ips": sets[entry["ips"]], "was": sets[entry["was"]]}
        for name, entry in found["names"].items()
    }


def ips_of(cluster: Cluster, name: str) -> list[str]:
    return sorted(next(e for e in cluster.provider.records() if e.dns_name == name).targets)


def test_an_apply_stores_when_it_wrote_each_name_and_a_restart_reads_it(make_cluster: Any) -> None:
    clock = Clock()
    cluster = make_cluster(ingress_nodes=2, workers=0, clock=clock)
    cluster.want("app.cern.ch")
    cluster.settle()
    carriers = ips_of(cluster, "app.cern.ch")

    assert stored(cluster) == {"app.cern.ch": {"at": T, "ips": [], "was": []}}  # stored before Records saw it
    clock.now = T + 600
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()
    assert stored(cluster) == {
        "app.cern.ch": {"at": T, "ips": carriers, "was": []},
        "web.cern.ch": {"at": T + 600, "ips": [], "was": []},
    }

    cluster.restart()
    cluster.provider.records()
    published = cluster.adapters.published.published()
    assert {name: (p.written_at, sorted(p.ips)) for name, p in published.items()} == {
        "app.cern.ch": (T, carriers),
        "web.cern.ch": (T + 600, carriers),
    }


def test_a_loop_that_writes_nothing_stores_nothing_more(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=2, workers=0, leader_election=False)
    cluster.want("app.cern.ch")
    cluster.settle()
    writes = [c for c in cluster.sim.state.api_calls("kubernetes") if c.method in {"POST", "PUT"}]
    assert len(writes) == 2  # created: the claims' ConfigMap and the state's

    for _ in range(3):
        assert cluster.loop() == Changes()

    assert [c for c in cluster.sim.state.api_calls("kubernetes") if c.method in {"POST", "PUT"}] == writes
