"""adapters/octavia.py through openstacksdk against the simulated Octavia and Neutron: the exact calls each
operation makes (as openstacksdk's own tests declare them), and what a tag write keeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

import landb_simulator.octavia
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.octavia import OctaviaLoadBalancers
from landb_webhook.adapters.openstack import OpenStackSession
from landb_webhook.backends import LoadBalancer, UpstreamError

OTHER_PROJECT = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"


@pytest.fixture
def octavia(server_store: OpenStackServerStore) -> OctaviaLoadBalancers:
    return OctaviaLoadBalancers(server_store.session)


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


@pytest.mark.parametrize("count", [5, 4])
def test_every_page_is_read_the_filter_kept_and_the_next_asked_by_the_link_s_limit_and_marker(
    simulator: Any, octavia: Any, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """Octavia pages at its ``pagination_max_limit`` (here 2) and its next links keep no filter: the project
    filter is sent again with each page's limit and marker, as openstacksdk sends it; a full last page is
    followed by an empty one, which ends the list."""
    monkeypatch.setattr(landb_simulator.octavia, "MAX_PAGE", 2)
    store = simulator.state.octavia
    for i in range(count):
        store.add_load_balancer(f"lb-{i}", f"188.184.30.{i + 1}", floating_ip=f"137.138.1.{i + 1}")
    store.add_load_balancer("theirs", "188.184.30.40", project_id=OTHER_PROJECT)
    simulator.state.reset_api_calls()

    found = octavia.load_balancers()

    assert sorted(lb.name for lb in found) == [f"lb-{i}" for i in range(count)]
    assert all(lb.floating_ips == (f"137.138.1.{lb.vip_address.rsplit('.', 1)[1]}",) for lb in found)
    project = simulator.state.credentials.project_id
    assert [c.query for c in simulator.state.api_calls("octavia")] == [
        f"project_id={project}",
        f"project_id={project}&limit=2&marker={found[1].id}",
        f"project_id={project}&limit=2&marker={found[3].id}",
    ]
    assert calls(simulator)[-1] == ("neutron", "GET", "floatingips")


@pytest.mark.parametrize(("api", "path"), [("octavia", "/loadbalancers$"), ("neutron", "/floatingips$")])
def test_a_list_reply_that_is_not_a_list_is_an_invalid_response_and_retried(
    simulator: Any, octavia: Any, api: str, path: str
) -> None:
    simulator.state.octavia.add_load_balancer("web", "188.184.30.20", floating_ip="137.138.1.1")
    simulator.state.inject_fault(
        api=api, method="GET", path_pattern=path, status=200, body={"page": "of a proxy"}
    )
    simulator.state.reset_api_calls()

    found = octavia.load_balancers()

    assert [(lb.name, lb.floating_ips) for lb in found] == [("web", ("137.138.1.1",))]
    assert calls(simulator).count((api, "GET", path.strip("/$"))) == 2


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


def test_a_reply_that_is_not_a_load_balancer_is_an_invalid_response_and_retried(
    simulator: Any, octavia: Any
) -> None:
    store = simulator.state.octavia
    lb = store.add_load_balancer("web", "188.184.30.20", tags=["landb-alias=old"])
    simulator.state.inject_fault(
        api="octavia",
        method="GET",
        path_pattern=f"/loadbalancers/{lb}$",
        status=200,
        body={"page": "of a proxy"},
    )
    simulator.state.reset_api_calls()

    octavia.update_tags(lb, add=["new"], remove=["old"])

    assert store.load_balancer(lb).tags == ("landb-alias=new",)
    assert calls(simulator) == [("octavia", "GET", lb), ("octavia", "GET", lb), ("octavia", "PUT", lb)]


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


def test_an_admin_credential_lists_and_tags_its_own_project_s_load_balancers_only(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore], client_config: Any
) -> None:
    """Octavia and Neutron list every project's resources to an admin's token unless asked for one project;
    the adapter asks for the token's, and refuses to write another project's load balancer before its PUT."""
    store = simulator.state.octavia
    ours = store.add_load_balancer("ours", "188.184.30.1", floating_ip="137.138.30.1")
    theirs = store.add_load_balancer(
        "theirs", "188.184.30.40", project_id=OTHER_PROJECT, floating_ip="137.138.30.40"
    )
    store.add_floating_ip(  # another project's floating IP on our VIP port, which only an admin sees
        "137.138.30.2",
        port_id=store.load_balancer(ours).vip_port_id,
        fixed_ip_address="188.184.30.1",
        project_id=OTHER_PROJECT,
    )
    admin = OctaviaLoadBalancers(make_server_store(cloud=client_config.admin_cloud_name).session)
    simulator.state.reset_api_calls()

    found = admin.load_balancers()
    with pytest.raises(UpstreamError) as refused:
        admin.update_tags(theirs, add=["landb-alias=web"], remove=[])

    assert [(lb.id, lb.floating_ips) for lb in found] == [(ours, ("137.138.30.1",))]
    assert refused.value.upstream == "octavia" and not refused.value.retryable
    assert f"load balancer {theirs} belongs to project {OTHER_PROJECT}" in refused.value.reason
    assert calls(simulator) == [
        ("octavia", "GET", "loadbalancers"),
        ("neutron", "GET", "floatingips"),
        ("octavia", "GET", theirs),
    ]
    assert store.load_balancer(theirs).tags == ()


# -- a cloud without Octavia is not an outage --------------------------------------------------------------

NOT_SERVED = {"api": "octavia", "status": 404, "times": None, "body": "<html>404 Not Found</html>"}
"""A catalog entry with no Octavia behind it: every request under it answers 404, as a proxy's would."""


