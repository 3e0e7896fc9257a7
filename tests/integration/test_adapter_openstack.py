"""OpenStackServerStore against the simulated Keystone and Nova, through openstacksdk over HTTP."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

import pytest
from structlog.testing import capture_logs

from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import OpenStackSession
from landb_webhook.backends import Node, UpstreamError
from support.default_options import openstack_options

LANDB_KEYS = {"landb-mainuser": "it-ops", "landb-responsible": "it-ops", "landb-os": "LINUX"}


def node(name: str, server_id: str | None = None) -> Node:
    return Node(name=name, server_id=server_id, internal_ips=("10.0.0.1",), is_ingress=True)


def nova_calls(state: Any, method: str | None = None, path_prefix: str = "") -> list[Any]:
    return [
        call
        for call in state.api_calls("nova")
        if (method is None or call.method == method) and path_prefix in call.path
    ]


def server_searches(state: Any) -> list[Any]:
    return [call for call in nova_calls(state, "GET") if call.path.endswith("/servers/detail")]


def test_constructing_the_store_makes_no_remote_call(simulator: Any, client_config: Any) -> None:
    simulator.state.reset_api_calls()
    OpenStackServerStore(
        OpenStackSession(
            client_config.cloud_name, clouds_yaml=client_config.clouds_yaml, options=openstack_options()
        )
    )
    assert simulator.state.api_calls() == []


# -- finding servers ---------------------------------------------------------------------------------


def test_provider_id_picks_the_server_even_among_namesakes(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    ours = state.add_server("cluster-node-0", LANDB_KEYS)
    namesake = state.add_server("cluster-node-0")
    found = server_store.servers_for([node("cluster-node-0", ours)])
    assert found["cluster-node-0"].id == ours
    assert found["cluster-node-0"].metadata == LANDB_KEYS
    assert namesake not in {server.id for server in found.values()}


def test_without_provider_id_only_the_exact_name_matches(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    exact = state.add_server("cluster-node-1")
    state.add_server("cluster-node-10")  # would match an unanchored filter
    state.add_server("Cluster-Node-1")  # Nova's filter may be case-insensitive; names are not
    state.add_server("xcluster-node-1")
    found = server_store.servers_for([node("cluster-node-1")])
    assert {name: server.id for name, server in found.items()} == {"cluster-node-1": exact}


def test_ambiguous_names_are_skipped_with_a_warning_naming_both(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    first = state.add_server("cluster-node-2")
    second = state.add_server("cluster-node-2")
    unique = state.add_server("cluster-node-3")
    with capture_logs() as logs:
        found = server_store.servers_for([node("cluster-node-2"), node("cluster-node-3")])
    assert {name: server.id for name, server in found.items()} == {"cluster-node-3": unique}
    warnings = [
        entry for entry in logs if entry["log_level"] == "warning" and entry.get("node") == "cluster-node-2"
    ]
    assert len(warnings) == 1
    assert sorted(warnings[0]["server_ids"]) == sorted([first, second])


def test_a_renamed_server_is_found_by_its_id(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    renamed = state.add_server("renamed-by-someone", {"landb-alias": "app--load-0-"})
    state.reset_api_calls()
    found = server_store.servers_for([node("cluster-node-4", renamed)])
    assert found["cluster-node-4"].id == renamed
    assert found["cluster-node-4"].metadata == {"landb-alias": "app--load-0-"}
    assert len(nova_calls(state, "GET", f"/servers/{renamed}")) == 1


def test_reading_servers_by_id_reads_the_compute_version_document_once(
    simulator: Any, server_store: Any
) -> None:
    """The read by id is plain JSON through the compute proxy, with the microversion openstacksdk's server
    resource negotiates: the requests get_server sent, the version document once per connection."""
    state = simulator.state
    server = state.add_server("cluster-node-30", LANDB_KEYS)
    state.reset_api_calls()

    assert server_store.server(server).metadata == LANDB_KEYS
    assert server_store.server(server).name == "cluster-node-30"

    assert [call.path.rsplit("/", 1)[-1] for call in nova_calls(state, "GET")] == ["v2.1", server, server]


def test_a_reply_that_is_not_a_server_is_an_invalid_response_and_retried(
    simulator: Any, server_store: Any
) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-31", LANDB_KEYS)
    not_a_server = {"api": "nova", "method": "GET", "path_pattern": f"/servers/{server}$", "status": 200}
    state.inject_fault(**not_a_server, body={"page": "of a proxy"}, times=1)

    assert server_store.server(server).metadata == LANDB_KEYS

    state.inject_fault(**not_a_server, body={"page": "of a proxy"}, times=None)
    with pytest.raises(UpstreamError) as raised:
        server_store.server(server)
    assert (raised.value.upstream, raised.value.retryable) == ("nova", True)
    assert "invalid response" in raised.value.reason


def test_a_vanished_server_is_skipped(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    present = state.add_server("cluster-node-5")
    found = server_store.servers_for(
        [node("cluster-node-5", present), node("cluster-node-6", str(uuid.uuid4()))]
    )
    assert set(found) == {"cluster-node-5"}


def test_a_cluster_is_found_with_one_name_search_not_a_project_listing(
    simulator: Any, server_store: Any
) -> None:
    state = simulator.state
    for i in range(200):
        state.add_server(f"someone-elses-vm-{i}")
    nodes = [
        node(f"k8s-prod-abcdefghijkl-node-{i}", state.add_server(f"k8s-prod-abcdefghijkl-node-{i}"))
        for i in range(40)
    ]
    state.reset_api_calls()
    found = server_store.servers_for(nodes)
    assert len(found) == 40
    searches = server_searches(state)
    assert len(searches) == 1
    assert all("name" in parse_qs(call.query) for call in searches)
    assert nova_calls(state, "GET", "/servers/") == searches  # no per-server GETs, no unfiltered listing


def test_the_shared_prefix_of_node_names_is_written_once_in_a_search(
    simulator: Any, server_store: Any
) -> None:
    """300 Magnum node names of 30 characters: 7 searches listed one by one, one search when their
    common ``<cluster>-<id>-node-`` is written once."""
    state = simulator.state
    names = [f"k8s-prod-abcdefghijkl-node-{i}" for i in range(300)]
    for name in names:
        state.add_server(name)
    state.reset_api_calls()
    found = server_store.servers_for([node(name) for name in names])
    assert set(found) == set(names)
    assert len(server_searches(state)) == 1


def test_a_large_cluster_is_searched_in_few_bounded_batches(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore]
) -> None:
    budget = 1024
    store = make_server_store(max_name_filter_length=budget)
    state = simulator.state
    names = [f"k8s-{'x' * 30}-{i:03d}-node-{i}" for i in range(300)]
    for name in names[::3]:
        state.add_server(name)  # a third have servers: the rest must not cost extra calls
    state.reset_api_calls()
    found = store.servers_for([node(name) for name in names])
    assert set(found) == set(names[::3])
    searches = server_searches(state)
    encoded_names = sum(
        len(value) for call in searches for value in call.query.split("&") if value.startswith("name=")
    )
    assert len(searches) <= math.ceil(encoded_names / budget) + 1
    assert 1 < len(searches) < len(names) / 10
    assert all(len(call.path) + len(call.query) < budget + 200 for call in searches)
    assert nova_calls(state, "GET", "/servers/") == searches


# -- writing metadata --------------------------------------------------------------------------------


def test_set_metadata_is_one_merge_that_keeps_foreign_keys(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-7", LANDB_KEYS)
    state.reset_api_calls()
    server_store.set_metadata(
        server, {"landb-alias": "app--load-0-", "server": "a key named like a parameter"}
    )
    assert state.metadata(server) == {
        **LANDB_KEYS,
        "landb-alias": "app--load-0-",
        "server": "a key named like a parameter",
    }
    assert [
        (call.method, call.path.rsplit("/", 1)[-1]) for call in nova_calls(state, path_prefix="/servers/")
    ] == [("POST", "metadata")]


def test_set_metadata_with_nothing_to_set_sends_nothing(simulator: Any, server_store: Any) -> None:
    server = simulator.state.add_server("cluster-node-8")
    simulator.state.reset_api_calls()
    server_store.set_metadata(server, {})
    assert nova_calls(simulator.state) == []


def test_delete_metadata_is_one_delete_of_one_key(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-9", {**LANDB_KEYS, "landb-alias2": "old--load-1-"})
    state.reset_api_calls()
    server_store.delete_metadata(server, "landb-alias2")
    assert state.metadata(server) == LANDB_KEYS
    calls = nova_calls(state)
    assert [call.method for call in calls] == ["DELETE"]
    assert calls[0].path.endswith(f"/servers/{server}/metadata/landb-alias2")


def test_deleting_a_missing_key_succeeds(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-10", LANDB_KEYS)
    state.reset_api_calls()
    server_store.delete_metadata(server, "landb-alias3")
    assert [call.status for call in nova_calls(state, "DELETE")] == [404]
    assert state.metadata(server) == LANDB_KEYS


@pytest.mark.parametrize("key", ["", ".", "..", " ", "../..", "landb-alias/..", "a/b", "x" * 256, "é"])
def test_keys_that_are_not_one_metadata_key_are_never_sent(
    simulator: Any, server_store: Any, key: str
) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-11", LANDB_KEYS)
    state.reset_api_calls()
    with pytest.raises(ValueError, match="refusing"):
        server_store.delete_metadata(server, key)
    assert nova_calls(state) == []
    assert state.metadata(server) == LANDB_KEYS


def test_max_metadata_items_reads_the_quota_once(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    state.set_quota(40)
    state.reset_api_calls()
    assert server_store.max_metadata_items() == 40
    assert server_store.max_metadata_items() == 40
    assert len(nova_calls(state, "GET", "/limits")) == 1


# -- failures ----------------------------------------------------------------------------------------


def test_a_full_quota_is_a_non_retryable_nova_error(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-13", LANDB_KEYS)
    state.set_quota(len(LANDB_KEYS))
    with pytest.raises(UpstreamError) as raised:
        server_store.set_metadata(server, {"landb-alias": "app--load-0-"})
    assert (raised.value.upstream, raised.value.retryable) == ("nova", False)
    assert "403" in raised.value.reason


def test_an_invalid_value_is_a_non_retryable_nova_error(simulator: Any, server_store: Any) -> None:
    server = simulator.state.add_server("cluster-node-14")
    with pytest.raises(UpstreamError) as raised:
        server_store.set_metadata(server, {"landb-alias": "x" * 256})
    assert (raised.value.upstream, raised.value.retryable) == ("nova", False)
    assert "400" in raised.value.reason


def test_wrong_credentials_are_a_non_retryable_keystone_error(simulator: Any, client_config: Any) -> None:
    clouds = client_config.clouds_yaml.read_text()
    password = simulator.state.credentials.password
    assert password in clouds
    client_config.clouds_yaml.write_text(clouds.replace(password, "not-the-password"))
    store = OpenStackServerStore(
        OpenStackSession(
            client_config.cloud_name,
            clouds_yaml=client_config.clouds_yaml,
            options=openstack_options(),
            sleep=pytest.fail,
        )
    )
    try:
        with pytest.raises(UpstreamError) as raised:
            store.max_metadata_items()
    finally:
        store.close()
    assert (raised.value.upstream, raised.value.retryable) == ("keystone", False)
    assert "401" in raised.value.reason
    assert "not-the-password" not in str(raised.value)


def test_an_expired_token_is_renewed_transparently(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-19", LANDB_KEYS)
    server_store.max_metadata_items()
    tokens_issued = len([call for call in state.api_calls("keystone") if call.method == "POST"])
    assert tokens_issued == 1
    assert state.expire_tokens() >= 1
    state.reset_api_calls()
    server_store.set_metadata(server, {"landb-alias": "app--load-0-"})
    assert state.metadata(server)["landb-alias"] == "app--load-0-"
    assert [call.status for call in nova_calls(state, "POST")] == [401, 200]
    assert len([call for call in state.api_calls("keystone") if call.method == "POST"]) == 1


# -- configuration -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud", ["cloud_name", "appcred_cloud_name", "trust_cloud_name"])
def test_every_cern_style_credential_works(simulator: Any, client_config: Any, cloud: str) -> None:
    server = simulator.state.add_server("cluster-node-20")
    store = OpenStackServerStore(
        OpenStackSession(
            getattr(client_config, cloud), clouds_yaml=client_config.clouds_yaml, options=openstack_options()
        )
    )
    try:
        assert store.servers_for([node("cluster-node-20", server)])["cluster-node-20"].id == server
    finally:
        store.close()


def test_without_a_cloud_name_the_os_environment_is_used(
    simulator: Any, client_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in client_config.environment().items():
        monkeypatch.setenv(name, value)
    simulator.state.set_quota(77)
    store = OpenStackServerStore(OpenStackSession(None, options=openstack_options()))
    try:
        assert store.max_metadata_items() == 77
    finally:
        store.close()


def test_a_read_only_account_is_refused_writes_without_retries(simulator: Any, client_config: Any) -> None:
    state = simulator.state
    server = state.add_server("cluster-node-21", LANDB_KEYS)
    store = OpenStackServerStore(
        OpenStackSession(
            client_config.readonly_cloud_name,
            clouds_yaml=client_config.clouds_yaml,
            options=openstack_options(),
        )
    )
    state.reset_api_calls()
    try:
        with pytest.raises(UpstreamError) as raised:
            store.set_metadata(server, {"landb-alias": "app--load-0-"})
    finally:
        store.close()
    assert (raised.value.upstream, raised.value.retryable) == ("nova", False)
    assert len(nova_calls(state, "POST")) == 1
    assert state.metadata(server) == LANDB_KEYS


def test_concurrent_first_use_connects_and_authenticates_once(simulator: Any, server_store: Any) -> None:
    state = simulator.state
    servers = [state.add_server(f"cluster-node-{30 + i}", LANDB_KEYS) for i in range(8)]
    state.reset_api_calls()
    alias = {"landb-alias": "app--load-0-"}
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda server: server_store.set_metadata(server, alias), servers))
    assert all(state.metadata(server)["landb-alias"] == "app--load-0-" for server in servers)
    assert len([call for call in state.api_calls("keystone") if call.method == "POST"]) == 1
    assert len(nova_calls(state, "POST")) == 8


def test_an_admin_credential_reads_its_own_project_s_servers_only(
    simulator: Any, make_server_store: Callable[..., OpenStackServerStore], client_config: Any
) -> None:
    """An admin's token reads any project's server by id (and Nova would take its writes): a node whose
    providerID names another project's server gets no server, so nothing of it is ever written; the
    name search is Nova's, scoped to the token's project, with no ``all_tenants``."""
    state = simulator.state
    other_project = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"
    ours = state.add_server("admin-node-0")
    state.add_server("admin-node-0", project_id=other_project)  # same name, another project
    theirs = state.add_server("their-node", project_id=other_project)
    store = make_server_store(cloud=client_config.admin_cloud_name)

    with capture_logs() as logs:
        found = store.servers_for([node("admin-node-0"), node("admin-node-1", theirs)])
        read_by_id = store.server(theirs)

    assert {name: server.id for name, server in found.items()} == {"admin-node-0": ours}
    assert read_by_id is None
    ignored = ("server of another project ignored: neither read nor written", other_project)
    assert [(log["event"], log.get("project_id")) for log in logs if log["log_level"] == "warning"] == [
        ignored,
        ("server of node not found", None),
        ignored,
    ]
    assert all("all_tenants" not in call.query for call in server_searches(state))
