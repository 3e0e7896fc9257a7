"""A real Prometheus scrapes ``landb-webhook serve`` as the chart's ServiceMonitor does (the health port,
``/metrics``, job ``external-dns``) and evaluates the shipped rules (each ``for:`` a sixtieth: minutes become
seconds) through a walk like the demo's, against the simulator and its LanDB DNS:

1. two names written by an external-dns loop, and on the air (DNS answers their three ingress nodes);
2. one refused: a create for a name someone holds as a plain alias (the hand edit landed between external-dns'
   AdjustEndpoints and its ApplyChanges); every later loop drops that name (AdjustEndpoints);
3. one held back: an ingress node leaves, a worker joins, and Nova refuses the worker's write (409, a locked
   server): the old carrier's removal is held back, and lands in the next loop once the server is unlocked;
4. a wrong selector: ``serve`` restarted with ``LANDB_INGRESS_SELECTOR=role=ingres``: no ingress node, and
   the loop's creates are refused.

Prometheus' API then says which alerts fire: exactly the expected ones. Every query of the Grafana dashboard
(deploy/grafana/landb-webhook.json) returns data from the same Prometheus, and its variables find the walk's
namespace and pod. Waits are conditions with
deadlines; Prometheus, ``serve`` and the simulator are stopped by the fixture.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from e2e_support import WebhookProcess, free_port, simulator_settings

from landb_simulator import Simulator, seed_cluster
from landb_simulator.external_dns import HttpLoop, create_with_claim, loop_over_http
from landb_webhook.endpoint import Endpoint
from landb_webhook.webhook.wire import MEDIA_TYPE
from support.grafana import queries, variables
from support.prometheus import PrometheusTools, RunningPrometheus, Target, running_prometheus, write_rule_file
from support.waiting import eventually

OWNER = "landb-e2e"
NAMESPACE = "external-dns"
POD = "external-dns-7d9c5b8f6d-x2x7k"
SERVICE_MONITOR_LABELS = {
    "namespace": NAMESPACE,
    "pod": POD,
    "container": "webhook",
    "endpoint": "http-webhook",
    "service": "external-dns",
}
"""What the Prometheus Operator's relabelling gives the chart's ServiceMonitor target (job: the release)."""
NAMES = ("app1.cern.ch", "app2.cern.ch")
TAKEN = "taken.cern.ch"
SYNC_PERIOD = 5.0
"""Seconds between two publications of the simulated LanDB."""
DEADLINE = 180.0
"""Seconds for what takes a few loops, a DNS recheck (10 s) and a LanDB sync, or the longest shortened
``for:`` (30 s) and a few evaluations, on a loaded machine (a bound, not a measure)."""
EXPECTED_FIRING = {
    ("LandbWebhookChangesRefused", "reason=plain_alias"),  # 2. the create beside the plain alias
    ("LandbWebhookChangesRefused", "reason=no_ingress_nodes"),  # 4. the creates with no ingress node
    ("LandbWebhookEndpointsDropped", "reason=plain_alias"),  # 2. the taken name, dropped every loop
    ("LandbWebhookOpenStackCallsFailing", "operation=set_metadata,result=error"),  # 3. the locked server
    ("LandbWebhookNoIngressNode", ""),  # 4. the wrong selector
    ("LandbWebhookNamesNeedAttention", ""),  # 4. the names now on nodes it does not select
}


@dataclass
class Walked:
    prometheus: RunningPrometheus
    webhook: WebhookProcess
    sim: Simulator
    loops: list[HttpLoop]

    def diagnostics(self) -> list[tuple[str, str]]:
        return [
            ("loops", "\n".join(f"{loop.statuses} {loop.changes}" for loop in self.loops)),
            ("landb-webhook serve log", self.webhook.log_text()[-30000:]),
            ("prometheus log", self.prometheus.log_text()[-10000:]),
        ]


def firing(prometheus: RunningPrometheus) -> set[tuple[str, str]]:
    """(alert, its distinguishing labels) of every alert firing now."""
    ignored = {"alertname", "severity", *SERVICE_MONITOR_LABELS, "job", "instance"}
    return {
        (
            alert["labels"]["alertname"],
            ",".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()) if k not in ignored),
        )
        for alert in prometheus.alerts()
    }


def value(prometheus: RunningPrometheus, expr: str) -> float | None:
    result = prometheus.query(expr)
    return float(result[0]["value"][1]) if result else None


def webhook_targets(webhook: WebhookProcess, name: str) -> list[str]:
    """The targets AdjustEndpoints gives ``name`` now: the ingress nodes' IPs, as the node watch sees them."""
    probe = json.dumps([{"dnsName": name, "recordType": "A", "targets": ["192.0.2.1"]}])
    reply = httpx.post(
        f"http://127.0.0.1:{webhook.api_port}/adjustendpoints",
        content=probe,
        headers={"Content-Type": MEDIA_TYPE, "Accept": MEDIA_TYPE},
        timeout=15,
    )
    return sorted(reply.json()[0]["targets"]) if reply.status_code == 200 and reply.json() else []


