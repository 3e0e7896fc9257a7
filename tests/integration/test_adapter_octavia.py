"""adapters/octavia.py through openstacksdk against the simulated Octavia and Neutron: the exact calls each
operation makes (as openstacksdk's own tests declare them), and what a tag write keeps."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from landb_webhook.adapters.octavia import OctaviaLoadBalancers
from landb_webhook.adapters.openstack import OpenStackServerStore
from landb_webhook.backends import LoadBalancer, UpstreamError

OTHER_PROJECT = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"


@pytest.fixture
def octavia(server_store: OpenStackServerStore) -> OctaviaLoadBalancers:
    return OctaviaLoadBalancers(server_store)


def calls(simulator: Any) -> list[tuple[str, str, str]]:
    return [
        (c.api, c.method, c.path.rsplit("/", 1)[-1])
        for c in simulator.state.api_calls()
        if c.api in ("octavia", "neutron")
    ]


def test_no_load_balancer_costs_one_call_and_no_floating_ip_read(simulator: Any, octavia: Any) -> None:
    simulator.state.reset_api_calls()

    assert octavia.load_balancers() == []
    assert calls(simulator) == [("octavia", "GET", "loadbalancers")]


def test_the_project_s_load_balancers_with_their_vip_s_floating_ips_in_two_calls(
    simulator: Any, octavia: Any
) -> None:
    store = simulator.state.octavia
    web = store.add_load_balancer(
        "web", "188.184.30.20", tags=["b", "landb-alias=web"], floating_ip="137.138.1.1"
    )
    plain = store.add_load_balancer("plain", "188.184.30.30")
    store.add_load_balancer("theirs", "188.184.30.40", project_id=OTHER_PROJECT)
    store.add_floating_ip("137.138.1.2")  # unbound
    simulator.state.reset_api_calls()

    found = sorted(octavia.load_balancers(), key=lambda lb: lb.name)

    assert found == [
        LoadBalancer(plain, "plain", "188.184.30.30"),
        LoadBalancer(web, "web", "188.184.30.20", ("137.138.1.1",), ("b", "landb-alias=web")),
    ]
    assert calls(simulator) == [("octavia", "GET", "loadbalancers"), ("neutron", "GET", "floatingips")]


def test_a_tag_write_reads_afresh_and_keeps_a_tag_another_writer_added(simulator: Any, octavia: Any) -> None:
    store = simulator.state.octavia
    lb = store.add_load_balancer("web", "188.184.30.20", tags=["landb-alias=old"])
    store.set_tags_direct(lb, ["landb-alias=old", "added-by-someone"])  # after our list, before our write
    simulator.state.reset_api_calls()

    octavia.update_tags(lb, add=["new"], remove=["old"])

    assert store.load_balancer(lb).tags == ("added-by-someone", "landb-alias=new")
    assert calls(simulator) == [("octavia", "GET", lb), ("octavia", "PUT", lb)]


def test_a_tag_write_that_changes_nothing_sends_no_put(simulator: Any, octavia: Any) -> None:
    """Every PUT puts the load balancer in PENDING_UPDATE: a retry of a write that landed sends none."""
    store = simulator.state.octavia
    lb = store.add_load_balancer("web", "188.184.30.20", tags=["landb-alias=web"])
    simulator.state.reset_api_calls()

    octavia.update_tags(lb, add=["web"], remove=["gone"])

    assert calls(simulator) == [("octavia", "GET", lb)]


def test_a_load_balancer_of_another_project_is_refused_by_octavia_and_not_retried(
    simulator: Any, octavia: Any
) -> None:
    lb = simulator.state.octavia.add_load_balancer("theirs", "188.184.30.40", project_id=OTHER_PROJECT)
    simulator.state.reset_api_calls()

    with pytest.raises(UpstreamError) as refused:
        octavia.update_tags(lb, add=["web"], remove=[])

    assert refused.value.upstream == "octavia"
    assert "HTTP 403" in refused.value.reason
    assert calls(simulator) == [("octavia", "GET", lb)]
    assert simulator.state.octavia.load_balancer(lb).tags == ()


def test_an_id_that_is_not_one_is_refused_before_any_call(simulator: Any, octavia: Any) -> None:
    simulator.state.reset_api_calls()

    with pytest.raises(ValueError, match="not a load balancer id"):
        octavia.update_tags("../servers", add=["web"], remove=[])
    assert calls(simulator) == []


def test_once_a_load_balancer_was_seen_its_floating_ips_are_listed_beside_the_load_balancers(
    simulator: Any, octavia: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read lists floating IPs only after it found a load balancer; the next ones list both at
    once (one round trip): each listing waits here until the other is in flight, which a listing sent
    after the other never sees (the wait breaks)."""
    store = simulator.state.octavia
    store.add_load_balancer("web", "188.184.30.20", tags=["landb-alias=web"], floating_ip="137.138.1.1")
    first = octavia.load_balancers()
    meeting = threading.Barrier(2, timeout=10)
    sent = OpenStackServerStore.call

    def call(self: OpenStackServerStore, action: str, operation: Any, *, api: str, **kwargs: Any) -> Any:
        if api in ("list_load_balancers", "list_floating_ips"):
            meeting.wait()
        return sent(self, action, operation, api=api, **kwargs)

    monkeypatch.setattr(OpenStackServerStore, "call", call)
    simulator.state.reset_api_calls()

    again = octavia.load_balancers()

    assert again == first and again[0].floating_ips == ("137.138.1.1",)
    assert sorted(calls(simulator)) == [
        ("neutron", "GET", "floatingips"),
        ("octavia", "GET", "loadbalancers"),
    ]
