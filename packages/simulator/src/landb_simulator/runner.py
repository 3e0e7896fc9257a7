"""``landb-webhook-simulator serve``: a seeded simulator in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from landb_simulator.landb_dns import LANDB_SYNC_PERIOD
from landb_simulator.landb_zone import OtherDevice
from landb_simulator.seed import seed_cluster, seed_load_balancer_service
from landb_simulator.server import Simulator
from landb_simulator.state import SimulatorState


def run_simulator(
    state_dir: Path,
    *,
    ingress_nodes: int = 3,
    workers: int = 1,
    host: str = "127.0.0.1",
    port: int = 0,
    cluster: str = "demo",
    dns_port: int = 0,
    dns_sync_period: float = LANDB_SYNC_PERIOD,
    stop: threading.Event | None = None,
    out: TextIO | None = None,
    load_balancers: bool = True,
    other_devices: Sequence[OtherDevice] = (),
) -> None:
    """Start, seed a cluster, write ``state_dir/clouds.yaml`` and ``state_dir/kubeconfig``, print how to use
    them, and block until SIGINT/SIGTERM (or until ``stop`` is set, for callers not on the main thread).
    ``load_balancers`` False: a cloud without Octavia (no ``load-balancer`` in the catalog, none seeded)."""
    out = out or sys.stdout
    stop = stop or threading.Event()
    with _stop_on_signals(stop):
        state = SimulatorState()
        nodes = seed_cluster(state, cluster=cluster, ingress_nodes=ingress_nodes, workers=workers)
        vip = None
        if load_balancers:
            _, vip = seed_load_balancer_service(state, cluster=cluster)
        else:
            state.identity.catalog_without = {"load-balancer"}
        with Simulator(
            host,
            port,
            state=state,
            dns_port=dns_port,
            dns_sync_period=dns_sync_period,
            other_devices=other_devices,
        ) as simulator:
            config = simulator.write_client_config(Path(state_dir))
            print(f"Simulator (Keystone, Nova, Octavia, Kubernetes) listening on {simulator.url}", file=out)
            print(
                f"LanDB DNS for cern.ch on {simulator.dns.address} (UDP and TCP), publishing the aliases "
                f"every {dns_sync_period:g}s: dig @{simulator.host} -p {simulator.dns.port} myapp.cern.ch",
                file=out,
            )
            print(f"Cluster {cluster!r}: {len(nodes)} nodes, {ingress_nodes} with role=ingress", file=out)
            for device in other_devices:
                print(f"Another LanDB device: {device.describe()}", file=out)
            if vip is not None:
                print(f"Service default/myservice: type LoadBalancer, Octavia VIP {vip}", file=out)
            else:
                print("No load-balancer service in the catalog: a cloud without Octavia", file=out)
            print("Point the clients at it:", file=out)
            for name, value in config.environment().items():
                print(f"  export {name}={value}", file=out)
            print("  kubectl get nodes -L role", file=out)
            print("  openstack server list --long", file=out)
            if vip is not None:
                print("  kubectl get services; openstack loadbalancer list", file=out)
            print("Stop with Ctrl-C.", file=out, flush=True)
            while not stop.wait(0.5):  # bounded, so the main thread keeps handling signals promptly
                pass
    print("Simulator stopped.", file=out, flush=True)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (from the start, so an early signal still stops cleanly)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread; rely on ``stop``
        return

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
