"""Seconds from Keystone answering again to the first successful Records, after a lasting 401 on its
version document (the fault that used to wedge the process for good).

``landb-webhook serve`` runs against the simulator from a cold start; Records is called back to back,
as an impatient external-dns would; the fault is cleared after ``--fault-seconds``. Run:

    .venv/bin/python -m bench.keystone_recovery [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e.e2e_support import WebhookProcess, http_get, simulator_settings
from landb_simulator import Simulator, seed_cluster

VERSION_DOCUMENT = r"^/identity/v3/?$"


def one_run(workdir: Path, fault_seconds: float) -> tuple[float, int]:
    """(seconds from recovery to the first 200, Records answered 503 meanwhile)."""
    with Simulator() as simulator:
        seed_cluster(simulator.state, ingress_nodes=2, workers=1)
        clients = simulator.write_client_config(workdir / "clients")
        webhook = WebhookProcess(
            simulator_settings(clients),
            workdir / "webhook.log",
        )
        webhook.start()
        try:
            state = simulator.state
            state.inject_fault(
                api="keystone", method="GET", path_pattern=VERSION_DOCUMENT, status=401, times=None
            )
            failing_until = time.monotonic() + fault_seconds
            recovered: float | None = None
            failed_after_recovery = 0
            while True:
                if recovered is None and time.monotonic() >= failing_until:
                    state.clear_faults()
                    recovered = time.monotonic()
                status = http_get(webhook.api_port, "/records")[0]
                if recovered is not None:
                    if status == 200:
                        return time.monotonic() - recovered, failed_after_recovery
                    failed_after_recovery += 1
                    if time.monotonic() - recovered > 300:
                        raise RuntimeError("no successful Records 5 minutes after Keystone recovered")
        finally:
            webhook.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fault-seconds", type=float, default=20.0)
    options = parser.parse_args()
    seconds: list[float] = []
    for run in range(options.runs):
        with tempfile.TemporaryDirectory() as workdir:
            elapsed, failed = one_run(Path(workdir), options.fault_seconds)
        seconds.append(elapsed)
        print(f"run {run + 1}: first successful Records {elapsed:.2f} s after recovery, {failed} failed")
    print(f"median {statistics.median(seconds):.2f} s, worst {max(seconds):.2f} s over {options.runs} runs")


if __name__ == "__main__":
    main()
