"""The simulated Keystone: logins the way CERN clusters log in, tokens that expire, re-authentication."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openstack
import pytest
from keystoneauth1.exceptions.http import ServiceUnavailable
from openstack.connection import Connection

from landb_simulator import ClientConfig, Simulator, SimulatorState

TokenFactory = Any  # the keystone_token fixture from tests/conftest.py


class ManualClock:
    """Keystone's notion of now, moved by the test instead of by waiting."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def password_body(user: str, password: str, scope: dict[str, Any] | None = None) -> dict[str, Any]:
    auth: dict[str, Any] = {
        "identity": {
            "methods": ["password"],
            "password": {"user": {"name": user, "domain": {"name": "Default"}, "password": password}},
        }
    }
    if scope is not None:
        auth["scope"] = scope
    return {"auth": auth}


def connect(config: ClientConfig, cloud: str | None = None) -> Connection:
    return openstack.connect(cloud=cloud or config.cloud_name)


def auth_posts(simulator: Simulator) -> list[int]:
    return [c.status for c in simulator.state.api_calls("keystone") if c.path.endswith("/auth/tokens")]


def test_a_password_login_gets_a_project_token_and_the_compute_catalog(
    simulator: Simulator, http: httpx.Client
) -> None:
    credentials = simulator.state.credentials
    scope = {"project": {"name": credentials.project_name, "domain": {"name": "Default"}}}

    reply = http.post(
        f"{simulator.url}/identity/v3/auth/tokens",
        json=password_body(credentials.username, credentials.password, scope),
    )

    assert reply.status_code == 201
    assert reply.headers["X-Subject-Token"]
    token = reply.json()["token"]
    assert token["project"]["id"] == credentials.project_id
    assert {role["name"] for role in token["roles"]} == {"member", "reader"}
    (compute,) = [service for service in token["catalog"] if service["type"] == "compute"]
    assert {(e["interface"], e["region"], e["url"]) for e in compute["endpoints"]} == {
        (interface, "cern", f"{simulator.url}/compute/v2.1") for interface in ("public", "internal", "admin")
    }


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (password_body("landb-webhook", "wrong"), 401),
        (password_body("nobody", "secret"), 401),
        ({"auth": {"identity": {"methods": ["password"]}}}, 400),
        ({"something": "else"}, 400),
    ],
    ids=["wrong-password", "unknown-user", "no-password-block", "no-auth"],
)
def test_bad_credentials_are_refused(
    simulator: Simulator, http: httpx.Client, body: dict[str, Any], status: int
) -> None:
    reply = http.post(f"{simulator.url}/identity/v3/auth/tokens", json=body)
    assert reply.status_code == status
    assert reply.json()["error"]["code"] == status
    assert "X-Subject-Token" not in reply.headers


def test_a_project_that_does_not_exist_is_refused(simulator: Simulator, http: httpx.Client) -> None:
    credentials = simulator.state.credentials
    scope = {"project": {"name": "someone-elses", "domain": {"name": "Default"}}}
    reply = http.post(
        f"{simulator.url}/identity/v3/auth/tokens",
        json=password_body(credentials.username, credentials.password, scope),
    )
    assert reply.status_code == 401


def token_details(simulator: Simulator, http: httpx.Client, own: str, token: str) -> dict[str, Any]:
    """What Keystone says about ``token``, asked with a token of our own."""
    reply = http.get(
        f"{simulator.url}/identity/v3/auth/tokens", headers={"X-Auth-Token": own, "X-Subject-Token": token}
    )
    assert reply.status_code == 200
    return dict(reply.json()["token"])


def test_the_sdk_logs_in_with_the_application_credential(
    simulator: Simulator, sim_clients: ClientConfig, http: httpx.Client, keystone_token: TokenFactory
) -> None:
    simulator.state.add_server("node")
    conn = connect(sim_clients, sim_clients.appcred_cloud_name)
    try:
        assert [server.name for server in conn.compute.servers()] == ["node"]
        token = token_details(simulator, http, keystone_token("landb-webhook"), conn.auth_token)
    finally:
        conn.close()
    assert token["methods"] == ["application_credential"]
    assert token["application_credential"]["id"] == simulator.state.credentials.application_credential_id


