"""The simulated Octavia (and the floating IPs of Neutron), through openstacksdk and raw HTTP: the Octavia
contracts of docs/landb-nova-facts.md (tags replaced by PUT, 409 while PENDING_*, exact filters, 403 for
another project's load balancer)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openstack
import pytest
from openstack import exceptions
from openstack.connection import Connection

from landb_simulator import ApiCall, ClientConfig, Simulator

TokenFactory = Callable[[str], str]
OTHER_PROJECT = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"


@pytest.fixture
def conn(sim_clients: ClientConfig) -> Iterator[Connection]:
    connection = openstack.connect(cloud=sim_clients.cloud_name)
    yield connection
    connection.close()


@pytest.fixture
def octavia_http(simulator: Simulator, keystone_token: TokenFactory) -> Iterator[Callable[..., httpx.Client]]:
    """Raw HTTP to ``/load-balancer/v2`` (and, with ``api="network"``, to Neutron) as one of the users."""
    clients: list[httpx.Client] = []

    def make(user: str = simulator.state.credentials.username, api: str = "load-balancer/v2") -> httpx.Client:
        client = httpx.Client(
            base_url=f"{simulator.url}/{api}", headers={"X-Auth-Token": keystone_token(user)}, timeout=10
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def put_tags(http: httpx.Client, lb_id: str, tags: Any) -> httpx.Response:
    return http.put(f"/lbaas/loadbalancers/{lb_id}", json={"loadbalancer": {"tags": tags}})


# -- finding a load balancer -----------------------------------------------------------------------


def test_the_sdk_finds_a_load_balancer_by_its_vip_with_one_filtered_call(
    simulator: Simulator, conn: Connection
) -> None:
    octavia = simulator.state.octavia
    wanted = octavia.add_load_balancer("kube-service-a", "188.184.30.10")
    octavia.add_load_balancer("kube-service-b", "188.184.30.100")
    simulator.state.reset_api_calls()

    found = list(conn.load_balancer.load_balancers(vip_address="188.184.30.10"))

    assert [lb.id for lb in found] == [wanted]
    (lb,) = found
    assert (lb.name, lb.vip_address, lb.provisioning_status, lb.operating_status) == (
        "kube-service-a",
        "188.184.30.10",
        "ACTIVE",
        "ONLINE",
    )
    assert lb.vip_port_id == octavia.load_balancer(wanted).vip_port_id
    assert lb.project_id == simulator.state.credentials.project_id
    assert lb.tags == []
    assert simulator.state.api_calls("octavia") == [
        ApiCall("octavia", "GET", "/load-balancer/v2.0/lbaas/loadbalancers", 200, "vip_address=188.184.30.10")
    ]


def test_vip_address_is_an_exact_match(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    simulator.state.octavia.add_load_balancer("lb", "188.184.30.100")
    http = octavia_http()

    for almost in ("188.184.30.10", "188.184.30.1", "188.184.30.100,188.184.30.10"):
        listed = http.get("/lbaas/loadbalancers", params={"vip_address": almost})
        assert listed.status_code == 200
        assert listed.json()["loadbalancers"] == []


def test_an_unknown_or_repeated_filter_is_a_400(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    simulator.state.octavia.add_load_balancer("lb", "188.184.30.10")
    http = octavia_http()

    for query in ("vip=188.184.30.10", "vip_address=188.184.30.10&vip_address=188.184.30.11"):
        refused = http.get(f"/lbaas/loadbalancers?{query}")
        assert refused.status_code == 400
        assert refused.json()["faultstring"] == "One or more arguments are either duplicate or invalid"


def test_tag_filters_follow_octavia(simulator: Simulator, octavia_http: Callable[..., httpx.Client]) -> None:
    octavia = simulator.state.octavia
    both = octavia.add_load_balancer("both", "188.184.30.1", tags=["landb-alias=a", "landb-alias=b"])
    only_a = octavia.add_load_balancer("only-a", "188.184.30.2", tags=["landb-alias=a"])
    untagged = octavia.add_load_balancer("untagged", "188.184.30.3")
    http = octavia_http()

    def names(query: str) -> set[str]:
        listed = http.get(f"/lbaas/loadbalancers?{query}")
        assert listed.status_code == 200, listed.text
        return {lb["id"] for lb in listed.json()["loadbalancers"]}

    assert names("tags=landb-alias%3Da") == {both, only_a}
    assert names("tags=landb-alias%3Da&tags=landb-alias%3Db") == {both}
    assert names("tags=landb-alias%3Da,landb-alias%3Db") == {both}  # a comma splits a filter value
    assert names("tags-any=landb-alias%3Db,landb-alias%3Dzzz") == {both}
    assert names("not-tags=landb-alias%3Da,landb-alias%3Db") == {only_a, untagged}
    assert names("not-tags-any=landb-alias%3Da") == {untagged}
    assert names("tags=LANDB-ALIAS%3Da") == set()  # case-sensitive


def test_list_pages_with_limit_and_marker(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    created = {simulator.state.octavia.add_load_balancer(f"lb-{i}", f"188.184.31.{i}") for i in range(3)}
    http = octavia_http()

    first = http.get("/lbaas/loadbalancers", params={"limit": 2}).json()
    (link,) = [link for link in first["loadbalancers_links"] if link["rel"] == "next"]
    rest = http.get(link["href"]).json()

    assert len(first["loadbalancers"]) == 2
    assert {lb["id"] for lb in first["loadbalancers"] + rest["loadbalancers"]} == created
    assert [link["rel"] for link in rest["loadbalancers_links"]] == ["previous"]


def test_show_an_unknown_load_balancer_is_404(octavia_http: Callable[..., httpx.Client]) -> None:
    missing = octavia_http().get("/lbaas/loadbalancers/4b1c8a39-0d7e-4c55-9b2f-6f3e0b1c2d3e")

    assert missing.status_code == 404
    assert missing.json()["faultstring"] == "Load Balancer 4b1c8a39-0d7e-4c55-9b2f-6f3e0b1c2d3e not found."


# -- projects and roles ----------------------------------------------------------------------------


def test_another_projects_load_balancer_is_invisible_in_lists_and_403_when_named(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    octavia = simulator.state.octavia
    foreign = octavia.add_load_balancer("theirs", "188.184.32.1", project_id=OTHER_PROJECT)
    ours = octavia.add_load_balancer("ours", "188.184.32.2")
    member = octavia_http()

    listed = member.get("/lbaas/loadbalancers").json()["loadbalancers"]
    assert [lb["id"] for lb in listed] == [ours]
    assert (
        member.get("/lbaas/loadbalancers", params={"vip_address": "188.184.32.1"}).json()["loadbalancers"]
        == []
    )
    for response in (
        member.get(f"/lbaas/loadbalancers/{foreign}"),
        put_tags(member, foreign, ["landb-alias=stolen"]),
        member.get("/lbaas/loadbalancers", params={"project_id": OTHER_PROJECT}),
    ):
        assert response.status_code == 403
        assert response.json()["faultstring"] == "Policy does not allow this request to be performed."
    assert octavia.load_balancer(foreign).tags == ()

    admin = octavia_http(simulator.state.credentials.admin_username)
    assert {lb["id"] for lb in admin.get("/lbaas/loadbalancers").json()["loadbalancers"]} == {foreign, ours}


def test_a_reader_may_look_but_not_tag(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    lb = simulator.state.octavia.add_load_balancer("lb", "188.184.32.3")
    reader = octavia_http(simulator.state.credentials.reader_username)

    assert reader.get(f"/lbaas/loadbalancers/{lb}").status_code == 200
    refused = put_tags(reader, lb, ["landb-alias=x"])

    assert refused.status_code == 403
    assert simulator.state.octavia.tag_history() == []


def test_an_expired_token_is_401(simulator: Simulator, octavia_http: Callable[..., httpx.Client]) -> None:
    http = octavia_http()
    simulator.state.expire_tokens()

    assert http.get("/lbaas/loadbalancers").status_code == 401


# -- tags ------------------------------------------------------------------------------------------


def test_put_replaces_the_whole_tag_list_sorted_and_merged(simulator: Simulator, conn: Connection) -> None:
    octavia = simulator.state.octavia
    lb_id = octavia.add_load_balancer("lb", "188.184.33.1", tags=["owner=team-a"])

    updated = conn.load_balancer.update_load_balancer(
        lb_id, tags=["landb-alias=b", "landb-alias=a", "landb-alias=b"]
    )

    assert updated.tags == ["landb-alias=a", "landb-alias=b"]
    assert updated.provisioning_status == "PENDING_UPDATE"  # the PUT's own reply, as on Octavia
    assert octavia.load_balancer(lb_id).tags == ("landb-alias=a", "landb-alias=b")
    assert [(change.method, change.tags) for change in octavia.tag_history(lb_id)] == [
        ("direct", ("owner=team-a",)),
        ("PUT", ("landb-alias=a", "landb-alias=b")),
    ]
    assert conn.load_balancer.get_load_balancer(lb_id).provisioning_status == "ACTIVE"


def test_empty_tags_clear_and_null_or_absent_tags_change_nothing(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    octavia = simulator.state.octavia
    lb_id = octavia.add_load_balancer("lb", "188.184.33.2", tags=["landb-alias=a"])
    http = octavia_http()

    assert put_tags(http, lb_id, None).json()["loadbalancer"]["tags"] == ["landb-alias=a"]
    renamed = http.put(f"/lbaas/loadbalancers/{lb_id}", json={"loadbalancer": {"name": "renamed"}})
    assert renamed.json()["loadbalancer"]["tags"] == ["landb-alias=a"]
    assert put_tags(http, lb_id, []).json()["loadbalancer"]["tags"] == []

    assert octavia.load_balancer(lb_id).name == "renamed"
    assert octavia.load_balancer(lb_id).tags == ()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"loadbalancer": {"tags": ["x" * 256]}}, "Invalid input for field/attribute tags"),
        ({"loadbalancer": {"tags": "landb-alias=a"}}, "Invalid input for field/attribute tags"),
        ({"loadbalancer": {"vip_address": "188.184.1.1"}}, "Unknown attribute for argument load_balancer"),
        ({"tags": ["landb-alias=a"]}, 'Missing argument: "load_balancer"'),
    ],
)
def test_a_bad_update_is_a_400_and_changes_nothing(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client], body: Any, message: str
) -> None:
    octavia = simulator.state.octavia
    lb_id = octavia.add_load_balancer("lb", "188.184.33.3", tags=["landb-alias=a"])

    refused = octavia_http().put(f"/lbaas/loadbalancers/{lb_id}", json=body)

    assert refused.status_code == 400
    assert refused.json()["faultstring"].startswith(message)
    assert octavia.load_balancer(lb_id).tags == ("landb-alias=a",)
    assert octavia.load_balancer(lb_id).provisioning_status == "ACTIVE"


def test_a_255_character_tag_is_accepted(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    lb_id = simulator.state.octavia.add_load_balancer("lb", "188.184.33.4")

    assert put_tags(octavia_http(), lb_id, ["x" * 255, "a,b"]).status_code == 200
    assert simulator.state.octavia.load_balancer(lb_id).tags == ("a,b", "x" * 255)


# -- PENDING_* -------------------------------------------------------------------------------------


def test_a_put_while_pending_update_is_a_409_conflict_for_the_sdk(
    simulator: Simulator, conn: Connection
) -> None:
    octavia = simulator.state.octavia
    octavia.settle_requests = 1
    lb_id = octavia.add_load_balancer("lb", "188.184.34.1")

    conn.load_balancer.update_load_balancer(lb_id, tags=["landb-alias=a"])
    with pytest.raises(
        exceptions.ConflictException, match=f"Invalid state PENDING_UPDATE of loadbalancer resource {lb_id}"
    ):
        conn.load_balancer.update_load_balancer(lb_id, tags=["landb-alias=b"])
    conn.load_balancer.update_load_balancer(lb_id, tags=["landb-alias=b"])

    assert octavia.load_balancer(lb_id).tags == ("landb-alias=b",)
    assert [call.status for call in simulator.state.api_calls("octavia") if call.method == "PUT"] == [
        200,
        409,
        200,
    ]


def test_a_hold_for_n_requests_answers_409_n_times(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    octavia = simulator.state.octavia
    lb_id = octavia.add_load_balancer("lb", "188.184.34.2")
    http = octavia_http()
    octavia.hold_pending(lb_id, requests=2)

    statuses = [put_tags(http, lb_id, ["landb-alias=a"]).status_code for _ in range(3)]

    assert statuses == [409, 409, 200]
    assert octavia.load_balancer(lb_id).tags == ("landb-alias=a",)
    assert http.get(f"/lbaas/loadbalancers/{lb_id}").json()["loadbalancer"]["provisioning_status"] == "ACTIVE"


def test_a_hold_lasts_until_released_and_is_not_used_up_by_other_load_balancers(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    octavia = simulator.state.octavia
    held = octavia.add_load_balancer("held", "188.184.34.3")
    other = octavia.add_load_balancer("other", "188.184.34.4")
    http = octavia_http()
    hold = octavia.hold_pending(held, status="PENDING_DELETE")

    for _ in range(3):
        assert put_tags(http, other, ["landb-alias=o"]).status_code == 200
        http.get("/lbaas/loadbalancers", params={"vip_address": "188.184.34.4"})
    refused = put_tags(http, held, ["landb-alias=h"])
    shown = http.get(f"/lbaas/loadbalancers/{held}").json()["loadbalancer"]
    hold.release()

    assert refused.status_code == 409
    assert refused.json()["faultstring"] == f"Invalid state PENDING_DELETE of loadbalancer resource {held}"
    assert shown["provisioning_status"] == "PENDING_DELETE"
    assert put_tags(http, held, ["landb-alias=h"]).status_code == 200


def test_delete_through_the_api_and_by_the_test(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    octavia = simulator.state.octavia
    by_api = octavia.add_load_balancer("a", "188.184.35.1")
    by_test = octavia.add_load_balancer("b", "188.184.35.2")
    http = octavia_http()

    assert http.delete(f"/lbaas/loadbalancers/{by_api}").status_code == 204
    octavia.delete_load_balancer(by_test)

    assert octavia.load_balancers() == []
    assert http.get(f"/lbaas/loadbalancers/{by_api}").status_code == 404


# -- the service catalog, version discovery, faults ------------------------------------------------


def test_octavia_is_in_the_catalog_and_serves_its_version_document(
    simulator: Simulator, http: httpx.Client, conn: Connection
) -> None:
    versions = http.get(f"{simulator.url}/load-balancer/").json()["versions"]

    assert versions[0]["id"] == "v2.0"
    assert [v["id"] for v in versions if v["status"] == "CURRENT"] == [versions[-1]["id"]]
    assert {link["href"] for v in versions for link in v["links"]} == {f"{simulator.url}/load-balancer/v2"}
    assert conn.load_balancer.get_endpoint().startswith(f"{simulator.url}/load-balancer")
    assert conn.network.get_endpoint().startswith(f"{simulator.url}/network")


def test_an_injected_octavia_fault_has_octavias_body(simulator: Simulator, conn: Connection) -> None:
    simulator.state.inject_fault(
        api="octavia", method="GET", path_pattern="/lbaas/loadbalancers$", status=503
    )

    with pytest.raises(exceptions.HttpException) as raised:
        list(conn.load_balancer.load_balancers())

    assert raised.value.status_code == 503
    assert [call.status for call in simulator.state.api_calls("octavia")] == [503]


# -- Neutron floating IPs --------------------------------------------------------------------------


def test_a_floating_ip_leads_to_its_load_balancer(simulator: Simulator, conn: Connection) -> None:
    octavia = simulator.state.octavia
    lb_id = octavia.add_load_balancer("lb", "188.184.36.1", floating_ip="137.138.36.1")
    octavia.add_floating_ip("137.138.36.2")  # allocated, bound to nothing

    (fip,) = conn.network.ips(floating_ip_address="137.138.36.1")
    (lb,) = conn.load_balancer.load_balancers(vip_port_id=fip.port_id)

    assert lb.id == lb_id
    assert (fip.fixed_ip_address, fip.status) == ("188.184.36.1", "ACTIVE")
    (unbound,) = conn.network.ips(floating_ip_address="137.138.36.2")
    assert unbound.port_id is None
    assert [call.query for call in simulator.state.api_calls("neutron")] == [
        "floating_ip_address=137.138.36.1",
        "floating_ip_address=137.138.36.2",
    ]


def test_neutron_keeps_floating_ips_to_their_project_and_refuses_unknown_filters(
    simulator: Simulator, octavia_http: Callable[..., httpx.Client]
) -> None:
    octavia = simulator.state.octavia
    octavia.add_floating_ip("137.138.37.1", project_id=OTHER_PROJECT)
    lb_id = octavia.add_load_balancer("lb", "188.184.37.2", floating_ip="137.138.37.2")
    network = octavia_http(api="network/v2.0")

    listed = network.get("/floatingips").json()["floatingips"]
    refused = network.get("/floatingips", params={"address": "137.138.37.2"})
    octavia.delete_load_balancer(lb_id)
    after_delete = network.get("/floatingips", params={"port_id": listed[0]["port_id"]}).json()

    assert [fip["floating_ip_address"] for fip in listed] == ["137.138.37.2"]
    assert refused.status_code == 400
    assert refused.json()["NeutronError"]["message"] == "[address] is invalid attribute for filtering"
    assert after_delete == {"floatingips": []}
