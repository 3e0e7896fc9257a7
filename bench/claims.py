"""Claims stored per second: ``N`` TXT claims written in one apply into the ownership ConfigMaps.

    .venv/bin/python -m bench.claims 1000 8000

Against the simulator's Kubernetes API on loopback (no injected latency), through the ConfigMap store the
service uses, with its default size limit. Each count starts from an empty namespace; the figure is the
wall time of the one ``apply`` (planning, encoding and the ConfigMap writes), the single writer's time.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client

from landb_simulator import Simulator
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.config import Settings
from landb_webhook.provider.read.txt_registry import claim_record
from landb_webhook.wiring import watch_options


def seconds_to_store(count: int, kubeconfig: Path, namespace: str) -> float:
    store = ConfigMapOwnershipStore(
        client.CoreV1Api(api_client_for(kubeconfig)),
        namespace=namespace,
        name="claims",
        request_timeout=60,
        watch=watch_options(Settings()),  # never started: the one apply is timed
    )
    claims = [claim_record(f"app{i:05d}.cern.ch", "bench") for i in range(count)]
    started = time.perf_counter()
    store.apply(claims, [])
    elapsed = time.perf_counter() - started
    assert len(store.records()) == count
    return elapsed


def main(counts: list[int]) -> None:
    with Simulator() as sim, tempfile.TemporaryDirectory() as directory:
        config = sim.write_client_config(Path(directory))
        for count in counts:
            elapsed = seconds_to_store(count, config.kubeconfig, namespace=f"bench-{count}")
            print(f"{count:>6} claims in one apply: {elapsed:6.2f} s, {count / elapsed:8.0f} claims/s")


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [1000, 8000])
