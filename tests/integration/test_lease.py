"""Single writer: the simulator's Lease API, and the elector driven round by round with an injected clock.

The elector talks to the simulated Kubernetes API through the real kubernetes client; time is a
:class:`Clock` the test moves, so expiry and the renew deadline are exercised without waiting.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from structlog.testing import capture_logs

from landb_webhook.adapters.lease import LeaseElector
from landb_webhook.simulator import Simulator
from landb_webhook.simulator.kube_store import LEASES

NAMESPACE = "landb"
LEASE = "landb-webhook"
DURATION, RENEW_DEADLINE, RETRY = 15.0, 10.0, 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def leases(kube_api_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(kube_api_client)


@pytest.fixture
def make_elector(leases: client.CoordinationV1Api) -> Iterator[Callable[..., LeaseElector]]:
    made: list[LeaseElector] = []

    def make(identity: str, clock: Clock) -> LeaseElector:
        elector = LeaseElector(
            leases,
            namespace=NAMESPACE,
            name=LEASE,
            identity=identity,
            lease_duration=DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY,
            request_timeout=3.0,
            clock=clock,
        )
        made.append(elector)
        return elector

    yield make
    for elector in made:
        elector.stop()


def stored_spec(simulator: Simulator) -> dict[str, Any]:
    lease = simulator.state.kube.get(LEASES, NAMESPACE, LEASE)
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


# -- the simulator's Lease API, as the real API server behaves -------------------------------------------


def lease_body(holder: str) -> dict[str, Any]:
    return {
        "metadata": {"name": LEASE, "namespace": NAMESPACE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def test_leases_are_created_read_and_replaced_with_optimistic_concurrency(
    leases: client.CoordinationV1Api,
) -> None:
    created = leases.create_namespaced_lease(NAMESPACE, lease_body("a"))
    assert created.api_version == "coordination.k8s.io/v1"
    assert leases.read_namespaced_lease(LEASE, NAMESPACE).spec.holder_identity == "a"

    created.spec.holder_identity = "b"
    replaced = leases.replace_namespaced_lease(LEASE, NAMESPACE, created)
    assert replaced.metadata.resource_version != created.metadata.resource_version

    created.spec.holder_identity = "c"  # still carries the resourceVersion read before "b" was written
    with pytest.raises(ApiException) as stale:
        leases.replace_namespaced_lease(LEASE, NAMESPACE, created)
    assert stale.value.status == 409
    with pytest.raises(ApiException) as twice:
        leases.create_namespaced_lease(NAMESPACE, lease_body("d"))
    assert twice.value.status == 409
    assert leases.read_namespaced_lease(LEASE, NAMESPACE).spec.holder_identity == "b"


def test_an_invalid_lease_is_refused_with_422(leases: client.CoordinationV1Api) -> None:
    body = lease_body("a")
    body["spec"]["leaseDurationSeconds"] = 0
    with pytest.raises(ApiException) as invalid:
        leases.create_namespaced_lease(NAMESPACE, body)
    assert invalid.value.status == 422


def test_leases_are_listed_and_discovered(leases: client.CoordinationV1Api, kube_api_client: Any) -> None:
    leases.create_namespaced_lease(NAMESPACE, lease_body("a"))
    assert [item.metadata.name for item in leases.list_namespaced_lease(NAMESPACE).items] == [LEASE]
    groups = client.ApisApi(kube_api_client).get_api_versions()
    assert "coordination.k8s.io" in {group.name for group in groups.groups}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_shows_the_lease_holder(leases: client.CoordinationV1Api, sim_clients: Any) -> None:
    leases.create_namespaced_lease(NAMESPACE, lease_body("pod-1"))
    shown = subprocess.run(
        ["kubectl", "get", "lease", "-n", NAMESPACE], capture_output=True, text=True, check=True, timeout=30
    )
    assert shown.stdout.split("\n")[1].split()[:2] == [LEASE, "pod-1"]


# -- the elector -----------------------------------------------------------------------------------------


def test_the_first_replica_creates_the_lease_and_holds_it(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    clock = Clock()
    first = make_elector("replica-a", clock)

    assert first.try_acquire_or_renew()

    assert first.held()
    assert stored_spec(simulator)["holderIdentity"] == "replica-a"
    assert stored_spec(simulator)["leaseTransitions"] == 0


def test_another_replica_waits_until_the_lease_expires_then_takes_it_over(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    clock_a, clock_b = Clock(), Clock()
    holder, standby = make_elector("replica-a", clock_a), make_elector("replica-b", clock_b)
    assert holder.try_acquire_or_renew()

    assert not standby.try_acquire_or_renew()
    assert not standby.held()
    assert standby.holder() == "replica-a"

    clock_b.now += DURATION - 0.1  # not expired yet, as seen by the standby
    assert not standby.try_acquire_or_renew()

    clock_a.now += RENEW_DEADLINE  # the holder has not renewed for its renew deadline: it stops writing
    assert not holder.held()
    clock_b.now += 0.2  # and only later, the lease expires for the standby
    assert standby.try_acquire_or_renew()
    assert standby.held()
    assert stored_spec(simulator)["holderIdentity"] == "replica-b"
    assert stored_spec(simulator)["leaseTransitions"] == 1
    assert not holder.try_acquire_or_renew()  # it finds replica-b's renewal and stays a standby
    assert holder.holder() == "replica-b"


def test_renewing_keeps_the_lease_and_its_acquire_time(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    clock = Clock()
    holder, standby = make_elector("replica-a", clock), make_elector("replica-b", Clock())
    assert holder.try_acquire_or_renew()
    acquired = stored_spec(simulator)["acquireTime"]
    assert not standby.try_acquire_or_renew()

    for _ in range(10):  # far past the lease duration, renewing every retry period
        clock.now += RETRY
        assert holder.try_acquire_or_renew()
        assert holder.held()

    assert stored_spec(simulator)["acquireTime"] == acquired
    assert stored_spec(simulator)["leaseTransitions"] == 0


def test_a_holder_that_cannot_renew_stops_writing_at_the_renew_deadline(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    clock = Clock()
    holder = make_elector("replica-a", clock)
    assert holder.try_acquire_or_renew()
    simulator.state.inject_fault(api="kubernetes", path_pattern="/leases/", status=503, times=None)

    with capture_logs() as logs:
        clock.now += RENEW_DEADLINE - RETRY
        assert not holder.try_acquire_or_renew()
        assert holder.held()  # within the deadline: the lease cannot have gone to anyone else yet
        clock.now += RETRY
        assert not holder.try_acquire_or_renew()
        assert not holder.held()

    events = [entry["event"] for entry in logs]
    assert events.count("writer lease: call failed") == 1  # not once per round
    assert "writer lease lost: this replica stops applying changes" in events


def test_losing_the_race_for_the_lease_is_not_an_error(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    clock = Clock()
    first, second = make_elector("replica-a", clock), make_elector("replica-b", Clock())
    assert first.try_acquire_or_renew()
    clock.now += DURATION + 1  # expired for both; but the other replica renews between our read and write
    simulator.state.inject_fault(api="kubernetes", method="PUT", path_pattern="/leases/", status=409)

    assert not second.try_acquire_or_renew()
    assert not second.held()


def test_stopping_releases_the_lease_so_a_successor_takes_over_at_once(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    holder, successor = make_elector("replica-a", Clock()), make_elector("replica-b", Clock())
    assert holder.try_acquire_or_renew()
    assert not successor.try_acquire_or_renew()

    holder.stop()

    assert not holder.held()
    assert stored_spec(simulator)["holderIdentity"] == ""
    assert successor.try_acquire_or_renew()
    assert stored_spec(simulator)["holderIdentity"] == "replica-b"


def test_timings_out_of_order_are_refused(leases: client.CoordinationV1Api) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaseElector(
            leases, namespace=NAMESPACE, name=LEASE, identity="x", lease_duration=5, renew_deadline=5
        )
