"""Two real ``landb-webhook serve`` processes against the simulator: only the Lease holder writes, and
when the holder is killed the other takes over once the Lease has expired.

Short lease timings make the takeover quick; every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.e2e_support import MEDIA_TYPE, WebhookProcess, http_post
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.simulator import ClientConfig, Simulator, seed_cluster
from landb_webhook.simulator.kube_store import LEASES
from support.external_dns import create_with_claim

NAMESPACE = "default"
LEASE = "landb-webhook"
TAKEOVER_DEADLINE = 20.0
"""Seconds the test waits for a takeover the 2 s lease makes happen in about 2 s."""


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TAKEOVER_DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return result


@pytest.fixture
def replicas(
    simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path
) -> Iterator[list[WebhookProcess]]:
    seed_cluster(simulator.state, ingress_nodes=2, workers=0)
    settings = {
        "OS_CLIENT_CONFIG_FILE": str(sim_clients.clouds_yaml),
        "LANDB_OS_CLOUD": sim_clients.cloud_name,
        "LANDB_KUBECONFIG": str(sim_clients.kubeconfig),
        "LANDB_OWNERSHIP_NAMESPACE": NAMESPACE,
        "LANDB_LEASE_DURATION": "2",
        "LANDB_LEASE_RENEW_DEADLINE": "1.5",
        "LANDB_LEASE_RETRY_PERIOD": "0.2",
        "LANDB_LOG_FORMAT": "json",
    }
    started: list[WebhookProcess] = []
    try:
        for identity in ("replica-a", "replica-b"):
            process = WebhookProcess(
                {**settings, "LANDB_LEASE_IDENTITY": identity}, tmp_path / f"{identity}.log"
            )
            process.start()
            started.append(process)
            if identity == "replica-a":
                wait_for(lambda: holder(simulator) == "replica-a", "replica-a to take the lease")
        yield started
    finally:
        for process in started:
            process.stop()


def holder(simulator: Simulator) -> str:
    lease = simulator.state.kube.get(LEASES, NAMESPACE, LEASE)
    return str((lease or {}).get("spec", {}).get("holderIdentity") or "")


def published(simulator: Simulator) -> set[str]:
    return {
        token.label
        for server in simulator.state.servers()
        for token in read_aliases(simulator.state.metadata(server.id)).load_tokens()
    }


def api_writes(simulator: Simulator) -> int:
    return sum(1 for change in simulator.state.metadata_history() if change.method != "direct")


def test_only_the_lease_holder_writes_and_the_other_takes_over_when_it_is_killed(
    simulator: Simulator, replicas: list[WebhookProcess]
) -> None:
    holder_process, standby = replicas

    status, body = http_post(
        standby.api_port, "/records", create_with_claim("app"), {"Content-Type": MEDIA_TYPE}
    )
    assert status == 503
    assert json.loads(body) == {
        "error": "changes refused: not the writer: the writer lease is held by replica-a"
    }
    assert api_writes(simulator) == 0
    assert published(simulator) == set()

    status, _ = http_post(
        holder_process.api_port, "/records", create_with_claim("app"), {"Content-Type": MEDIA_TYPE}
    )
    assert status == 204
    assert published(simulator) == {"app"}

    assert holder_process._process is not None
    holder_process._process.kill()  # SIGKILL: no release, the standby must wait for the lease to expire
    holder_process._process.wait()
    wait_for(lambda: holder(simulator) == "replica-b", "replica-b to take over the expired lease")

    status, body = http_post(
        standby.api_port, "/records", create_with_claim("web"), {"Content-Type": MEDIA_TYPE}
    )
    assert (status, body) == (204, b"")
    assert published(simulator) == {"app", "web"}
    assert '"writer lease acquired: this replica applies changes"' in standby.log_text()
