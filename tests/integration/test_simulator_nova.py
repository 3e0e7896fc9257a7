"""The simulated Nova, through openstacksdk and raw HTTP: the Nova contracts in docs/reference.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openstack
import pytest
from openstack import exceptions
from openstack.connection import Connection

from landb_simulator import ApiCall, ClientConfig, Simulator, seed_cluster
from landb_simulator.identity import PROJECT_ID
from support.waiting import eventually

NovaHttp = Any  # the nova_http factory fixture from tests/conftest.py


@pytest.fixture
def cluster(simulator: Simulator) -> list[str]:
    return seed_cluster(simulator.state, cluster="nova-test", ingress_nodes=2, workers=1)


@pytest.fixture
def conn(sim_clients: ClientConfig) -> Iterator[Connection]:
    connection = openstack.connect(cloud=sim_clients.cloud_name)
    yield connection
    connection.close()


def server_named(simulator: Simulator, name: str) -> str:
    (server_id,) = [server.id for server in simulator.state.servers() if server.name == name]
    return server_id


def full_metadata(count: int) -> dict[str, str]:
    return {f"key-{index}": "value" for index in range(count)}


# -- reading servers -------------------------------------------------------------------------------


def test_the_sdk_lists_every_server_with_metadata_state_and_address(
    simulator: Simulator, cluster: list[str], conn: Connection
) -> None:
    servers = {server.name: server for server in conn.compute.servers()}

    assert set(servers) == set(cluster)
    first = servers[cluster[0]]
    assert first.metadata == simulator.state.metadata(first.id)
    assert first.metadata["landb-mainuser"] == "kubernetes-admins"
    assert (first.status, first.vm_state, first.task_state, first.is_locked) == (
        "ACTIVE",
        "active",
        None,
        False,
    )
    node = simulator.state.node(cluster[0])
    assert node is not None
    internal_ip = node["status"]["addresses"][0]["address"]
    assert [address["addr"] for address in first.addresses["CERN_NETWORK"]] == [internal_ip]


def test_get_server_shows_the_lock_and_a_reboot_in_progress(simulator: Simulator, conn: Connection) -> None:
    server_id = simulator.state.add_server("busy-node", locked=True)
    simulator.state.set_task_state(server_id, "reboot_started")

    server = conn.compute.get_server(server_id)

    assert server.is_locked is True
    assert server.task_state == "reboot_started"
    assert server.status == "REBOOT"


def test_an_unknown_server_is_404(simulator: Simulator, nova_http: NovaHttp) -> None:
    reply = nova_http().get("/servers/00000000-0000-0000-0000-000000000000")
    assert reply.status_code == 404
    assert reply.json()["itemNotFound"]["message"].endswith("could not be found.")


# -- metadata calls --------------------------------------------------------------------------------


def test_set_server_metadata_merges_and_keeps_every_other_key(
    simulator: Simulator, cluster: list[str], conn: Connection
) -> None:
    server_id = server_named(simulator, cluster[0])
    before = simulator.state.metadata(server_id)

    conn.compute.set_server_metadata(server_id, **{"landb-alias": "app--load-1-"})

    assert simulator.state.metadata(server_id) == {**before, "landb-alias": "app--load-1-"}
    change = simulator.state.metadata_history()[-1]
    assert (change.server_id, change.method, change.key) == (server_id, "POST", None)
    assert change.metadata == simulator.state.metadata(server_id)


def test_delete_server_metadata_sends_one_delete_per_named_key(
    simulator: Simulator, conn: Connection
) -> None:
    server_id = simulator.state.add_server(
        "node", {"landb-alias": "a", "landb-alias2": "b", "landb-os": "LINUX"}
    )
    simulator.state.reset_api_calls()

    conn.compute.delete_server_metadata(server_id, keys=["landb-alias2"])

    assert simulator.state.metadata(server_id) == {"landb-alias": "a", "landb-os": "LINUX"}
    deletes = [call for call in simulator.state.api_calls("nova") if call.method == "DELETE"]
    assert deletes == [
        ApiCall("nova", "DELETE", f"/compute/v2.1/servers/{server_id}/metadata/landb-alias2", 204)
    ]


def test_deleting_a_missing_key_is_404_and_the_sdk_raises_not_found(
    simulator: Simulator, conn: Connection, nova_http: NovaHttp
) -> None:
    server_id = simulator.state.add_server("node", {"landb-os": "LINUX"})

    reply = nova_http().delete(f"/servers/{server_id}/metadata/landb-alias")
    assert reply.status_code == 404
    assert reply.json() == {"itemNotFound": {"code": 404, "message": "Metadata item was not found"}}
    with pytest.raises(exceptions.NotFoundException):
        conn.compute.delete_server_metadata(server_id, keys=["landb-alias"])


def test_put_replaces_the_whole_metadata(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node", {"landb-os": "LINUX", "landb-alias": "a"})

    reply = nova_http().put(f"/servers/{server_id}/metadata", json={"metadata": {"only": "this"}})

    assert reply.status_code == 200
    assert reply.json() == {"metadata": {"only": "this"}}
    assert simulator.state.metadata(server_id) == {"only": "this"}
    assert simulator.state.metadata_history(server_id)[-1].method == "PUT"


def test_put_of_one_key_sets_it_and_insists_the_uri_and_body_agree(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    server_id = simulator.state.add_server("node", {"landb-os": "LINUX"})
    nova = nova_http()

    reply = nova.put(f"/servers/{server_id}/metadata/landb-alias", json={"meta": {"landb-alias": "app"}})
    assert (reply.status_code, reply.json()) == (200, {"meta": {"landb-alias": "app"}})
    assert simulator.state.metadata(server_id) == {"landb-os": "LINUX", "landb-alias": "app"}
    change = simulator.state.metadata_history(server_id)[-1]
    assert (change.method, change.key) == ("PUT", "landb-alias")

    mismatch = nova.put(f"/servers/{server_id}/metadata/landb-alias", json={"meta": {"other": "x"}})
    assert mismatch.status_code == 400
    assert mismatch.json()["badRequest"]["message"] == "Request body and URI mismatch"


def test_get_metadata_and_one_item(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node", {"landb-os": "LINUX", "landb-alias": "a"})
    nova = nova_http()

    assert nova.get(f"/servers/{server_id}/metadata").json() == {
        "metadata": {"landb-os": "LINUX", "landb-alias": "a"}
    }
    assert nova.get(f"/servers/{server_id}/metadata/landb-os").json() == {"meta": {"landb-os": "LINUX"}}
    assert nova.get(f"/servers/{server_id}/metadata/absent").status_code == 404


# -- validation and its order ----------------------------------------------------------------------


SCHEMA_VIOLATIONS = {
    "slash in key": {"metadata": {"bad/key": "v"}},
    "empty key": {"metadata": {"": "v"}},
    "256-character key": {"metadata": {"k" * 256: "v"}},
    "256-character value": {"metadata": {"landb-alias": "v" * 256}},
    "number value": {"metadata": {"landb-alias": 5}},
    "metadata not an object": {"metadata": "landb-alias=x"},
    "wrong member": {"meta": {"landb-alias": "x"}},
}


def test_schema_violations_are_400_and_change_nothing(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node", {"landb-os": "LINUX"})
    history = simulator.state.metadata_history()
    nova = nova_http()

    for case, body in SCHEMA_VIOLATIONS.items():
        reply = nova.post(f"/servers/{server_id}/metadata", json=body)
        assert reply.status_code == 400, case
        assert reply.json()["badRequest"]["code"] == 400, case

    assert simulator.state.metadata(server_id) == {"landb-os": "LINUX"}
    assert simulator.state.metadata_history() == history


def test_the_longest_valid_key_and_value_are_accepted(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node")
    items = {"k" * 255: "v" * 255, "a-Z_0:9. x": ""}

    reply = nova_http().post(f"/servers/{server_id}/metadata", json={"metadata": items})

    assert reply.status_code == 200
    assert simulator.state.metadata(server_id) == items


def test_a_body_that_is_not_json_is_400(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node")
    reply = nova_http().post(
        f"/servers/{server_id}/metadata", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert reply.status_code == 400
    assert reply.json()["badRequest"]["message"] == "Malformed request body"


MISSING = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class OrderCase:
    """A request that breaks two rules at once: Nova reports the one it checks first."""

    server: str
    """``missing``, or how to prepare a server holding 128 keys: ``full``, ``locked-full``, ``error-full``."""
    user: str
    method: str
    path: str
    body: dict[str, Any] | None
    status: int
    message: str


ORDER_CASES = {
    "schema before existence": OrderCase(
        "missing", "landb-webhook", "POST", "/metadata", {"metadata": {"bad/key": "v"}}, 400, "bad/key"
    ),
    "existence before policy": OrderCase(
        "missing", "landb-reader", "POST", "/metadata", {"metadata": {"k": "v"}}, 404, "could not be found"
    ),
    "missing key before policy": OrderCase(
        "locked-full", "landb-reader", "DELETE", "/metadata/absent", None, 404, "Metadata item was not found"
    ),
    "policy before lock": OrderCase(
        "locked-full",
        "landb-reader",
        "POST",
        "/metadata",
        {"metadata": {"k": "v"}},
        403,
        "Policy doesn't allow",
    ),
    "lock before quota": OrderCase(
        "locked-full", "landb-webhook", "POST", "/metadata", {"metadata": {"new": "v"}}, 409, "is locked"
    ),
    "vm_state before quota": OrderCase(
        "error-full", "landb-webhook", "POST", "/metadata", {"metadata": {"new": "v"}}, 409, "vm_state error"
    ),
    "quota last": OrderCase(
        "full", "landb-webhook", "POST", "/metadata", {"metadata": {"new": "v"}}, 403, "exceeds 128"
    ),
}


def test_checks_come_in_novas_order(simulator: Simulator, nova_http: NovaHttp) -> None:
    state = simulator.state
    clients = {user: nova_http(user=user) for user in ("landb-webhook", "landb-reader")}
    for name, case in ORDER_CASES.items():
        server_id = MISSING
        if case.server != "missing":
            server_id = state.add_server(name, full_metadata(128), locked=case.server.startswith("locked"))
            if case.server.startswith("error"):
                state.set_vm_state(server_id, "error")

        reply = clients[case.user].request(case.method, f"/servers/{server_id}{case.path}", json=case.body)

        assert reply.status_code == case.status, name
        (error,) = reply.json().values()
        assert case.message in error["message"], name


def test_a_locked_server_refuses_writes_until_unlocked(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node", {"landb-alias": "a"})
    nova = nova_http()
    assert nova.post(f"/servers/{server_id}/action", json={"lock": None}).status_code == 202

    post = nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "b"}})
    delete = nova.delete(f"/servers/{server_id}/metadata/landb-alias")
    assert (post.status_code, delete.status_code) == (409, 409)
    assert post.json() == {"conflictingRequest": {"code": 409, "message": f"Instance {server_id} is locked"}}
    assert simulator.state.metadata(server_id) == {"landb-alias": "a"}

    assert nova.post(f"/servers/{server_id}/action", json={"unlock": None}).status_code == 202
    assert (
        nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "b"}}).status_code
        == 200
    )


def test_lock_and_unlock_through_the_sdk_show_in_the_server_detail(
    simulator: Simulator, conn: Connection
) -> None:
    server_id = simulator.state.add_server("node")
    conn.compute.lock_server(server_id, locked_reason="kernel upgrade")
    server = conn.compute.get_server(server_id)
    assert (server.is_locked, server.locked_reason) == (True, "kernel upgrade")

    conn.compute.lock_server(server_id, locked_reason="a second lock changes nothing")
    assert conn.compute.get_server(server_id).locked_reason == "kernel upgrade"

    conn.compute.unlock_server(server_id)
    server = conn.compute.get_server(server_id)
    assert (server.is_locked, server.locked_reason) == (False, None)


def test_the_lock_reason_needs_microversion_2_73_and_a_valid_body(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    server_id = simulator.state.add_server("node")
    action = f"/servers/{server_id}/action"
    old = nova_http(microversion="2.72")
    assert old.post(action, json={"lock": {"locked_reason": "ignored before 2.73"}}).status_code == 202
    assert nova_http().get(f"/servers/{server_id}").json()["server"]["locked_reason"] is None
    assert old.get(f"/servers/{server_id}").json()["server"]["locked"] is True
    assert "locked_reason" not in old.get(f"/servers/{server_id}").json()["server"]

    new = nova_http()
    new.post(action, json={"unlock": None})
    for body in ({"lock": {"reason": "x"}}, {"lock": {"locked_reason": ""}}, {"lock": "x"}, {"reboot": {}}):
        reply = new.post(action, json=body)
        assert reply.status_code == 400, body
    assert simulator.state.server(server_id).locked is False


def test_lock_is_refused_to_readers_and_unknown_servers(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node")
    reader = nova_http(user=simulator.state.credentials.reader_username)
    refused = reader.post(f"/servers/{server_id}/action", json={"lock": None})
    assert refused.status_code == 403
    assert "os-lock-server:lock" in refused.json()["forbidden"]["message"]
    missing = nova_http().post("/servers/00000000-0000-0000-0000-000000000000/action", json={"lock": None})
    assert missing.status_code == 404
    assert simulator.state.server(server_id).locked is False


def test_vm_states_that_refuse_metadata_writes(simulator: Simulator, nova_http: NovaHttp) -> None:
    nova = nova_http()
    for vm_state in ("building", "error", "shelved_offloaded"):
        server_id = simulator.state.add_server("node", {"landb-alias": "a"}, vm_state=vm_state)

        reply = nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "b"}})

        assert reply.status_code == 409, vm_state
        expected = f"Cannot 'update metadata' instance {server_id} while it is in vm_state {vm_state}"
        assert reply.json()["conflictingRequest"]["message"] == expected
        assert simulator.state.metadata(server_id) == {"landb-alias": "a"}


def test_vm_states_that_accept_metadata_writes(simulator: Simulator, nova_http: NovaHttp) -> None:
    nova = nova_http()
    for vm_state in ("stopped", "paused", "shelved"):
        server_id = simulator.state.add_server("node", vm_state=vm_state)
        reply = nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "b"}})
        assert reply.status_code == 200, vm_state


def test_a_task_state_alone_never_blocks_a_write(simulator: Simulator, conn: Connection) -> None:
    server_id = simulator.state.add_server("node")
    simulator.state.set_task_state(server_id, "reboot_started")

    conn.compute.set_server_metadata(server_id, **{"landb-alias": "app--load-0-"})

    assert simulator.state.metadata(server_id) == {"landb-alias": "app--load-0-"}


def test_the_quota_counts_the_merged_result(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node", full_metadata(128))
    nova = nova_http()

    overwrite = nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"key-0": "changed"}})
    assert overwrite.status_code == 200
    extra = nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"key-128": "one too many"}})
    assert extra.status_code == 403
    assert extra.json() == {
        "forbidden": {"code": 403, "message": "Maximum number of metadata items exceeds 128"}
    }
    put_key = nova.put(f"/servers/{server_id}/metadata/key-128", json={"meta": {"key-128": "x"}})
    assert put_key.status_code == 403
    assert len(simulator.state.metadata(server_id)) == 128
    assert simulator.state.metadata(server_id)["key-0"] == "changed"

    simulator.state.set_quota(129)
    assert (
        nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"key-128": "fits"}}).status_code == 200
    )


def test_replacing_all_metadata_is_held_to_the_quota_too(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node")
    reply = nova_http().put(f"/servers/{server_id}/metadata", json={"metadata": full_metadata(129)})
    assert reply.status_code == 403
    assert simulator.state.metadata(server_id) == {}


def test_limits_report_the_metadata_quota(simulator: Simulator, conn: Connection) -> None:
    assert conn.compute.get_limits().absolute.server_meta == 128
    simulator.state.set_quota(40)
    assert conn.compute.get_limits().absolute.server_meta == 40


def test_a_read_only_user_reads_but_every_write_is_403(
    simulator: Simulator, cluster: list[str], sim_clients: ClientConfig
) -> None:
    server_id = server_named(simulator, cluster[0])
    before = simulator.state.metadata(server_id)
    reader = openstack.connect(cloud=sim_clients.readonly_cloud_name)
    try:
        assert {server.name for server in reader.compute.servers()} == set(cluster)
        with pytest.raises(exceptions.ForbiddenException):
            reader.compute.set_server_metadata(server_id, **{"landb-alias": "x"})
        with pytest.raises(exceptions.ForbiddenException):
            reader.compute.delete_server_metadata(server_id, keys=["landb-os"])
    finally:
        reader.close()
    assert simulator.state.metadata(server_id) == before


# -- listing filters and pages ---------------------------------------------------------------------


def names_of(reply: httpx.Response) -> set[str]:
    assert reply.status_code == 200, reply.text
    return {server["name"] for server in reply.json()["servers"]}


def test_the_name_filter_is_an_unanchored_regex(
    simulator: Simulator, nova_http: NovaHttp, conn: Connection
) -> None:
    for name in ("web-1", "web-10", "xweb-1", "db-1"):
        simulator.state.add_server(name)
    nova = nova_http()

    assert names_of(nova.get("/servers/detail", params={"name": "web-1"})) == {"web-1", "web-10", "xweb-1"}
    assert names_of(nova.get("/servers/detail", params={"name": "^web-1$"})) == {"web-1"}
    assert names_of(nova.get("/servers", params={"name": "^(web-1|db-1)$"})) == {"web-1", "db-1"}
    # Like MySQL's default collation, the match ignores case: callers must compare names exactly.
    assert names_of(nova.get("/servers/detail", params={"name": "^WEB-1$"})) == {"web-1"}
    assert [server.name for server in conn.compute.servers(name="^db-1$")] == ["db-1"]


def test_an_invalid_name_regex_is_400(simulator: Simulator, nova_http: NovaHttp) -> None:
    reply = nova_http().get("/servers/detail", params={"name": "web-(1"})
    assert reply.status_code == 400
    assert "badRequest" in reply.json()


def test_uuid_and_metadata_filters_are_dropped_for_non_admins(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    wanted = simulator.state.add_server("wanted", {"landb-alias": "x"})
    simulator.state.add_server("other")
    query = {"uuid": wanted, "metadata": '{"landb-alias": "x"}'}

    assert names_of(nova_http().get("/servers/detail", params=query)) == {"wanted", "other"}
    assert names_of(nova_http(user="cloud-admin").get("/servers/detail", params={"uuid": wanted})) == {
        "wanted"
    }


def test_ip_and_status_filters(simulator: Simulator, nova_http: NovaHttp) -> None:
    simulator.state.add_server("a", ip="188.184.1.10")
    simulator.state.add_server("b", ip="188.184.2.10")
    simulator.state.add_server("broken", ip="188.184.1.11", vm_state="error")
    nova = nova_http()

    assert names_of(nova.get("/servers/detail", params={"ip": r"188\.184\.1\."})) == {"a", "broken"}
    assert names_of(nova.get("/servers/detail", params={"status": "ERROR"})) == {"broken"}
    assert names_of(nova.get("/servers/detail", params={"status": "active"})) == {"a", "b"}
    assert nova.get("/servers/detail", params={"status": "SLEEPY"}).status_code == 400


def test_pages_are_linked_by_marker_until_a_page_is_short(simulator: Simulator, nova_http: NovaHttp) -> None:
    created = [simulator.state.add_server(f"node-{index}") for index in range(5)]
    nova = nova_http()

    seen: list[str] = []
    url: str | None = "/servers/detail?limit=2"
    pages = 0
    while url is not None:
        body = nova.get(url).json()
        pages += 1
        seen += [server["id"] for server in body["servers"]]
        links = [link["href"] for link in body.get("servers_links", []) if link["rel"] == "next"]
        assert len(links) <= 1
        url = links[0] if links else None
        if url is not None:
            assert f"marker={body['servers'][-1]['id']}" in url

    assert pages == 3
    assert seen == list(reversed(created))  # newest first, as Nova sorts by created_at desc


def test_the_sdk_follows_the_pages(simulator: Simulator, conn: Connection) -> None:
    created = {simulator.state.add_server(f"node-{index}") for index in range(5)}
    simulator.state.reset_api_calls()

    listed = {server.id for server in conn.compute.servers(limit=2)}

    assert listed == created
    pages = [call for call in simulator.state.api_calls("nova") if call.path.endswith("/servers/detail")]
    assert len(pages) >= 3  # the SDK asks once more after the last short page
    assert all("limit=2" in page.query for page in pages)


def test_a_page_holds_at_most_1000_servers(simulator: Simulator, nova_http: NovaHttp) -> None:
    for index in range(1001):
        simulator.state.add_server(f"node-{index}")
    body = nova_http().get("/servers", params={"limit": 5000}).json()
    assert len(body["servers"]) == 1000
    assert body["servers_links"][0]["rel"] == "next"


def test_bad_paging_parameters_are_400(simulator: Simulator, nova_http: NovaHttp) -> None:
    simulator.state.add_server("node")
    nova = nova_http()
    for query in ({"marker": MISSING}, {"limit": "-1"}, {"limit": "many"}):
        assert nova.get("/servers/detail", params=query).status_code == 400, query


# -- versions --------------------------------------------------------------------------------------


def test_microversions_are_negotiated_and_echoed(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node", locked=True)

    old = nova_http(microversion="2.1").get(f"/servers/{server_id}")
    assert old.headers["OpenStack-API-Version"] == "compute 2.1"
    assert "locked" not in old.json()["server"]
    new = nova_http(microversion="2.9").get(f"/servers/{server_id}")
    assert new.headers["X-OpenStack-Nova-API-Version"] == "2.9"
    assert new.json()["server"]["locked"] is True
    assert nova_http(microversion="latest").get("/servers").headers["OpenStack-API-Version"] == "compute 2.96"
    too_new = nova_http(microversion="3.0").get("/servers")
    assert too_new.status_code == 406
    assert "Minimum is 2.1 and maximum is 2.96" in too_new.json()["computeFault"]["message"]
    assert nova_http(microversion="two").get("/servers").status_code == 400


def test_the_version_documents_advertise_the_microversion_range(
    simulator: Simulator, http: httpx.Client
) -> None:
    versions = http.get(f"{simulator.url}/compute/").json()["versions"]
    current = next(version for version in versions if version["status"] == "CURRENT")
    assert (current["id"], current["min_version"], current["version"]) == ("v2.1", "2.1", "2.96")
    assert http.get(f"{simulator.url}/compute/v2.1").json()["version"]["version"] == "2.96"


def test_nova_without_a_token_is_401(simulator: Simulator, http: httpx.Client) -> None:
    reply = http.get(f"{simulator.url}/compute/v2.1/servers")
    assert reply.status_code == 401
    assert "WWW-Authenticate" in reply.headers


# -- what tests and benchmarks observe -------------------------------------------------------------


def test_the_metadata_history_is_one_order_across_servers(simulator: Simulator, nova_http: NovaHttp) -> None:
    state = simulator.state
    first = state.add_server("first")
    second = state.add_server("second")
    nova = nova_http()

    state.set_metadata_direct(first, {"landb-os": "LINUX"})
    nova.post(f"/servers/{second}/metadata", json={"metadata": {"landb-alias": "app--load-1-"}})
    nova.post(f"/servers/{first}/metadata", json={"metadata": {"landb-alias": "app--load-0-"}})
    nova.delete(f"/servers/{second}/metadata/landb-alias")

    history = state.metadata_history()
    assert [(c.server_id, c.method, c.key) for c in history] == [
        (first, "direct", None),
        (second, "POST", None),
        (first, "POST", None),
        (second, "DELETE", "landb-alias"),
    ]
    assert [c.seq for c in history] == sorted({c.seq for c in history})
    assert history[2].metadata == {"landb-os": "LINUX", "landb-alias": "app--load-0-"}
    assert history[3].metadata == {}


def test_api_calls_record_method_path_and_status(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node")
    nova = nova_http()
    simulator.state.reset_api_calls()

    nova.get("/servers/detail", params={"name": "^node$"})
    nova.delete(f"/servers/{server_id}/metadata/absent")

    assert simulator.state.api_calls() == [
        ApiCall("nova", "GET", "/compute/v2.1/servers/detail", 200, "name=%5Enode%24"),
        ApiCall("nova", "DELETE", f"/compute/v2.1/servers/{server_id}/metadata/absent", 404),
    ]


def test_an_injected_fault_fails_the_matching_calls_then_expires(
    simulator: Simulator, conn: Connection
) -> None:
    server_id = simulator.state.add_server("node")
    fault = simulator.state.inject_fault(api="nova", method="POST", path_pattern=r"/metadata$", status=503)
    simulator.state.reset_api_calls()

    with pytest.raises(exceptions.HttpException) as raised:
        conn.compute.set_server_metadata(server_id, **{"landb-alias": "a"})
    assert raised.value.status_code == 503
    conn.compute.set_server_metadata(server_id, **{"landb-alias": "a"})

    assert fault.hits == 1
    assert not fault.active
    posts = [call.status for call in simulator.state.api_calls("nova") if call.method == "POST"]
    assert posts == [503, 200]
    assert [change.method for change in simulator.state.metadata_history(server_id)] == ["POST"]


def test_a_lasting_fault_with_a_custom_body_holds_until_cleared(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    simulator.state.inject_fault(
        api="nova", path_pattern="/servers", status=500, times=None, body={"oops": 1}
    )
    nova = nova_http()

    for _ in range(3):
        reply = nova.get("/servers")
        assert (reply.status_code, reply.json()) == (500, {"oops": 1})
    simulator.state.clear_faults()
    assert nova.get("/servers").status_code == 200


def test_a_delay_makes_the_reply_slower_than_the_client_timeout(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    nova = nova_http()
    simulator.state.inject_fault(api="nova", method="GET", status=None, delay=2.0)

    with pytest.raises(httpx.ReadTimeout):
        nova.get("/servers", timeout=0.2)
    assert nova.get("/servers").status_code == 200  # the fault was used up by the first call


def test_a_reset_drops_the_connection_without_a_reply(simulator: Simulator, nova_http: NovaHttp) -> None:
    server_id = simulator.state.add_server("node")
    simulator.state.inject_fault(api="nova", method="POST", path_pattern="/metadata$", reset=True)
    nova = nova_http()

    with pytest.raises(httpx.TransportError):
        nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "a"}})
    assert simulator.state.metadata(server_id) == {}
    assert nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "a"}}).is_success
    posts = [call.status for call in simulator.state.api_calls("nova") if call.method == "POST"]
    assert posts == [0, 200]


def test_a_fault_after_processing_lands_the_write_and_loses_the_reply(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    server_id = simulator.state.add_server("node")
    simulator.state.inject_fault(
        api="nova", method="POST", path_pattern="/metadata$", reset=True, after_processing=True
    )
    simulator.state.inject_fault(
        api="nova", method="DELETE", path_pattern="/metadata/", status=502, after_processing=True
    )
    nova = nova_http()

    with pytest.raises(httpx.TransportError):
        nova.post(f"/servers/{server_id}/metadata", json={"metadata": {"landb-alias": "a"}})
    assert simulator.state.metadata(server_id) == {"landb-alias": "a"}
    assert nova.delete(f"/servers/{server_id}/metadata/landb-alias").status_code == 502
    assert simulator.state.metadata(server_id) == {}


def test_a_fault_carries_headers_such_as_retry_after(simulator: Simulator, nova_http: NovaHttp) -> None:
    simulator.state.inject_fault(api="nova", status=429, headers={"Retry-After": "3"})
    reply = nova_http().get("/servers")
    assert (reply.status_code, reply.headers["Retry-After"]) == (429, "3")


def test_a_token_expiry_fault_makes_that_request_meet_a_401(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    nova = nova_http()
    simulator.state.inject_fault(api="nova", method="GET", status=None, expire_tokens=True)
    assert nova.get("/servers").status_code == 401
    assert nova.get("/servers").status_code == 401  # the token stays invalid: the client must log in again


def test_a_probable_fault_fires_on_a_seeded_fraction_of_requests(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    nova = nova_http()

    def statuses(seed: int) -> list[int]:
        simulator.state.clear_faults()
        simulator.state.inject_fault(api="nova", status=503, times=None, probability=0.3, seed=seed)
        return [nova.get("/servers").status_code for _ in range(40)]

    first = statuses(7)
    assert set(first) == {200, 503}
    assert 4 <= first.count(503) <= 20
    assert statuses(7) == first


def test_requests_in_flight_are_counted_until_answered(simulator: Simulator, nova_http: NovaHttp) -> None:
    nova = nova_http()
    fault = simulator.state.inject_fault(api="nova", method="GET", status=None, delay=0.5)
    caller = threading.Thread(target=lambda: nova.get("/servers"))
    caller.start()
    eventually(lambda: fault.hits == 1, what="the request to reach the delay")
    assert simulator.state.in_flight("nova") == 1
    caller.join(10)
    assert simulator.state.in_flight("nova") == 0
    assert simulator.state.in_flight("keystone") == 0


def test_stopping_interrupts_a_delayed_reply(http: httpx.Client) -> None:
    outcome: list[object] = []
    with Simulator() as simulator:
        fault = simulator.state.inject_fault(
            api="kubernetes", path_pattern="^/version$", status=None, delay=60
        )

        def call() -> None:
            try:
                outcome.append(http.get(f"{simulator.url}/version", timeout=30).status_code)
            except httpx.HTTPError as error:
                outcome.append(error)

        caller = threading.Thread(target=call)
        caller.start()
        eventually(lambda: fault.hits == 1, what="the request to reach the delay")
        stopping = time.monotonic()
    stopped_in = time.monotonic() - stopping
    caller.join(10)

    assert not caller.is_alive()
    assert stopped_in < 3
    assert outcome == [503]


def test_another_project_s_server_is_listed_only_with_all_tenants_and_shown_only_to_an_admin(
    simulator: Simulator, nova_http: NovaHttp
) -> None:
    """As Nova: a list is the token's project's whatever its roles; ``all_tenants`` lets an admin see
    every project's (or the one ``project_id`` names) and is refused to others; by id an admin reads and
    writes any project's server, anyone else gets 404."""
    other_project = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"
    ours = simulator.state.add_server("web-1")
    theirs = simulator.state.add_server("web-1", project_id=other_project)
    member, admin = nova_http(), nova_http(user="cloud-admin")

    for caller in (member, admin):
        assert {
            s["id"] for s in caller.get("/servers/detail", params={"name": "^web-1$"}).json()["servers"]
        } == {ours}
        assert {
            s["id"] for s in caller.get("/servers", params={"project_id": other_project}).json()["servers"]
        } == {ours}
    every = admin.get("/servers/detail", params={"all_tenants": "1"}).json()["servers"]
    assert {(s["id"], s["tenant_id"]) for s in every} == {(ours, PROJECT_ID), (theirs, other_project)}
    only_theirs = admin.get("/servers", params={"all_tenants": "True", "project_id": other_project})
    assert [s["id"] for s in only_theirs.json()["servers"]] == [theirs]
    assert member.get("/servers/detail", params={"all_tenants": "1"}).status_code == 403

    assert member.get(f"/servers/{theirs}").status_code == 404
    assert member.post(f"/servers/{theirs}/metadata", json={"metadata": {"k": "v"}}).status_code == 404
    assert admin.get(f"/servers/{theirs}").json()["server"]["tenant_id"] == other_project
    assert admin.post(f"/servers/{theirs}/metadata", json={"metadata": {"k": "v"}}).status_code == 200
    assert simulator.state.metadata(theirs) == {"k": "v"}