@pytest.fixture(scope="module")
def walked(prometheus_tools: PrometheusTools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walked]:
    workdir = tmp_path_factory.mktemp("prometheus-scrape")
    with Simulator(dns_sync_period=SYNC_PERIOD) as sim:
        nodes = seed_cluster(sim.state, ingress_nodes=3, workers=1)
        servers = {server.name: server for server in sim.state.servers()}
        leaving, worker = servers[nodes[2]], servers[nodes[3]]
        # Someone's plain (CNAME) alias, set by hand on an ingress node.
        first = servers[nodes[0]].id
        sim.state.set_metadata_direct(first, {**sim.state.metadata(first), "landb-alias": "taken"})
        clients = sim.write_client_config(workdir)
        settings = simulator_settings(
            clients,
            LANDB_LEADER_ELECTION="false",  # one process; LandbWebhookWriterLeaseNotHeldOnce reads 1
            LANDB_DNS_WATCH="true",
            LANDB_DNS_RESOLVERS=sim.dns.address,
            LANDB_DNS_RECHECK_PERIOD="10",
        )
        webhook = WebhookProcess(settings, workdir / "serve.log")
        rule_file = write_rule_file(workdir / "landb-webhook.rules.yaml", for_divided_by=60)
        target = Target(f"127.0.0.1:{webhook.health_port}", SERVICE_MONITOR_LABELS)
        (workdir / "prometheus").mkdir()
        with running_prometheus(
            prometheus_tools, workdir / "prometheus", [target], [rule_file], free_port()
        ) as prometheus:
            walk = Walked(prometheus, webhook, sim, [])
            api = httpx.Client(base_url=f"http://127.0.0.1:{webhook.api_port}", timeout=30)
            try:
                webhook.start()
                eventually(
                    lambda: value(prometheus, 'up{job="external-dns"}') == 1,
                    what="Prometheus to scrape serve",
                    timeout=DEADLINE,
                    every=0.5,
                    detail=prometheus.log_text,
                )

                def loop(*names: str) -> HttpLoop:
                    desired = [Endpoint(name, "A", ("192.0.2.1",)) for name in names]
                    walk.loops.append(loop_over_http(api, desired, owner=OWNER))
                    return walk.loops[-1]

                # 1. written, and on the air: external-dns keeps looping (the watcher learns the names
                # from Records) until DNS answers them, as Prometheus scrapes it.
                assert loop(*NAMES, TAKEN).succeeded, walk.loops[-1]
                eventually(
                    lambda: (
                        loop(*NAMES, TAKEN).succeeded
                        and value(prometheus, 'landb_webhook_dns_names{state="published"}') == len(NAMES)
                    ),
                    what=f"DNS to answer {NAMES} with their ingress nodes",
                    timeout=DEADLINE,
                    every=1.0,
                    detail=webhook.log_text,
                )
                # 2. refused: external-dns' ApplyChanges for the name, after the hand edit.
                body = create_with_claim("taken", OWNER)
                refused = api.post("/records", content=body, headers={"Content-Type": MEDIA_TYPE})
                assert refused.status_code == 503, refused.text
                assert loop(*NAMES, TAKEN).changes is None  # settled: the taken name is dropped

                # 3. held back: the alias moves to a locked worker; its old carrier keeps it.
                sim.state.label_node(leaving.name, "role", None)
                sim.state.label_node(worker.name, "role", "ingress")
                moved = sorted(s.ip for s in servers.values() if s.id != leaving.id and s.ip)
                eventually(
                    lambda: webhook_targets(webhook, NAMES[0]) == moved,
                    what=f"the webhook's node watch to see the ingress nodes {moved}",
                    timeout=DEADLINE,
                )
                locked = sim.state.inject_fault(
                    api="nova",
                    method="POST",
                    path_pattern=f"/servers/{worker.id}/metadata",
                    status=409,
                    times=None,
                )
                assert loop(*NAMES, TAKEN).statuses[-1] == 503, walk.loops[-1]
                assert "removal held back until the new carriers are written" in webhook.log_text()
                locked.cancel()
                assert loop(*NAMES, TAKEN).succeeded, walk.loops[-1]
                assert loop(*NAMES, TAKEN).changes is None, walk.loops[-1]

                # 4. a wrong selector: serve restarted with a typo, on the ports Prometheus scrapes.
                webhook.stop()
                mistyped = WebhookProcess(
                    {**settings, "LANDB_INGRESS_SELECTOR": "role=ingres"}, workdir / "serve-mistyped.log"
                )
                mistyped.api_port, mistyped.health_port = webhook.api_port, webhook.health_port
                walk.webhook = mistyped
                mistyped.start()
                assert loop(*NAMES, TAKEN).statuses[-1] == 503, walk.loops[-1]
                yield walk
            finally:
                api.close()
                walk.webhook.stop()
                webhook.stop()


