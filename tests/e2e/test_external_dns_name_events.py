"""What the people behind each Ingress and Service see, for real: the real external-dns (``--source=service
--source=ingress``, ``--events-emit=RecordReady --events-emit=RecordError``) on a real kube-apiserver,
``landb-webhook serve`` with its events on, the simulator's Nova, Octavia and LanDB DNS.

An application team's user, bound only to the ``view`` ClusterRole in its namespace, runs ``kubectl
describe``: a good name says where it was written, then that it is on the air once LanDB has published it; a
name outside cern.ch and a name held by hand in LanDB say why they are not published and what to do; a
LoadBalancer Service's name says it went to its load balancer. A settled loop adds no event.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from e2e_support import http_get
from ingress_world import ServicesWorld
from kubernetes import client

from landb_simulator import Simulator
from support.kube_apiserver import KubeApiServer

pytestmark = pytest.mark.e2e

VIP = "188.184.30.10"
EVENTS_DEADLINE = 90.0
"""Seconds for an event to show: the DNS watch looks again within 15 s and asks each name every 10 s here;
the emitter writes at once (far below its burst)."""
APP_OWNER = "app-owner"


class EventsWorld(ServicesWorld):
    """The ingress world with Services, a load balancer, the DNS watch on the simulated LanDB, and a user
    who may only ``view`` the applications' namespace."""

    def __init__(
        self,
        server: KubeApiServer,
        simulator: Simulator,
        external_dns: Path,
        workdir: Path,
        *,
        sources: tuple[str, ...] = ("service", "ingress"),
        viewer_rules: Sequence[Mapping[str, Any]] = (),
        webhook_settings: Mapping[str, str] | None = None,
    ) -> None:
        """``viewer_rules``: what the application team's user may read beside the ``view`` role's."""
        watch = {
            "LANDB_EVENTS": "true",
            "LANDB_DNS_WATCH": "true",
            "LANDB_DNS_RESOLVERS": simulator.dns.address,
            "LANDB_DNS_RECHECK_PERIOD": "10",
            **(webhook_settings or {}),
        }
        super().__init__(server, simulator, external_dns, workdir, watch, sources)
        self.extra_flags = ["--events-emit=RecordReady", "--events-emit=RecordError"]
        self.state.octavia.add_load_balancer(f"kube_service_landb-e2e_{self.apps_namespace}_shop", VIP)
        read = ["get", "list", "watch"]
        server.apply(
            [
                {  # what the aggregated ``view`` role gives that describe needs (no controller manager runs
                    # here to aggregate the bootstrap ``view``, which stays empty)
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": "view", "namespace": self.apps_namespace},
                    "rules": [
                        {"apiGroups": [""], "resources": ["services", "events"], "verbs": read},
                        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": read},
                        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": read},
                        *viewer_rules,
                    ],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": APP_OWNER, "namespace": self.apps_namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "view"},
                    "subjects": [
                        {"kind": "ServiceAccount", "name": APP_OWNER, "namespace": self.apps_namespace}
                    ],
                },
            ]
        )
        self.viewer = server.service_account_kubeconfig(
            self.apps_namespace, APP_OWNER, workdir / "app-owner.kubeconfig"
        )

    def kubectl(self, *args: str) -> str:
        """``kubectl`` as the application team's user (``view`` in its namespace only)."""
        completed = subprocess.run(
            ["kubectl", f"--kubeconfig={self.viewer}", "-n", self.apps_namespace, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        return completed.stdout

    def describe_shows(self, kind: str, name: str, *wanted: str) -> str:
        """Wait (bounded) until ``kubectl describe`` of the object shows every one of ``wanted``."""
        deadline = time.monotonic() + EVENTS_DEADLINE
        while True:
            described = self.kubectl("describe", kind, name)
            if all(text in described for text in wanted):
                return described
            if time.monotonic() > deadline:
                pytest.fail(f"kubectl describe {kind} {name} did not show {wanted}:\n{described}")
            time.sleep(0.5)

    def watcher_says(self, name: str, state: str) -> None:
        """Wait (bounded) for the DNS watch's log line putting ``name`` in ``state``."""
        deadline = time.monotonic() + EVENTS_DEADLINE
        while not any(
            entry.get("name") == name and entry.get("dns") == state
            for entry in (
                json.loads(line) for line in self.webhook.log_text().splitlines() if line.startswith("{")
            )
        ):
            assert time.monotonic() < deadline, f"the DNS watch did not say {name} is {state}"
            time.sleep(0.2)

    def events_waiting(self) -> float:
        _, _, body = http_get(self.webhook.health_port, "/metrics")
        line = next(
            line for line in body.decode().splitlines() if line.startswith("landb_webhook_events_queued")
        )
        return float(line.split()[-1])

    def event_names(self) -> set[str]:
        events = client.EventsV1Api(self.server.admin).list_namespaced_event(self.apps_namespace).items
        return {f"{e.reporting_controller}/{e.metadata.name}" for e in events}


@pytest.fixture
def world(kube_apiserver: KubeApiServer, external_dns_binary: Path, tmp_path: Path) -> Iterator[EventsWorld]:
    with Simulator() as simulator:  # LanDB's 15-minute period: nothing is published unless the test syncs
        running = EventsWorld(kube_apiserver, simulator, external_dns_binary, tmp_path)
        try:
            yield running
        finally:
            running.close()


def test_each_owner_sees_with_kubectl_describe_what_happened_to_their_name(world: EventsWorld) -> None:
    worker = next(s.id for s in world.state.servers() if s.id not in world.ingress_server_ids())
    world.state.set_metadata_direct(worker, {**world.state.metadata(worker), "landb-alias": "held"})
    for name, host in (
        ("myapp", "myapp.cern.ch"),
        ("outside", "myapp.example.org"),
        ("held", "held.cern.ch"),
    ):
        world.add_ingress(name, host)
        world.publish_status(name, world.ingress_node_ips())
    world.add_service("shop", "shop.cern.ch", VIP)

    first = world.run()
    assert first.returncode == 0, first.describe()
    assert world.servers_carrying("myapp") == world.ingress_server_ids()
    written = world.describe_shows("ingress", "myapp", "Written", "myapp.cern.ch written on 3 ingress nodes")
    outside = world.describe_shows("ingress", "outside", "Refused", "change the host")
    held = world.describe_shows("ingress", "held", "Refused", "plain (CNAME) alias")
    shop = world.describe_shows("service", "shop", "Written", "shop.cern.ch written on its load balancer")
    assert "Warning" in outside and "Warning" in held and "Normal" in written and "Normal" in shop

    assert world.run().up_to_date, world.results[-1].describe()  # its Records shows the watch the names
    world.watcher_says("myapp.cern.ch", "pending")
    world.watcher_says("shop.cern.ch", "pending")
    world.sim.dns.sync()  # LanDB publishes: pending -> on the air
    on_air = world.describe_shows(
        "ingress", "myapp", "OnTheAir", "myapp.cern.ch resolves to its 3 ingress nodes"
    )
    world.describe_shows("service", "shop", "OnTheAir", "shop.cern.ch resolves to its load balancer")
    listed = world.kubectl("get", "events", "--field-selector", "involvedObject.name=myapp")
    assert "OnTheAir" in listed and "Written" in listed

    deadline = time.monotonic() + EVENTS_DEADLINE
    while world.events_waiting() > 0:
        assert time.monotonic() < deadline, "the webhook's events still wait"
        time.sleep(0.2)
    before = world.event_names()
    again = world.run()
    assert again.up_to_date, again.describe()
    deadline = time.monotonic() + EVENTS_DEADLINE
    while world.events_waiting() > 0:
        assert time.monotonic() < deadline, "the webhook's events still wait"
        time.sleep(0.2)
    assert {n for n in world.event_names() if n.startswith("landb-webhook/")} == {
        n for n in before if n.startswith("landb-webhook/")
    }
    print(f"\n$ kubectl describe ingress myapp\n{on_air}\n$ kubectl describe ingress held\n{held}")
