"""Upstream trouble as external-dns sees it: through the webhook's HTTP API, every fault injected into
the simulated Nova, Keystone and Kubernetes API is answered with 200, 204 or 503 (external-dns exits on
anything else), nothing is left half-done, and once the fault is gone the next loops converge.

The provider is wired as in production (support.landb_stack) with virtual backoff sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import HttpLoop, loop_over_http
from landb_simulator.state import FaultHandle, SimulatorState
from landb_webhook.backends import UpstreamError
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import read_aliases
from support.fake_time import FakeTime
from support.landb_stack import Stack, build_stack, serving_api
from support.waiting import eventually

OWNER = "faults"
EXTERNAL_DNS_SURVIVES = {200, 204, 503}
METADATA_WRITE = r"/servers/[^/]+/metadata(/.*)?$"
WAIT = 15.0
"""Seconds to wait for a watch, a delayed request or a cache to catch up: far above what they take."""


def wanted(*labels: str) -> list[Endpoint]:
    return [
        Endpoint(f"{label}.cern.ch", "A", ("192.0.2.1",), labels=(("resource", f"ingress/default/{label}"),))
        for label in labels
    ]


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    sim: Simulator
    stack: Stack
    client: httpx.Client
    node_clock: ManualClock
    lock_server: Callable[..., None]

    @property
    def state(self) -> SimulatorState:
        return self.sim.state

    def loop(self, *labels: str) -> HttpLoop:
        return loop_over_http(self.client, wanted(*labels), owner=OWNER)

    def converge(self, *labels: str) -> None:
        """Loops until one changes nothing (at most four); every one of them must succeed."""
        for _ in range(4):
            loop = self.loop(*labels)
            assert loop.succeeded, loop.statuses
            if loop.changes is None:
                return
        pytest.fail("no convergence within four loops")

    def aliases(self) -> dict[str, set[str]]:
        return {
            server.name: {t.label for t in read_aliases(server.metadata).load_tokens()}
            for server in self.state.servers()
        }

    def ingress_ids(self) -> list[str]:
        return [server.id for server in self.state.servers() if server.name.endswith(("-0", "-1", "-2"))]


@pytest.fixture
def harness(simulator: Simulator, sim_clients: ClientConfig, lock_server: Any) -> Iterator[Harness]:
    seed_cluster(simulator.state, ingress_nodes=3, workers=1)
    clock = ManualClock()
    stack = build_stack(
        sim_clients,
        FakeTime(),
        node_clock=clock,
        watch_timeout=1,
        upstream_timeout=0.5,
        request_timeout=3,
        node_cache_max_age=120,
    )
    try:
        with serving_api(stack) as client:
            yield Harness(simulator, stack, client, clock, lock_server)
    finally:
        stack.close()


Fault = Callable[[Harness], Callable[[], None] | None]
"""Injects a fault; returns how to lift it when clearing the injected faults is not enough."""


def nova_lasting(status: int, **options: Any) -> Fault:
    def inject(h: Harness) -> None:
        h.state.inject_fault(api="nova", status=status, times=None, **options)

    return inject


def metadata_writes(**options: Any) -> Fault:
    def inject(h: Harness) -> None:
        h.state.inject_fault(api="nova", path_pattern=METADATA_WRITE, times=None, **options)

    return inject


def locked_server(h: Harness) -> Callable[[], None]:
    server_id = h.ingress_ids()[1]
    h.lock_server(server_id)
    return lambda: h.lock_server(server_id, locked=False)


def server_in_error(h: Harness) -> Callable[[], None]:
    server_id = h.ingress_ids()[0]
    h.state.set_vm_state(server_id, "error")
    return lambda: h.state.set_vm_state(server_id, "active")


def quota_full(h: Harness) -> Callable[[], None]:
    h.state.set_quota(len(h.state.metadata(h.ingress_ids()[0])))
    return lambda: h.state.set_quota(128)


def keystone_down(h: Harness) -> None:
    h.state.expire_tokens()
    h.state.inject_fault(api="keystone", status=503, times=None)


NODES = "^/api/v1/nodes"


def node_watch_down(h: Harness) -> FaultHandle:
    """Fail every node list and watch; returns once the watch running before has ended and the next
    request met the fault, so that no successful contact can refresh the cache any more."""
    outage = h.state.inject_fault(api="kubernetes", path_pattern=NODES, status=503, times=None)
    eventually(lambda: outage.hits >= 1, what="the node watch to meet the outage", timeout=WAIT)
    return outage


def node_watch_down_for_too_long(h: Harness) -> None:
    node_watch_down(h)
    h.node_clock.now += h.stack.settings.node_cache_max_age + 1


def kubernetes_down(h: Harness) -> None:
    h.state.inject_fault(api="kubernetes", status=503, times=None)


FAULTS: dict[str, Fault] = {
    "nova 500 everywhere": nova_lasting(500),
    "nova 503 with a long Retry-After": nova_lasting(503, headers={"Retry-After": "60"}),
    "nova 429": nova_lasting(429, headers={"Retry-After": "1"}),
    "nova resets every connection": nova_lasting(503, reset=True),
    "nova loses every write's reply": metadata_writes(reset=True, after_processing=True),
    "nova answers writes slower than the call timeout": metadata_writes(status=None, delay=1.5),
    "nova refuses writes with 400": metadata_writes(status=400),
    "nova refuses writes with 403": metadata_writes(status=403),
    "a locked server": locked_server,
    "a server in ERROR": server_in_error,
    "a full metadata quota": quota_full,
    "keystone unavailable": keystone_down,
    "node list and watch failing past the cache's max age": node_watch_down_for_too_long,
    "kubernetes down (the ownership records cannot be read)": kubernetes_down,
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_external_dns_only_ever_sees_200_204_or_503_and_the_next_loops_converge(
    harness: Harness, fault: Fault
) -> None:
    harness.converge("app", "web")
    lift = fault(harness)
    for desired in (("app", "web", "api"), ("web", "api")):
        loop = harness.loop(*desired)
        assert set(loop.statuses) <= EXTERNAL_DNS_SURVIVES, loop.statuses
        assert 503 in loop.statuses or loop.succeeded

    harness.state.clear_faults()
    eventually(
        lambda: not harness.state.in_flight("nova"), what="delayed Nova requests answered", timeout=WAIT
    )
    if lift is not None:
        lift()
    _wait_for_fresh_node_cache(harness)  # it refreshes itself once the Kubernetes API answers again
    harness.converge("web", "api")
    assert set().union(*harness.aliases().values()) == {"web", "api"}


def test_a_token_expiring_mid_apply_costs_nothing_visible(harness: Harness) -> None:
    harness.converge("app")
    harness.state.inject_fault(api="nova", method="POST", path_pattern=METADATA_WRITE, status=None)
    harness.state.inject_fault(
        api="nova", method="POST", path_pattern=METADATA_WRITE, status=None, expire_tokens=True
    )
    harness.state.reset_api_calls()
    loop = harness.loop("app", "web")
    assert loop.statuses == [200, 200, 204]
    posts = [c.status for c in harness.state.api_calls("nova") if c.method == "POST"]
    assert posts.count(200) == 3 and set(posts) <= {200, 401}
    assert all(
        labels == {"app", "web"} for name, labels in harness.aliases().items() if name in _ingress(harness)
    )


def test_records_answers_from_a_recent_node_cache_while_nodes_cannot_be_listed_and_503_once_it_is_old(
    harness: Harness,
) -> None:
    """The node watch failing (the nodes API down, its RBAC revoked) leaves the cache aging; a full
    Kubernetes outage is a 503 at once anyway, since the ownership records live in a ConfigMap."""
    harness.converge("app")
    outage = node_watch_down(harness)
    harness.node_clock.now += harness.stack.settings.node_cache_max_age - 1
    assert harness.loop("app").statuses == [200, 200]  # converged: nothing to apply

    harness.node_clock.now += 2
    assert harness.loop("app").statuses == [503]
    with pytest.raises(UpstreamError, match="stale"):
        harness.stack.provider.records()

    outage.cancel()
    _wait_for_fresh_node_cache(harness)
    assert harness.loop("app").statuses == [200, 200]


def _ingress(harness: Harness) -> set[str]:
    ids = set(harness.ingress_ids())
    return {server.name for server in harness.state.servers() if server.id in ids}


def _wait_for_fresh_node_cache(harness: Harness) -> None:
    eventually(
        lambda: _answers(harness), what="the node cache to refresh after the Kubernetes outage", timeout=WAIT
    )


def _answers(harness: Harness) -> bool:
    try:
        harness.stack.nodes.nodes()
    except UpstreamError:
        return False
    return True