def test_prometheus_fires_exactly_the_alerts_the_walk_should_raise(walked: Walked) -> None:
    """Refused changes (both reasons), the dropped name, the locked server's failing writes, no ingress
    node and the names left on nodes it no longer selects; not the others: the webhook syncs, its node
    cache is fresh, one replica writes, no name waited 30 minutes, and 5 upstream errors were not reached."""
    prometheus = walked.prometheus
    eventually(
        lambda: firing(prometheus) == EXPECTED_FIRING,
        what=f"Prometheus to fire {sorted(EXPECTED_FIRING)}",
        timeout=DEADLINE,
        every=1.0,
        detail=lambda: f"firing: {sorted(firing(prometheus))}\npending: {prometheus.alerts('pending')}",
    )
    report = sorted(firing(prometheus))
    print("\n".join(f"firing: {alert} {labels}" for alert, labels in report))  # the note quotes it
    assert report == sorted(EXPECTED_FIRING)


# -- the dashboard -------------------------------------------------------------------------------------


def substituted(expr: str) -> str:
    """A panel's query as Grafana sends it for the walk's namespace and pod over the last ten minutes."""
    for variable, replacement in (
        ("$__rate_interval", "5m"),
        ("$namespace", NAMESPACE),
        ("$pod", POD),
    ):
        expr = expr.replace(variable, replacement)
    assert "$" not in expr, f"a variable left unsubstituted: {expr}"
    return expr


def test_every_dashboard_query_returns_data_from_the_walk(walked: Walked) -> None:
    """A panel naming a series the webhook never exports (or a label value it never gives) is empty."""
    asked = [(title, substituted(expr)) for title, expr in queries()]
    empty = [(title, expr) for title, expr in asked if not walked.prometheus.query(expr)]

    assert len(queries()) >= 20
    assert empty == []


def test_the_dashboard_variables_find_the_walks_namespace_and_pod(walked: Walked) -> None:
    """``label_values(metric{...}, label)``, as Grafana's Prometheus data source asks it: the label values
    API, restricted to the series the selector matches."""
    found = {}
    for name in ("namespace", "pod"):
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variables()[name]["definition"])
        assert match is not None, variables()[name]
        found[name] = walked.prometheus.api(f"label/{match[2]}/values", **{"match[]": substituted(match[1])})

    assert found == {"namespace": [NAMESPACE], "pod": [POD]}
