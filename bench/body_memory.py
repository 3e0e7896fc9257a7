"""Peak resident memory of ``landb-webhook serve`` per request body size.

For each size, a fresh simulator (3 ingress nodes) and a fresh ``serve`` process get one AdjustEndpoints
and one ApplyChanges (creates, with their TXT claims) of valid names, each body about that size; the
process' ``VmHWM`` (/proc) is its peak. Bodies over ``LANDB_MAX_REQUEST_BODY`` are refused (413): pass
``--max-request-body`` to measure past the default.

    python -m bench.body_memory --sizes 0.06,0.5,1 [--max-request-body 33554432]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.soak import call, rss_kib, webhook
from landb_simulator import Simulator, seed_cluster
from landb_webhook.config import DEFAULT_MAX_REQUEST_BODY


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
    return [endpoint(i) for i in range(names)], {
        "create": [*(endpoint(i) for i in range(creates)), *(claim(i) for i in range(creates))]
    }


def measure(size: int, max_request_body: int) -> dict[str, Any]:
    adjust, apply = bodies(size)
    with Simulator() as sim, tempfile.TemporaryDirectory() as workdir:
        seed_cluster(sim.state, ingress_nodes=3, workers=1)
        with webhook(sim, Path(workdir), LANDB_MAX_REQUEST_BODY=str(max_request_body)) as (process, port):
            before = peak_rss_mib(process.pid)
            adjusted, _ = call(port, "POST", "/adjustendpoints", adjust)
            after_adjust = peak_rss_mib(process.pid)
            applied, _ = call(port, "POST", "/records", apply)
            return {
                "body_mib": round(size / 2**20, 3),
                "names": len(adjust),
                "statuses": [adjusted, applied],
                "peak_mib_before": round(before),
                "peak_mib_adjust": round(after_adjust),
                "peak_mib_apply": round(peak_rss_mib(process.pid)),
            }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="0.06,0.5,1", help="body sizes in MiB, comma-separated")
    parser.add_argument("--max-request-body", type=int, default=DEFAULT_MAX_REQUEST_BODY)
    args = parser.parse_args(argv)
    print("| body | names | statuses | peak RSS before | after AdjustEndpoints | after ApplyChanges |")
    print("|---|---|---|---|---|---|")
    for size_mib in args.sizes.split(","):
        row = measure(min(int(float(size_mib) * 2**20), args.max_request_body), args.max_request_body)
        print(
            f"| {row['body_mib']} MiB | {row['names']} | {row['statuses']} | {row['peak_mib_before']} MiB "
            f"| {row['peak_mib_adjust']} MiB | {row['peak_mib_apply']} MiB |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
