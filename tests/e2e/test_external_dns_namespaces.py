"""Two teams on one cluster, for real (issue 36): the real external-dns (``--source=ingress``, the README's
flags) on a real kube-apiserver, ``landb-webhook serve`` with its events on, Nova simulated. Team a's
Ingresses live in one namespace, team b's in another; what team b does with its own names never stops team
a's, and team b hears why on its own Ingress (``kubectl describe``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from ingress_world import TARGET_ANNOTATION, IngressWorld

from landb_simulator import Simulator
from landb_simulator.seed import cern_vm_metadata
from support.kube_apiserver import KubeApiServer
from support.waiting import eventually

pytestmark = pytest.mark.e2e

EVENTS_DEADLINE = 60.0
"""Seconds for an event to show: the emitter writes at once, far below its burst."""
TEAM_B_NAMES = [f"b{i}.cern.ch" for i in range(30)]


class TwoTeams(IngressWorld):
    """The ingress world with a second applications' namespace: team a's is ``apps_namespace``."""

    def __init__(
        self,
        server: KubeApiServer,
        simulator: Simulator,
        external_dns: Path,
        workdir: Path,
        webhook_settings: Mapping[str, str],
    ) -> None:
        super().__init__(
            server, simulator, external_dns, workdir, {"LANDB_EVENTS": "true", **webhook_settings}
        )
        self.team_a = self.apps_namespace
        self.team_b = f"{self.apps_namespace}-b"
        server.create_namespace(self.team_b)

    def close(self) -> None:
        self.networking.delete_collection_namespaced_ingress(self.team_b)
        super().close()

    def ingress(self, namespace: str, name: str, hosts: list[str]) -> None:
        """Create the Ingress, or give it exactly ``hosts``: its targets from the annotation."""
        backend = {"service": {"name": name, "port": {"number": 80}}}
        path = {"path": "/", "pathType": "Prefix", "backend": backend}
        body: dict[str, Any] = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": name, "annotations": {TARGET_ANNOTATION: "192.0.2.80"}},
            "spec": {
                "ingressClassName": "nginx",
                "rules": [{"host": host, "http": {"paths": [path]}} for host in hosts],
            },
        }
        existing = {i.metadata.name for i in self.networking.list_namespaced_ingress(namespace).items}
        if name in existing:
            body["metadata"]["resourceVersion"] = self.networking.read_namespaced_ingress(
                name, namespace
            ).metadata.resource_version
            self.networking.replace_namespaced_ingress(name, namespace, body)
        else:
            self.networking.create_namespaced_ingress(namespace, body)

    def published(self) -> set[str]:
        """The names every ingress node's server carries."""
        ingress = self.ingress_server_ids()
        labels = {label for tokens in self.aliases().values() for label in tokens}
        return {f"{label}.cern.ch" for label in labels if self.servers_carrying(label) >= ingress}

    def describe(self, namespace: str, name: str, *wanted: str) -> str:
        """Wait (bounded) until ``kubectl describe ingress`` shows every one of ``wanted``."""

        kubectl = ["kubectl", f"--kubeconfig={self.server.admin_kubeconfig}"]

        def described() -> str:
            return subprocess.run(
                [*kubectl, "-n", namespace, "describe", "ingress", name],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout

        return eventually(
            lambda: text if all(w in (text := described()) for w in wanted) else "",
            what=f"kubectl describe ingress {name} showing {wanted}",
            timeout=EVENTS_DEADLINE,
            every=0.5,
            detail=described,
        )


@pytest.fixture
def make_world(kube_apiserver: KubeApiServer, external_dns_binary: Path, tmp_path: Path) -> Iterator[Any]:
    worlds: list[TwoTeams] = []
    with Simulator() as simulator:

        def make(room: int | None = None, **settings: str) -> TwoTeams:
            """``room``: metadata keys each server may take beyond CERN's own, set before the webhook
            starts (it reads Nova's quota once and keeps it for a while)."""
            if room is not None:
                simulator.state.set_quota(len(cern_vm_metadata("cluster", "node")) + room)
            world = TwoTeams(kube_apiserver, simulator, external_dns_binary, tmp_path, settings)
            worlds.append(world)
            return world

        try:
            yield make
        finally:
            for world in worlds:
                world.close()


def test_team_b_adding_then_deleting_30_names_does_not_stop_team_a(make_world: Any) -> None:
    world: TwoTeams = make_world()
    world.ingress(world.team_a, "web", ["a0.cern.ch", "a1.cern.ch"])
    world.ingress(world.team_b, "bulk", ["b-keep.cern.ch"])
    world.run()
    world.ingress(world.team_b, "bulk", ["b-keep.cern.ch", *TEAM_B_NAMES])
    world.run()
    assert world.published() == {"a0.cern.ch", "a1.cern.ch", "b-keep.cern.ch", *TEAM_B_NAMES}

    # Team b takes its 30 names back while team a adds one: one change set, 60 deletions and 2 creations.
    world.ingress(world.team_b, "bulk", ["b-keep.cern.ch"])
    world.ingress(world.team_a, "web", ["a0.cern.ch", "a1.cern.ch", "a-new.cern.ch"])
    held = world.run()
    assert held.desired_changes is not None, held.describe()
    assert len(held.desired_changes["delete"]) == 60, held.describe()
    assert world.published() == {"a0.cern.ch", "a1.cern.ch", "a-new.cern.ch", "b-keep.cern.ch", *TEAM_B_NAMES}
    assert "a-a-new.cern.ch" in world.ownership_claims()
    described = world.describe(world.team_b, "bulk", "Refused", "removal guard", f"namespace {world.team_b}")
    assert "Warning" in described
    team_a = world.describe(world.team_a, "web", "Written", "a-new.cern.ch written on 3 ingress nodes")
    assert "removal guard" not in team_a

    # The next loop sends team b's deletions again, and they are held back again.
    again = world.run()
    assert again.desired_changes is not None and len(again.desired_changes["delete"]) == 60, again.describe()
    assert set(TEAM_B_NAMES) <= world.published()
    said = [line for line in held.log_text.splitlines() if "level=error" in line or "level=fatal" in line]
    print(f"\n$ kubectl -n {world.team_b} describe ingress bulk\n{described}")
    print(f"external-dns --once (exit {held.returncode}):")
    print("\n".join(said))


def test_team_b_at_its_cap_leaves_room_for_team_a(make_world: Any) -> None:
    """Each server has room for two more keys of 80 characters (twelve names): without the cap team b's
    thirty names take all of it and team a's new name is refused for capacity."""
    world: TwoTeams = make_world(
        room=2,
        LANDB_MAX_PUBLISHED_PER_NAMESPACE="8",
        LANDB_RESERVED_METADATA_KEYS="0",
        LANDB_MAX_VALUE_LENGTH="80",
    )
    assert {len(world.state.metadata(server)) for server in world.ingress_server_ids()} == {
        len(cern_vm_metadata("cluster", "node"))
    }

    world.ingress(world.team_b, "bulk", TEAM_B_NAMES)
    world.run()
    assert world.published() == set(sorted(TEAM_B_NAMES)[:8])
    described = world.describe(world.team_b, "bulk", "Refused", "LANDB_MAX_PUBLISHED_PER_NAMESPACE")
    assert "Warning" in described

    world.ingress(world.team_a, "web", ["a-new.cern.ch"])
    world.run()
    assert world.published() == {"a-new.cern.ch", *sorted(TEAM_B_NAMES)[:8]}
    world.describe(world.team_a, "web", "Written", "a-new.cern.ch written on 3 ingress nodes")
    print(f"\n$ kubectl -n {world.team_b} describe ingress bulk\n{described}")
