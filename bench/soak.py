"""Soak: many consecutive steady-state external-dns loops against one ``landb-webhook serve`` process.

The simulator runs in this process; the webhook is a real ``landb-webhook serve`` child process (the
memory measured is its own), driven over HTTP the way external-dns drives it: GET /records, then
POST /adjustendpoints with the desired endpoints. Once converged a loop must plan nothing, so no
POST /records is ever sent; any difference between Records and AdjustEndpoints stops the soak.

Reported: loops run, loops that would have written (must be 0), metadata and ownership writes seen by
the simulator (must be 0), and the webhook's resident memory (VmRSS) after warm-up and at the end.
Run: make soak   (or: .venv/bin/python -m bench.soak --loops 2000 --aliases 40)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from landb_simulator import Simulator, seed_cluster
from landb_simulator.kube_store import CONFIGMAPS

MEDIA_TYPE = "application/external.dns.webhook+json;version=1"
OWNER = "soak"
READY_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """The process' resident set size from /proc (Linux); ``VmHWM`` for its peak so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc status")


def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Accept", MEDIA_TYPE)
    request.add_header("Content-Type", MEDIA_TYPE)  # as external-dns sends it; POSTs need it
    try:
        with urllib.request.urlopen(request, timeout=15) as reply:
            raw = reply.read()
            return reply.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def a_records(endpoints: Sequence[dict[str, Any]]) -> set[tuple[str, tuple[str, ...]]]:
    return {
        (e["dnsName"], tuple(sorted(e.get("targets") or ()))) for e in endpoints if e.get("recordType") == "A"
    }


def desired(count: int) -> list[dict[str, Any]]:
    return [
        {"dnsName": f"soak{i:03d}.cern.ch", "recordType": "A", "targets": ["192.0.2.1"], "recordTTL": 300}
        for i in range(count)
    ]


def claims(endpoints: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    value = f'"heritage=external-dns,external-dns/owner={OWNER},external-dns/resource=ingress/default/soak"'
    return [
        {
            "dnsName": f"a-{e['dnsName']}",
            "recordType": "TXT",
            "targets": [value],
            "labels": {"ownedRecord": e["dnsName"]},
        }
        for e in endpoints
    ]


@contextmanager
def webhook(sim: Simulator, workdir: Path, **settings: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``landb-webhook serve`` against ``sim``, with ``settings`` (``LANDB_*`` variables) added."""
    config = sim.write_client_config(workdir)
    api_port, health_port = free_port(), free_port()
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LANDB_", "OS_", "KUBECONFIG"))},
        "OS_CLIENT_CONFIG_FILE": str(config.clouds_yaml),
        "LANDB_OS_CLOUD": config.cloud_name,
        "LANDB_KUBECONFIG": str(config.kubeconfig),
        "LANDB_OWNERSHIP_NAMESPACE": "default",
        "LANDB_API_PORT": str(api_port),
        "LANDB_HEALTH_HOST": "127.0.0.1",
        "LANDB_HEALTH_PORT": str(health_port),
        "LANDB_LOG_LEVEL": "warning",
        "LANDB_DNS_WATCH": "false",  # no resolver but a loopback one
        **settings,
    }
    with (workdir / "webhook.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "landb_webhook", "serve"], env=environment, stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while True:
                try:
                    if call(api_port, "GET", "/records")[0] == 200:
                        break
                except OSError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the webhook did not start; see {workdir / 'webhook.log'}")
                time.sleep(0.1)
            yield process, api_port
        finally:
            process.terminate()
            process.wait(30)


def one_loop(port: int, wanted: list[dict[str, Any]]) -> bool:
    """One steady-state loop; True if external-dns would have sent changes."""
    status, current = call(port, "GET", "/records")
    if status != 200:
        raise RuntimeError(f"GET /records answered {status}: {current}")
    status, adjusted = call(port, "POST", "/adjustendpoints", wanted)
    if status != 200:
        raise RuntimeError(f"POST /adjustendpoints answered {status}: {adjusted}")
    return a_records(current) != a_records(adjusted)


def soak(loops: int, aliases: int, warmup: int, ingress: int) -> dict[str, Any]:
    with Simulator() as sim, tempfile.TemporaryDirectory(prefix="landb-soak-") as tmp:
        seed_cluster(sim.state, ingress_nodes=ingress, workers=1)
        wanted = desired(aliases)
        with webhook(sim, Path(tmp)) as (process, port):
            status, reply = call(port, "POST", "/records", {"create": [*wanted, *claims(wanted)]})
            if status != 204:
                raise RuntimeError(f"the first apply answered {status}: {reply}")
            for _ in range(warmup):
                one_loop(port, wanted)
            writes_before = len(sim.state.metadata_history())
            configmap = sim.state.kube.get(CONFIGMAPS, "default", "landb-webhook-ownership") or {}
            claims_version = configmap.get("metadata", {}).get("resourceVersion")
            rss_start = rss_kib(process.pid)
            would_write = 0
            samples = []
            for number in range(1, loops + 1):
                would_write += one_loop(port, wanted)
                if number % 500 == 0 or number == loops:
                    samples.append((number, rss_kib(process.pid)))
                    sim.state.reset_api_calls()  # the simulator's own call log, not the webhook's memory
            configmap = sim.state.kube.get(CONFIGMAPS, "default", "landb-webhook-ownership") or {}
            return {
                "loops": loops,
                "aliases": aliases,
                "ingress_nodes": ingress,
                "loops_that_would_write": would_write,
                "metadata_writes": len(sim.state.metadata_history()) - writes_before,
                "ownership_rewritten": configmap.get("metadata", {}).get("resourceVersion") != claims_version,
                "rss_kib_after_warmup": rss_start,
                "rss_kib_samples": samples,
                "rss_kib_end": samples[-1][1],
            }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--aliases", type=int, default=40)
    parser.add_argument("--ingress", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args(argv)
    result = soak(args.loops, args.aliases, args.warmup, args.ingress)
    for key, value in result.items():
        print(f"{key:24} {value}")
    settled = result["loops_that_would_write"] == 0 and result["metadata_writes"] == 0
    settled = settled and not result["ownership_rewritten"]
    print(
        "steady state held: no loop planned a change, nothing was written" if settled else "WROTE SOMETHING"
    )
    return 0 if settled else 1


if __name__ == "__main__":
    raise SystemExit(main())