def test_a_wrong_application_credential_secret_is_refused(simulator: Simulator, http: httpx.Client) -> None:
    body = {
        "auth": {
            "identity": {
                "methods": ["application_credential"],
                "application_credential": {
                    "id": simulator.state.credentials.application_credential_id,
                    "secret": "not-it",
                },
            }
        }
    }
    assert http.post(f"{simulator.url}/identity/v3/auth/tokens", json=body).status_code == 401


def test_the_sdk_logs_in_through_the_trust_as_magnum_clusters_do(
    simulator: Simulator, sim_clients: ClientConfig, http: httpx.Client, keystone_token: TokenFactory
) -> None:
    simulator.state.add_server("node")
    conn = connect(sim_clients, sim_clients.trust_cloud_name)
    try:
        assert [server.name for server in conn.compute.servers()] == ["node"]
        token = token_details(simulator, http, keystone_token("landb-webhook"), conn.auth_token)
    finally:
        conn.close()
    assert token["OS-TRUST:trust"]["id"] == simulator.state.credentials.trust_id


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_900_000_000.0)


@pytest.fixture
def timed_simulator(
    clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Simulator]:
    """A simulator whose Keystone tells time by ``clock``, with clients configured for it."""
    with Simulator(state=SimulatorState(clock=clock)) as simulator:
        config = simulator.write_client_config(tmp_path)
        for name, value in config.environment().items():
            monkeypatch.setenv(name, value)
        yield simulator


def test_an_expired_token_gets_401_and_the_sdk_logs_in_again(
    timed_simulator: Simulator, clock: ManualClock
) -> None:
    simulator = timed_simulator
    simulator.state.add_server("node")
    conn = openstack.connect(cloud="simulator")
    try:
        assert len(list(conn.compute.servers())) == 1
        simulator.state.reset_api_calls()

        clock.now += simulator.state.token_ttl + 1  # Keystone now considers the token expired
        assert len(list(conn.compute.servers())) == 1
    finally:
        conn.close()

    calls = [(call.api, call.method, call.status) for call in simulator.state.api_calls()]
    assert calls[0] == ("nova", "GET", 401)
    assert ("keystone", "POST", 201) in calls
    assert calls[-1] == ("nova", "GET", 200)


def test_revoked_tokens_force_a_new_login(simulator: Simulator, sim_clients: ClientConfig) -> None:
    server_id = simulator.state.add_server("node")
    conn = connect(sim_clients)
    try:
        conn.compute.set_server_metadata(server_id, **{"landb-alias": "a"})
        assert simulator.state.expire_tokens() >= 1
        conn.compute.set_server_metadata(server_id, **{"landb-alias": "b"})
    finally:
        conn.close()
    assert auth_posts(simulator) == [201, 201]
    assert simulator.state.metadata(server_id) == {"landb-alias": "b"}


def test_token_validation_and_revocation(
    simulator: Simulator, http: httpx.Client, keystone_token: TokenFactory
) -> None:
    credentials = simulator.state.credentials
    caller = keystone_token(credentials.username)
    subject = keystone_token(credentials.reader_username)
    url = f"{simulator.url}/identity/v3/auth/tokens"
    headers = {"X-Auth-Token": caller, "X-Subject-Token": subject}

    assert http.get(url, headers=headers).json()["token"]["user"]["name"] == credentials.reader_username
    assert http.head(url, headers=headers).status_code == 200
    assert http.delete(url, headers=headers).status_code == 204
    assert http.get(url, headers=headers).status_code == 404
    assert (
        http.get(f"{simulator.url}/compute/v2.1/servers", headers={"X-Auth-Token": subject}).status_code
        == 401
    )


def test_version_discovery(simulator: Simulator, http: httpx.Client) -> None:
    root = http.get(f"{simulator.url}/identity/")
    assert root.status_code == 300
    assert [version["id"] for version in root.json()["versions"]["values"]] == ["v3.14"]
    assert http.get(f"{simulator.url}/identity/v3").json()["version"]["status"] == "stable"


def test_keystone_down_fails_the_login_and_recovers(simulator: Simulator, sim_clients: ClientConfig) -> None:
    simulator.state.add_server("node")
    simulator.state.inject_fault(api="keystone", method="POST", path_pattern="/auth/tokens$", status=503)
    conn = connect(sim_clients)
    try:
        with pytest.raises(ServiceUnavailable):
            list(conn.compute.servers())
        assert [server.name for server in conn.compute.servers()] == ["node"]
    finally:
        conn.close()
    assert auth_posts(simulator) == [503, 201]
