"""DNS first's cost: a first publish of N names, each looked up before its first write, within the reply
deadline.

Knot DNS (bench/knot.py) serves ``cern.ch.`` on loopback as LanDB would: none of the N names exists but
``--taken`` of them, which another device answers (an A record). The provider is wired by the composition
root to the simulator (3 ingress nodes, ``--latency-ms`` on every Nova, Keystone and Kubernetes request,
as ``make bench``) with the DNS watch's resolver pointing at Knot, and runs external-dns' first loop:
Records, AdjustEndpoints, the plan, then ApplyChanges under the reply deadline the webhook sets
(``LANDB_REQUEST_TIMEOUT``). Printed: the lookups made (counted at the resolver port), how long they took
together, ApplyChanges' wall time against the deadline, and what was written and refused.

Run: .venv/bin/python -m bench.first_look                 (1,000 names, 10 taken, 50 ms latency)
     .venv/bin/python -m bench.first_look --names 2000 --latency-ms 0
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.knot import running_knot
from landb_simulator import Simulator, seed_cluster
from landb_simulator.external_dns import plan
from landb_webhook.backends import NameLookup
from landb_webhook.config import Settings
from landb_webhook.deadline import answering_by
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.propagation import Answer
from landb_webhook.logs import configure_logging
from landb_webhook.metrics import Metrics
from landb_webhook.wiring import build_adapters, provider_on

OWNER = "bench"
OTHER_DEVICE = "10.9.9.9"


@dataclass
class Counting:
    """The resolver port, each lookup counted and timed (first start to last end)."""

    resolver: NameLookup
    asked: int = 0
    first: float | None = None
    last: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def where(self) -> str:
        return self.resolver.where

    def resolve(self, dns_name: str) -> Answer:
        started = time.monotonic()
        answer = self.resolver.resolve(dns_name)
        ended = time.monotonic()
        with self.lock:
            self.asked += 1
            self.first = started if self.first is None else min(self.first, started)
            self.last = ended if self.last is None else max(self.last, ended)
        return answer


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--names", type=int, default=1000)
    parser.add_argument("--taken", type=int, default=10, help="names another device answers (refused)")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="added to every API request")
    parser.add_argument("--request-timeout", type=float, default=10.0, help="LANDB_REQUEST_TIMEOUT")
    parser.add_argument(
        "--without-lookups", action="store_true", help="LANDB_DNS_WATCH=false: the same apply, nothing asked"
    )
    args = parser.parse_args(argv)
    configure_logging("warning", "console")

    labels = [f"first{i}" for i in range(args.names)]
    taken = labels[: args.taken]
    with (
        tempfile.TemporaryDirectory() as directory,
        running_knot(Path(directory) / "knot", [f"{label} A {OTHER_DEVICE}" for label in taken]) as knot,
        Simulator() as sim,
    ):
        seed_cluster(sim.state, ingress_nodes=3, workers=1)
        if args.latency_ms > 0:
            for api in ("keystone", "nova", "kubernetes"):
                sim.state.inject_fault(api=api, status=None, times=None, delay=args.latency_ms / 1000)
        clients = sim.write_client_config(Path(directory))
        os.environ["OS_CLIENT_CONFIG_FILE"] = str(clients.clouds_yaml)
        settings = Settings(
            os_cloud=clients.cloud_name,
            kubeconfig=clients.kubeconfig,
            ownership_store="configmap",
            ownership_namespace="default",
            leader_election=False,
            events=False,
            dns_resolvers=[knot.address],
            dns_watch=not args.without_lookups,
            request_timeout=args.request_timeout,
        )
        metrics = Metrics.create(process_metrics=False)
        adapters = build_adapters(settings, metrics=metrics)
        counting = Counting(adapters.names) if adapters.names is not None else None
        provider = provider_on(replace(adapters, names=counting), settings, metrics)
        adapters.nodes.start()
        try:
            if not adapters.nodes.wait_synced(30):
                raise RuntimeError("the node cache did not sync")
            desired = [Endpoint(f"{label}.cern.ch", "A", ("192.0.2.1",), record_ttl=300) for label in labels]
            changes = plan(provider.records(), provider.adjust_endpoints(desired), owner=OWNER).changes
            started = time.monotonic()
            with answering_by(started + args.request_timeout):
                provider.apply_changes(changes)
            wall = time.monotonic() - started
            written = {
                e.dns_name
                for e in provider.records()
                if e.record_type == "A" and e.dns_name.startswith("first")
            }
        finally:
            adapters.close()
    asked = counting.asked if counting is not None else 0
    lookups = (counting.last or 0) - (counting.first or 0) if counting is not None else 0.0
    refused = metrics.registry.get_sample_value(
        "landb_webhook_refused_changes_total", {"reason": "dns_elsewhere"}
    )
    print(
        f"first publish of {args.names} names ({args.taken} answered by another device), "
        f"{args.latency_ms:g} ms latency: {asked} lookups in {lookups * 1000:.0f} ms; "
        f"ApplyChanges {wall * 1000:.0f} ms of the {args.request_timeout:g} s reply deadline; "
        f"{len(written)} names written, {refused:.0f} refused"
    )
    return 0 if wall < args.request_timeout and asked == (0 if args.without_lookups else args.names) else 1


if __name__ == "__main__":
    raise SystemExit(main())