def test_a_cloud_without_a_load_balancer_service_has_none_and_says_so_once_naming_the_setting(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore]
) -> None:
    simulator.state.identity.catalog_without = {"load-balancer"}
    octavia = OctaviaLoadBalancers(make_server_store().session, absent_hint="set LANDB_LOADBALANCERS=false")

    with capture_logs() as logs:
        found = [octavia.load_balancers(), octavia.load_balancers()]

    assert found == [[], []]
    assert octavia.service() == ("absent", "not in the OpenStack catalog")
    assert [(log["event"], log.get("hint")) for log in logs if log["log_level"] == "warning"] == [
        (
            "this cloud has no load-balancer service: running without load balancers, only ingress nodes "
            "carry names",
            "set LANDB_LOADBALANCERS=false",
        )
    ]
    assert calls(simulator) == []


def test_a_load_balancer_api_answering_404_is_an_absent_service_not_an_outage(
    simulator: Any, octavia: Any
) -> None:
    simulator.state.inject_fault(**NOT_SERVED)

    assert octavia.load_balancers() == []
    assert octavia.service() == ("absent", "the load-balancer API of the catalog answers 404")


@pytest.mark.parametrize("down", [{"status": 503}, {"reset": True}])
def test_an_octavia_that_is_down_is_an_upstream_error(
    simulator: Any, octavia: Any, down: dict[str, Any]
) -> None:
    simulator.state.inject_fault(api="octavia", times=None, **down)

    with pytest.raises(UpstreamError) as failed:
        octavia.load_balancers()

    assert failed.value.upstream == "octavia"
    assert octavia.service() == ("unknown", "")


def test_a_404_after_octavia_answered_is_an_outage(simulator: Any, octavia: Any) -> None:
    assert octavia.load_balancers() == []
    simulator.state.inject_fault(**NOT_SERVED)

    with pytest.raises(UpstreamError, match="HTTP 404"):
        octavia.load_balancers()
    assert octavia.service() == ("present", "")


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
    sent = OpenStackSession.call

    def call(self: OpenStackSession, action: str, operation: Any, *, api: str, **kwargs: Any) -> Any:
        if api in ("list_load_balancers", "list_floating_ips"):
            meeting.wait()
        return sent(self, action, operation, api=api, **kwargs)

    monkeypatch.setattr(OpenStackSession, "call", call)
    simulator.state.reset_api_calls()

    again = octavia.load_balancers()

    assert again == first and again[0].floating_ips == ("137.138.1.1",)
    assert sorted(calls(simulator)) == [
        ("neutron", "GET", "floatingips"),
        ("octavia", "GET", "loadbalancers"),
    ]
