"""Two real ``landb-webhook serve`` processes against the simulator: only the Lease holder writes; when
the holder is killed the other takes over once the Lease has expired; and a holder frozen in the middle
of an apply writes nothing more once it wakes up (the write fence).

Short lease timings make the takeover quick; every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.e2e_support import MEDIA_TYPE, WebhookProcess, http_post
from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import HttpLoop, create_with_claim, loop_over_http
from landb_simulator.kube_store import LEASES
from landb_simulator.state import MetadataChange
from landb_webhook.adapters.ownership import decode_record
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.provider.read.txt_registry import owned_name
from support.waiting import eventually

NAMESPACE = "default"
LEASE = "landb-webhook"
TAKEOVER_DEADLINE = 30.0
"""Seconds the test waits for a takeover the 6 s lease makes happen in about 6 s."""
INGRESS_NODES = 4
OWNER = "test"


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    return eventually(condition, what=what, timeout=TAKEOVER_DEADLINE, every=0.05)


@pytest.fixture
def replicas(
    simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path
) -> Iterator[list[WebhookProcess]]:
    seed_cluster(simulator.state, ingress_nodes=INGRESS_NODES, workers=0)
    # A write is sent only while the lease surely lasts one upstream timeout more (2 s of the 5 s renew
    # deadline: renewals may lag 3 s on a loaded machine); one write at a time, so a frozen holder has no
    # other request under way.
    settings = {
        "OS_CLIENT_CONFIG_FILE": str(sim_clients.clouds_yaml),
        "LANDB_OS_CLOUD": sim_clients.cloud_name,
        "LANDB_KUBECONFIG": str(sim_clients.kubeconfig),
        "LANDB_OWNERSHIP_NAMESPACE": NAMESPACE,
        "LANDB_LEASE_DURATION": "6",
        "LANDB_LEASE_RENEW_DEADLINE": "5",
        "LANDB_LEASE_RETRY_PERIOD": "0.2",
        "LANDB_UPSTREAM_TIMEOUT": "2",
        "LANDB_REQUEST_TIMEOUT": "14",
        "LANDB_WRITE_CONCURRENCY": "1",
        "LANDB_LOG_FORMAT": "json",
        "LANDB_DNS_WATCH": "false",  # no resolver but a loopback one
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


def wait_for_takeover(simulator: Simulator, standby: WebhookProcess, why: str) -> None:
    """Until the standby holds the Lease and knows it (its own reply has arrived, not only the API's
    record of it)."""
    wait_for(lambda: holder(simulator) == "replica-b", f"replica-b to take over {why}")
    wait_for(
        lambda: '"writer lease acquired: this replica applies changes"' in standby.log_text(),
        "replica-b to see its own acquisition",
    )


def published(simulator: Simulator) -> set[str]:
    return set().union(*published_per_node(simulator).values())


def published_per_node(simulator: Simulator) -> dict[str, set[str]]:
    state = simulator.state
    return {
        server.name: {token.label for token in read_aliases(state.metadata(server.id)).load_tokens()}
        for server in state.servers()
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

    status, body = http_post(
        holder_process.api_port, "/records", create_with_claim("app"), {"Content-Type": MEDIA_TYPE}
    )
    assert status == 204, body
    assert published(simulator) == {"app"}

    holder_process.kill()  # SIGKILL: no release, the standby must wait for the lease to expire
    wait_for_takeover(simulator, standby, "the expired lease")

    status, body = http_post(
        standby.api_port, "/records", create_with_claim("web"), {"Content-Type": MEDIA_TYPE}
    )
    assert (status, body) == (204, b"")
    assert published(simulator) == {"app", "web"}


def claimed(simulator: Simulator) -> set[str]:
    """The aliases whose TXT claim is stored in the ownership ConfigMap, as the API server has it."""
    stored = simulator.state.configmap(NAMESPACE, "landb-webhook-ownership") or {}
    return {owned_name(decode_record(value)).split(".")[0] for value in (stored.get("data") or {}).values()}


def desired(*labels: str) -> list[Endpoint]:
    return [Endpoint(f"{label}.cern.ch", "A", ("192.0.2.1",)) for label in labels]


def external_dns_loop(process: WebhookProcess, *labels: str) -> HttpLoop:
    with httpx.Client(base_url=f"http://127.0.0.1:{process.api_port}", timeout=30) as client:
        return loop_over_http(client, desired(*labels), owner=OWNER)


def write_order(simulator: Simulator, since: int = 0) -> str:
    """The metadata writes that landed (from the ``since``-th on), in order: what a failure says."""
    names = {server.id: server.name for server in simulator.state.servers()}
    return "\n".join(
        f"#{change.seq} {names.get(change.server_id, change.server_id)} {change.method} "
        f"{sorted(token.label for token in read_aliases(change.metadata).load_tokens())}"
        for change in simulator.state.metadata_history()[since:]
        if change.method != "direct"
    )


def test_a_holder_frozen_mid_apply_sends_nothing_more_once_another_replica_took_over(
    simulator: Simulator, replicas: list[WebhookProcess]
) -> None:
    holder_process, standby = replicas
    assert external_dns_loop(holder_process, "grafana").succeeded
    assert claimed(simulator) == {"grafana"}

    frozen = threading.Event()
    freeze_failed: list[BaseException] = []

    def freeze_after_first_write(change: MetadataChange) -> None:
        # Called as the write lands, before its reply leaves: the holder is waiting for that reply, and
        # the reply leaves only once every thread of the holder has stopped (WebhookProcess.freeze).
        if change.method != "direct" and not frozen.is_set():
            try:
                holder_process.freeze()
            except BaseException as error:  # said by the test's thread, not the simulator's
                freeze_failed.append(error)
            frozen.set()

    simulator.state.observe_metadata_changes(freeze_after_first_write)
    with ThreadPoolExecutor(1) as pool:
        stale = pool.submit(external_dns_loop, holder_process, "grafana", "app")
        try:
            wait_for(frozen.is_set, "the holder's first write of app")
            simulator.state.observe_metadata_changes(None)
            assert not freeze_failed, freeze_failed
            wait_for_takeover(simulator, standby, "from the frozen holder")
            taken_over = external_dns_loop(standby, "app", "login")  # grafana goes, login comes
            assert taken_over.succeeded, taken_over.statuses
        finally:
            landed_before_thaw = len(simulator.state.metadata_history())
            holder_process.thaw()
        woken = stale.result(timeout=60)

    assert woken.statuses[-1] == 503  # the rest of its apply abandoned
    assert '"apply abandoned: writer lease no longer certain' in holder_process.log_text()
    # Once woken it sent nothing more, so nothing the new holder wrote was undone: every node carries what
    # it wrote, with a claim each.
    assert not write_order(simulator, landed_before_thaw), (
        f"writes landed after the frozen holder woke up:\n{write_order(simulator, landed_before_thaw)}\n"
        f"every write:\n{write_order(simulator)}"
    )
    assert published_per_node(simulator) == {
        name: {"app", "login"} for name in published_per_node(simulator)
    }, write_order(simulator)
    assert claimed(simulator) == {"app", "login"}
    # And the next loop, on the holder, finds nothing left to do.
    settled = external_dns_loop(standby, "app", "login")
    assert settled.succeeded and settled.changes is None, settled
