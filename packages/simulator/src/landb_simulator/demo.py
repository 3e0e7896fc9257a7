"""``landb-webhook-simulator demo``: the webhook served against an in-process simulator, and what to try."""

from __future__ import annotations

import logging
import os
import shlex
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from landb_simulator.landb_zone import OtherDevice
from landb_simulator.seed import seed_cluster, seed_gateway_route, seed_load_balancer_service
from landb_simulator.server import Simulator, listen
from landb_simulator.walk import Walk, start_walk
from landb_webhook.embedding import ENV_PREFIX, EXIT_CANNOT_START, Settings, run_webhook
from landb_webhook.embedding import PROG as WEBHOOK_PROG
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.webhook.wire import MEDIA_TYPE, encode_changes, encode_endpoints

PROG = "landb-webhook-simulator"
DEFAULT_DEMO_STATE_DIR = Path("state")
"""``./state``: kept after the demo exits so its clouds.yaml and kubeconfig can be read; gitignored."""
INGRESS_NODES = 3
DEMO_SYNC_PERIOD = 30.0
"""Seconds between two publications of the simulated LanDB in the demo (LanDB's own: 900)."""
DNS_RECHECK_PERIOD = 10.0
"""How often the demo's DNS watcher asks about each name: its shortest period."""


def run_demo(
    state_dir: Path,
    *,
    api_port: int,
    health_port: int,
    dns_sync_period: float = DEMO_SYNC_PERIOD,
    other_devices: Sequence[OtherDevice] = (),
) -> int:
    """Bind the webhook's two listeners first (a second demo is told which port is busy), then seed a
    3-ingress-node cluster, print what to try, walk one name through LanDB's syncs beside the webhook
    (walk.py) and serve the webhook until SIGTERM/SIGINT. LanDB publishes every ``dns_sync_period``."""
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    listeners: list[socket.socket] = []
    for flag, port in (("--api-port", api_port), ("--health-port", health_port)):
        try:
            listeners.append(listen("127.0.0.1", port))
        except OSError as error:
            for listener in listeners:
                listener.close()
            print(
                f"{PROG} demo: cannot listen on 127.0.0.1:{port} ({flag}): {error.strerror or error}. Is "
                "another demo running? Stop it, or choose free ports: make demo ARGS='--api-port 18888 "
                "--health-port 18080'",
                file=sys.stderr,
            )
            return EXIT_CANNOT_START
    api_listener, health_listener = listeners
    api_port, health_port = (listener.getsockname()[1] for listener in listeners)
    with Simulator(dns_sync_period=dns_sync_period, other_devices=other_devices) as sim:
        ingress_names = seed_cluster(sim.state, ingress_nodes=INGRESS_NODES, workers=1)[:INGRESS_NODES]
        lb_id, vip = seed_load_balancer_service(sim.state)
        servers = {server.name: server for server in sim.state.servers()}
        ingress_ips = [ip for name in ingress_names if (ip := servers[name].ip) is not None]
        # The walk's name is asked for by an HTTPRoute on a Gateway whose data plane runs on the ingress
        # nodes (ingress-nginx is retired): the webhook's events go on it.
        seed_gateway_route(sim.state, ingress_ips)
        first_ingress = servers[ingress_names[0]]
        # An alias someone set by hand, without an ownership claim: the webhook must leave it alone.
        sim.state.set_metadata_direct(
            first_ingress.id, {**sim.state.metadata(first_ingress.id), "landb-alias": "legacy--load-0-"}
        )
        sim.dns.sync()  # the hand-set alias was published long ago
        config = sim.write_client_config(state_dir)
        os.environ["OS_CLIENT_CONFIG_FILE"] = str(config.clouds_yaml)
        settings = Settings(
            api_host="127.0.0.1",
            api_port=api_port,
            health_host="127.0.0.1",
            health_port=health_port,
            os_cloud=config.cloud_name,
            kubeconfig=config.kubeconfig,
            ownership_store="configmap",
            ownership_namespace="default",
            log_format="console",
            dns_resolvers=[sim.dns.address],  # the webhook's DNS watcher asks the simulated LanDB
            dns_recheck_period=DNS_RECHECK_PERIOD,
        )
        print(
            demo_instructions(
                api=f"http://127.0.0.1:{api_port}",
                health=f"http://127.0.0.1:{health_port}",
                state_dir=state_dir,
                cloud_name=config.cloud_name,
                ingress_ips=ingress_ips,
                node_name=first_ingress.name,
                load_balancer=(sim.state.octavia.load_balancer(lb_id).name, vip),
                dns=sim.dns.address,
                dns_sync_period=dns_sync_period,
            ),
            flush=True,
        )
        for device in other_devices:
            print(
                f"Another LanDB device: {device.describe()}; the webhook refuses its names unless "
                "LANDB_TAKEOVER_NAMES lists them",
                flush=True,
            )
        stop_walk = threading.Event()
        walk = Walk(
            f"http://127.0.0.1:{api_port}",
            f"http://127.0.0.1:{health_port}",
            sim.dns,
            events=lambda: sim.state.events("default"),
        )
        start_walk(walk, sys.stdout, stop_walk)
        quiet = QuietRecordsPolls()
        logging.getLogger(ACCESS_LOGGER).addFilter(quiet)
        try:
            return run_webhook(settings, api_listener, health_listener)
        finally:
            stop_walk.set()
            logging.getLogger(ACCESS_LOGGER).removeFilter(quiet)


ACCESS_LOGGER = "landb_webhook.access"
"""The webhook's access log: one line per request (webhook/api.py AccessLog)."""


