"""Single writer: the Lease API, and the elector driven round by round with an injected clock.

The elector talks through the real kubernetes client to the simulator and, where the test needs no
injected fault, to a real kube-apiserver as the webhook's ServiceAccount bound by deploy/rbac.yaml. Time
is a :class:`Clock` the test moves, so expiry and the renew deadline are exercised without waiting.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from structlog.testing import capture_logs

from landb_simulator import Simulator
from landb_webhook.adapters.kubernetes import json_body
from landb_webhook.adapters.lease import LeaseElector
from support.clusters import KubeCluster

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
def namespace(kube_cluster: KubeCluster) -> str:
    """The webhook's namespace: where deploy/rbac.yaml lets it hold a Lease."""
    return kube_cluster.namespace


@pytest.fixture
def make_elector(leases: client.CoordinationV1Api, namespace: str) -> Iterator[Callable[..., LeaseElector]]:
    made: list[LeaseElector] = []

    def make(identity: str, clock: Clock) -> LeaseElector:
        elector = LeaseElector(
            leases,
            namespace=namespace,
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


def stored_spec(leases: client.CoordinationV1Api, namespace: str) -> dict[str, Any]:
    """The Lease's spec as the API server stores it (raw JSON: holderIdentity, renewTime, ...)."""
    spec: dict[str, Any] = json_body(leases.read_namespaced_lease(LEASE, namespace, _preload_content=False))[
        "spec"
    ]
    return spec


# -- the Lease API (the simulator behaves as the real API server) ----------------------------------------


def lease_body(holder: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": LEASE, "namespace": namespace},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def test_leases_are_created_read_and_replaced_with_optimistic_concurrency(
    leases: client.CoordinationV1Api, namespace: str
) -> None:
    created = leases.create_namespaced_lease(namespace, lease_body("a", namespace))
    assert created.api_version == "coordination.k8s.io/v1"
    assert leases.read_namespaced_lease(LEASE, namespace).spec.holder_identity == "a"

    created.spec.holder_identity = "b"
    replaced = leases.replace_namespaced_lease(LEASE, namespace, created)
    assert replaced.metadata.resource_version != created.metadata.resource_version

    created.spec.holder_identity = "c"  # still carries the resourceVersion read before "b" was written
    with pytest.raises(ApiException) as stale:
        leases.replace_namespaced_lease(LEASE, namespace, created)
    assert stale.value.status == 409
    with pytest.raises(ApiException) as twice:
        leases.create_namespaced_lease(namespace, lease_body("d", namespace))
    assert twice.value.status == 409
    assert leases.read_namespaced_lease(LEASE, namespace).spec.holder_identity == "b"


def test_an_invalid_lease_is_refused_with_422(leases: client.CoordinationV1Api, namespace: str) -> None:
    body = lease_body("a", namespace)
    body["spec"]["leaseDurationSeconds"] = 0
    with pytest.raises(ApiException) as invalid:
        leases.create_namespaced_lease(namespace, body)
    assert invalid.value.status == 422


def test_the_simulator_lists_and_discovers_leases(
    simulator: Simulator, leases: client.CoordinationV1Api, kube_api_client: Any, namespace: str
) -> None:
    """(The webhook's ServiceAccount may not list leases on a real cluster: it never needs to.)"""
    leases.create_namespaced_lease(namespace, lease_body("a", namespace))
    assert [item.metadata.name for item in leases.list_namespaced_lease(namespace).items] == [LEASE]
    groups = client.ApisApi(kube_api_client).get_api_versions()
    assert "coordination.k8s.io" in {group.name for group in groups.groups}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_shows_the_lease_holder(
    leases: client.CoordinationV1Api, sim_clients: Any, namespace: str
) -> None:
    leases.create_namespaced_lease(namespace, lease_body("pod-1", namespace))
    shown = subprocess.run(
        ["kubectl", "get", "lease", "-n", namespace], capture_output=True, text=True, check=True, timeout=30
    )
    assert shown.stdout.split("\n")[1].split()[:2] == [LEASE, "pod-1"]


# -- the elector -----------------------------------------------------------------------------------------


def test_the_first_replica_creates_the_lease_and_holds_it(
    leases: client.CoordinationV1Api, namespace: str, make_elector: Callable[..., LeaseElector]
) -> None:
    clock = Clock()
    first = make_elector("replica-a", clock)

    assert first.try_acquire_or_renew()

    assert first.held()
    assert stored_spec(leases, namespace)["holderIdentity"] == "replica-a"
    assert stored_spec(leases, namespace)["leaseTransitions"] == 0


def test_another_replica_waits_until_the_lease_expires_then_takes_it_over(
    leases: client.CoordinationV1Api, namespace: str, make_elector: Callable[..., LeaseElector]
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
    assert stored_spec(leases, namespace)["holderIdentity"] == "replica-b"
    assert stored_spec(leases, namespace)["leaseTransitions"] == 1
    assert not holder.try_acquire_or_renew()  # it finds replica-b's renewal and stays a standby
    assert holder.holder() == "replica-b"


def test_renewing_keeps_the_lease_and_its_acquire_time(
    leases: client.CoordinationV1Api, namespace: str, make_elector: Callable[..., LeaseElector]
) -> None:
    clock = Clock()
    holder, standby = make_elector("replica-a", clock), make_elector("replica-b", Clock())
    assert holder.try_acquire_or_renew()
    acquired = stored_spec(leases, namespace)["acquireTime"]
    assert not standby.try_acquire_or_renew()

    for _ in range(10):  # far past the lease duration, renewing every retry period
        clock.now += RETRY
        assert holder.try_acquire_or_renew()
        assert holder.held()

    assert stored_spec(leases, namespace)["acquireTime"] == acquired
    assert stored_spec(leases, namespace)["leaseTransitions"] == 0


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


def test_a_tenure_lasts_the_renew_deadline_from_the_last_renewal_sent(
    make_elector: Callable[..., LeaseElector],
) -> None:
    clock = Clock()
    holder = make_elector("replica-a", clock)
    assert holder.try_acquire_or_renew()
    tenure = holder.tenure()
    assert tenure is not None
    assert holder.held_until(tenure) == clock.now + RENEW_DEADLINE

    clock.now += RETRY
    assert holder.try_acquire_or_renew()

    assert holder.tenure() == tenure  # renewed in time: the same unbroken tenure
    assert holder.held_until(tenure) == clock.now + RENEW_DEADLINE


def test_a_lapse_ends_the_tenure_even_when_the_same_replica_renews_afterwards(
    simulator: Simulator, make_elector: Callable[..., LeaseElector]
) -> None:
    """Past the renew deadline another replica may have taken the Lease and written: an apply begun
    before the lapse must not write on after it, whoever holds the Lease now."""
    clock = Clock()
    holder = make_elector("replica-a", clock)
    assert holder.try_acquire_or_renew()
    before = holder.tenure()
    assert before is not None
    outage = simulator.state.inject_fault(api="kubernetes", path_pattern="/leases/", status=503, times=None)
    clock.now += RENEW_DEADLINE
    assert not holder.try_acquire_or_renew()
    assert holder.tenure() is None
    outage.cancel()

    assert holder.try_acquire_or_renew()  # nobody took it meanwhile: the same replica renews

    after = holder.tenure()
    assert after is not None and after != before
    assert holder.held_until(before) == -math.inf
    assert holder.held_until(after) == clock.now + RENEW_DEADLINE


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
    leases: client.CoordinationV1Api, namespace: str, make_elector: Callable[..., LeaseElector]
) -> None:
    holder, successor = make_elector("replica-a", Clock()), make_elector("replica-b", Clock())
    assert holder.try_acquire_or_renew()
    assert not successor.try_acquire_or_renew()

    holder.stop()

    assert not holder.held()
    assert stored_spec(leases, namespace)["holderIdentity"] == ""
    assert successor.try_acquire_or_renew()
    assert stored_spec(leases, namespace)["holderIdentity"] == "replica-b"


def test_timings_out_of_order_are_refused(leases: client.CoordinationV1Api, namespace: str) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaseElector(
            leases,
            namespace=namespace,
            name=LEASE,
            identity="x",
            lease_duration=5,
            renew_deadline=5,
            retry_period=RETRY,
            request_timeout=3.0,
        )
