"""Peak resident memory of ``landb-webhook serve`` per request body size, or per endpoint count.

For each size, a fresh simulator (3 ingress nodes) and a fresh ``serve`` process get one AdjustEndpoints
and one ApplyChanges (creates, with their TXT claims) of valid names, each body about that size; the
process' ``VmHWM`` (/proc) is its peak. Bodies over ``LANDB_MAX_REQUEST_BODY`` are refused (503): pass
``--max-request-body`` to measure past the default.

    python -m bench.body_memory --sizes 0.06,0.5,1 [--max-request-body 33554432]

``--endpoints 8228,10000`` makes the bodies of that many endpoints instead (AdjustEndpoints: as many
names; ApplyChanges: half as many names created, each with its claim); more than
``LANDB_MAX_REQUEST_ENDPOINTS`` are refused (503): pass ``--max-request-endpoints`` to measure past it.

``--node-joining 500,1000`` instead decodes, in a fresh process and without a server, the ApplyChanges
body external-dns sends when a node joins a cluster of 500 ingress nodes x 1,000 names (every name's
addresses before and after), and prints its size, the decode's CPU time and its peak RSS over the start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.soak import call, rss_kib, webhook
from landb_simulator import Simulator, seed_cluster
from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_REQUEST_ENDPOINTS


def endpoint(index: int) -> dict[str, Any]:
    """A desired endpoint as external-dns sends it for an Ingress (~150 bytes)."""
    return {
        "dnsName": f"app-{index:06d}.cern.ch",
        "targets": ["188.184.1.2", "188.184.1.3", "188.184.1.4"],
        "recordType": "A",
        "labels": {"resource": f"ingress/default/app-{index:06d}"},
    }


def claim(index: int) -> dict[str, Any]:
    resource = f"ingress/default/app-{index:06d}"
    value = f'"heritage=external-dns,external-dns/owner=bench,external-dns/resource={resource}"'
    return {
        "dnsName": f"a-app-{index:06d}.cern.ch",
        "recordType": "TXT",
        "targets": [value],
        "labels": {"ownedRecord": f"app-{index:06d}.cern.ch"},
    }


def peak_rss_mib(pid: int) -> float:
    return rss_kib(pid, "VmHWM") / 1024


def bodies(size: int) -> tuple[list[Any], dict[str, Any]]:
    """An AdjustEndpoints and an ApplyChanges body of about ``size`` bytes each (never more)."""
    per_name = len(json.dumps(endpoint(0))) + 2
    names = max(1, size // per_name - 1)
    creates = max(1, size // (per_name + len(json.dumps(claim(0))) + 2) - 1)
    return bodies_of(names, creates)


def bodies_of(names: int, creates: int) -> tuple[list[Any], dict[str, Any]]:
    """AdjustEndpoints of ``names`` names; ApplyChanges creating ``creates`` names with their claims."""
    return [endpoint(i) for i in range(names)], {
        "create": [*(endpoint(i) for i in range(creates)), *(claim(i) for i in range(creates))]
    }


def measure(adjust: list[Any], apply: dict[str, Any], **settings: str) -> dict[str, Any]:
    """Both bodies to a fresh ``serve`` with ``settings`` (``LANDB_*``): statuses and peak RSS."""
    with Simulator() as sim, tempfile.TemporaryDirectory() as workdir:
        seed_cluster(sim.state, ingress_nodes=3, workers=1)
        with webhook(sim, Path(workdir), **settings) as (process, port):
            before = peak_rss_mib(process.pid)
            adjusted, _ = call(port, "POST", "/adjustendpoints", adjust)
            after_adjust = peak_rss_mib(process.pid)
            applied, _ = call(port, "POST", "/records", apply)
            return {
                "body_mib": round(max(len(json.dumps(adjust)), len(json.dumps(apply))) / 2**20, 3),
                "endpoints": [len(adjust), len(apply["create"])],
                "statuses": [adjusted, applied],
                "peak_mib_before": round(before),
                "peak_mib_adjust": round(after_adjust),
                "peak_mib_apply": round(peak_rss_mib(process.pid)),
            }


def node_joining_body(ingress: int, names: int) -> bytes:
    """What external-dns sends when node ``ingress + 1`` joins: each name updated from the addresses of
    ``ingress`` nodes to those of one more (A records; their TXT claims are not updated), as Go encodes it."""
    addresses = [f"188.{184 + n // 65536}.{n // 256 % 256}.{n % 256}" for n in range(ingress + 1)]

    def record(index: int, carriers: int) -> dict[str, Any]:
        return {
            "dnsName": f"app-{index:06d}.cern.ch",
            "targets": addresses[:carriers],
            "recordType": "A",
            "labels": {"owner": "default", "resource": f"ingress/default/app-{index:06d}"},
        }

    changes = {
        "updateOld": [record(i, ingress) for i in range(names)],
        "updateNew": [record(i, ingress + 1) for i in range(names)],
    }
    return json.dumps(changes, separators=(",", ":")).encode()


def decode_cost(ingress: int, names: int) -> dict[str, float]:
    """Decode the body of a node joining ``ingress`` x ``names`` in a fresh process: body MiB, the
    decode's CPU ms, and the process' peak RSS over its RSS just before, in MiB."""
    found = subprocess.run(
        [sys.executable, "-m", "bench.body_memory", "--decode-here", f"{ingress},{names}"],
        capture_output=True,
        check=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    answer: dict[str, float] = json.loads(found.stdout.splitlines()[-1])
    return answer


def _decode_here(ingress: int, names: int) -> dict[str, float]:
    from landb_webhook.webhook.wire import decode_changes  # noqa: PLC0415 (after the body is made)

    body = node_joining_body(ingress, names)
    pid = os.getpid()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # the peak (VmHWM) starts again from here
    start = rss_kib(pid)
    cpu = time.process_time()
    changes = decode_changes(body)
    cpu = time.process_time() - cpu
    assert len(changes.update_new) == names
    return {
        "body_mib": round(len(body) / 2**20, 2),
        "decode_cpu_ms": round(cpu * 1000),
        "peak_over_start_mib": round((rss_kib(pid, "VmHWM") - start) / 1024, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="0.06,0.5,1", help="body sizes in MiB, comma-separated")
    parser.add_argument("--max-request-body", type=int, default=DEFAULT_MAX_REQUEST_BODY)
    parser.add_argument("--endpoints", help="endpoint counts instead of sizes, comma-separated (see above)")
    parser.add_argument("--max-request-endpoints", type=int, default=DEFAULT_MAX_REQUEST_ENDPOINTS)
    parser.add_argument("--node-joining", metavar="INGRESS,NAMES", help="decode that body (see above)")
    parser.add_argument("--decode-here", metavar="INGRESS,NAMES", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.decode_here:
        print(json.dumps(_decode_here(*map(int, args.decode_here.split(",")))))
        return 0
    if args.node_joining:
        ingress, names = map(int, args.node_joining.split(","))
        print(f"node joining {ingress} x {names}: {json.dumps(decode_cost(ingress, names))}")
        return 0
    settings = {
        "LANDB_MAX_REQUEST_BODY": str(args.max_request_body),
        "LANDB_MAX_REQUEST_ENDPOINTS": str(args.max_request_endpoints),
    }
    if args.endpoints:
        cases = [bodies_of(int(count), int(count) // 2) for count in args.endpoints.split(",")]
    else:
        sizes = args.sizes.split(",")
        cases = [bodies(min(int(float(size) * 2**20), args.max_request_body)) for size in sizes]
    print("| body | endpoints | statuses | peak RSS before | after AdjustEndpoints | after ApplyChanges |")
    print("|---|---|---|---|---|---|")
    for adjust, apply in cases:
        row = measure(adjust, apply, **settings)
        print(
            f"| {row['body_mib']} MiB | {row['endpoints']} | {row['statuses']} "
            f"| {row['peak_mib_before']} MiB | {row['peak_mib_adjust']} MiB | {row['peak_mib_apply']} MiB |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