class QuietRecordsPolls(logging.Filter):
    """The walk asks Records every second, as a fast external-dns loop would: the access lines of
    ``GET /records`` answered 200 are shown at debug only (the demo says so), so the walk's own lines, the
    writes and every other request stay readable."""

    def filter(self, record: logging.LogRecord) -> bool:
        line = record.msg
        if isinstance(line, dict) and (line.get("method"), line.get("path"), line.get("status")) == (
            "GET",
            "/records",
            200,
        ):
            return logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.DEBUG)
        return True


def installed_command(name: str) -> str:
    """``name`` installed beside this interpreter (make demo's .venv), else whatever is on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def demo_instructions(
    *,
    api: str,
    health: str,
    state_dir: Path,
    cloud_name: str,
    ingress_ips: Sequence[str],
    node_name: str,
    load_balancer: tuple[str, str] | None = None,
    dns: str,
    dns_sync_period: float,
) -> str:
    """Ready-to-paste commands exercising every webhook call and showing where the result lands;
    ``load_balancer`` (name, VIP): the seeded LoadBalancer Service's, shown with its Octavia side."""
    record = Endpoint("myapp.cern.ch", "A", tuple(sorted(ingress_ips)))
    claim = Endpoint(
        "a-myapp.cern.ch",
        "TXT",
        ('"heritage=external-dns,external-dns/owner=demo,external-dns/resource=httproute/default/myapp"',),
        labels=(("ownedRecord", "myapp.cern.ch"),),
    )
    create = encode_changes(Changes(create=(record, claim))).decode()
    desired = encode_endpoints([Endpoint("myapp.cern.ch", "A", ("192.0.2.1",), record_ttl=300)]).decode()
    accept = shlex.quote(f"Accept: {MEDIA_TYPE}")
    content_type = shlex.quote(f"Content-Type: {MEDIA_TYPE}")  # POSTs without it are refused (415)
    kubeconfig = shlex.quote(str(state_dir / "kubeconfig"))
    clouds = shlex.quote(str(state_dir / "clouds.yaml"))
    openstack = shlex.quote(installed_command("openstack"))
    landb = shlex.quote(installed_command(WEBHOOK_PROG))
    settings = " ".join(
        [
            f"{ENV_PREFIX}KUBECONFIG={kubeconfig}",
            f"{ENV_PREFIX}OS_CLOUD={cloud_name}",
            f"OS_CLIENT_CONFIG_FILE={clouds}",
            f"{ENV_PREFIX}DNS_RESOLVERS={dns}",
        ]
    )
    service = ""
    if load_balancer is not None:
        lb_name, vip = load_balancer
        service = f"""
  # the LoadBalancer Service default/myservice and its Octavia load balancer (VIP {vip}), named as
  # CERN names a load balancer: a landb-alias=<name> tag
  kubectl --kubeconfig {kubeconfig} get services
  OS_CLIENT_CONFIG_FILE={clouds} {openstack} --os-cloud {cloud_name} loadbalancer show {lb_name} -c tags
"""
    dns_host, _, dns_port = dns.rpartition(":")
    return f"""
{PROG} demo: webhook API on {api}, health and metrics on {health}.
The simulated cluster has 3 ingress nodes and 1 worker; {node_name} already carries the hand-set
alias legacy--load-0- (no ownership claim, so the webhook never removes it). Try:

  # negotiation: the domain filter
  curl -si {api}/ -H {accept}
  # current records
  curl -s {api}/records
  # what the provider makes of a desired endpoint (targets become the ingress node IPs, TTL 0)
  curl -s -X POST {api}/adjustendpoints -H {content_type} -d {shlex.quote(desired)}
  # publish myapp.cern.ch with its TXT ownership claim, as external-dns would (answers 204)
  curl -si -X POST {api}/records -H {content_type} -d {shlex.quote(create)}

  # where it lands: node metadata in Nova, the ownership claim in a ConfigMap
  OS_CLIENT_CONFIG_FILE={clouds} {openstack} --os-cloud {cloud_name} server show {node_name} -c properties
  kubectl --kubeconfig {kubeconfig} get nodes --show-labels
  kubectl --kubeconfig {kubeconfig} get configmap -n default -o yaml
  curl -s {health}/metrics | grep ^landb_webhook_
{service}
  # and in DNS once the simulated LanDB has synced (every {dns_sync_period:g} s; LanDB's own: 15 min)
  dig @{dns_host.strip("[]")} -p {dns_port} myapp.cern.ch

  # what an operator runs on a cluster, with the webhook's settings: status (read-only), then adopt
  # for the hand-set alias (drop --dry-run to write the claim; external-dns then owns legacy.cern.ch)
  {settings} {landb} status
  {settings} {landb} adopt --owner-id demo --names legacy --dry-run

  # the Gateway API: a Gateway whose data plane runs on the ingress nodes, and the HTTPRoute asking for
  # myapp.cern.ch, on which the webhook writes its events (kubectl describe httproute myapp, on a cluster)
  kubectl --kubeconfig {kubeconfig} get gatewayclasses,gateways,httproutes

Meanwhile the lines starting with "walk" publish myapp.cern.ch and remove it again, as external-dns
would for the HTTPRoute default/myapp, and follow it through the webhook's DNS watch (pending, published,
then stale and gone) and the events the webhook writes on the HTTPRoute. The walk asks Records every
second: those requests are not logged (each write is). State directory: {state_dir} (kept after exit).
Stop with Ctrl+C.
"""
