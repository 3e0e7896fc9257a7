"""Security promises: TLS verification is on for OpenStack and Kubernetes (with CA bundle options), no
code turns it off, and no credential, token or secret reaches a log line or an error body, whatever
Keystone, Nova or Kubernetes answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from e2e.e2e_support import MEDIA_TYPE, WebhookProcess, http_get, http_post, simulator_settings
from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import create_with_claim
from landb_webhook.adapters.kubeclient import api_client_for
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import OpenStackSession
from landb_webhook.backends import Node, UpstreamError
from landb_webhook.config import Settings
from support.default_options import openstack_options, retry_policy

SOURCE = Path(__file__).resolve().parents[2] / "src" / "landb_webhook"
NO_NODES: list[Node] = []


def https_clouds_yaml(config: ClientConfig, simulator: Simulator, path: Path, **extra: Any) -> Path:
    """The simulator's clouds.yaml, pointed at its HTTPS port (a certificate no system CA signed)."""
    document = yaml.safe_load(config.clouds_yaml.read_text())
    cloud = document["clouds"][config.cloud_name]
    cloud["auth"]["auth_url"] = cloud["auth"]["auth_url"].replace(simulator.url, simulator.https_url)
    cloud.update(extra)
    path.write_text(yaml.safe_dump(document))
    return path


# -- TLS ---------------------------------------------------------------------------------------------------


def test_openstack_tls_is_verified_by_default(
    simulator: Simulator, client_config: Any, tmp_path: Path
) -> None:
    clouds = https_clouds_yaml(client_config, simulator, tmp_path / "clouds.yaml")
    store = OpenStackServerStore(
        OpenStackSession(
            client_config.cloud_name,
            clouds_yaml=clouds,
            options=openstack_options(timeout=3, retry=retry_policy(transient_retries=0)),
        )
    )
    try:
        with pytest.raises(UpstreamError, match=r"SSL|TLS") as refused:
            store.max_metadata_items()
        assert refused.value.upstream == "keystone"
    finally:
        store.close()


@pytest.mark.parametrize("where", ["LANDB_OS_CACERT", "clouds.yaml cacert"])
def test_a_ca_bundle_makes_openstack_tls_verify(
    simulator: Simulator, client_config: Any, tmp_path: Path, where: str
) -> None:
    assert client_config.ca_file is not None
    in_yaml = {"cacert": str(client_config.ca_file)} if where == "clouds.yaml cacert" else {}
    clouds = https_clouds_yaml(client_config, simulator, tmp_path / "clouds.yaml", **in_yaml)
    cacert = client_config.ca_file if where == "LANDB_OS_CACERT" else None
    store = OpenStackServerStore(
        OpenStackSession(
            client_config.cloud_name,
            clouds_yaml=clouds,
            options=openstack_options(timeout=3),
            cacert=cacert,
        )
    )
    try:
        with capture_logs() as logs:
            assert store.max_metadata_items() == 128
        assert not [entry for entry in logs if "TLS verification" in entry["event"]]
    finally:
        store.close()


def test_turning_openstack_verification_off_in_the_configuration_is_said_out_loud(
    simulator: Simulator, client_config: Any, tmp_path: Path
) -> None:
    clouds = https_clouds_yaml(client_config, simulator, tmp_path / "clouds.yaml", verify=False)
    store = OpenStackServerStore(
        OpenStackSession(client_config.cloud_name, clouds_yaml=clouds, options=openstack_options(timeout=3))
    )
    try:
        with capture_logs() as logs:
            store.servers_for(NO_NODES)
            store.max_metadata_items()
        [warning] = [entry for entry in logs if "TLS verification of OpenStack is OFF" in entry["event"]]
        assert warning["log_level"] == "warning"
    finally:
        store.close()


def test_the_kubeconfig_ca_verifies_the_kubernetes_api_and_skipping_it_is_said_out_loud(
    client_config: Any, tmp_path: Path
) -> None:
    verified = api_client_for(client_config.kubeconfig)
    assert verified.configuration.verify_ssl
    assert verified.configuration.ssl_ca_cert
    verified.close()

    document = yaml.safe_load(client_config.kubeconfig.read_text())
    cluster = document["clusters"][0]["cluster"]
    del cluster["certificate-authority-data"]
    cluster["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "kubeconfig"
    insecure.write_text(yaml.safe_dump(document))
    with capture_logs() as logs:
        api_client_for(insecure).close()
    assert any("TLS verification of the Kubernetes API is OFF" in entry["event"] for entry in logs)


def test_no_code_turns_tls_verification_off() -> None:
    """Outside the simulator (whose own test clients are not the webhook's), nothing disables it."""
    switches = re.compile(r"verify\s*=\s*False|verify_ssl\s*=\s*False|insecure\s*=\s*True|CERT_NONE")
    offenders = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in SOURCE.rglob("*.py")
        if "simulator" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if switches.search(line)
    ]
    assert offenders == []


def test_the_api_listener_binds_loopback_by_default() -> None:
    assert Settings.model_fields["api_host"].default == "127.0.0.1"


# -- secrets -----------------------------------------------------------------------------------------------


@pytest.fixture
def webhook(simulator: Simulator, sim_clients: ClientConfig, tmp_path: Path) -> Iterator[WebhookProcess]:
    seed_cluster(simulator.state, ingress_nodes=2, workers=1)
    process = WebhookProcess(
        simulator_settings(
            sim_clients,
            LANDB_LOG_LEVEL="debug",  # every library's request logging included
            LANDB_REQUEST_TIMEOUT="5",
            LANDB_UPSTREAM_TIMEOUT="2",
        ),
        tmp_path / "webhook.log",
    )
    process.start()
    yield process
    process.stop()


def test_no_secret_reaches_a_log_line_or_an_error_body_whatever_upstreams_answer(
    simulator: Simulator, webhook: WebhookProcess
) -> None:
    state = simulator.state
    issued: set[str] = set()
    bodies: list[bytes] = []
    statuses: list[int] = []

    def loop(label: str) -> None:
        for status, body in (
            http_get(webhook.api_port, "/records")[::2],
            http_post(webhook.api_port, "/records", create_with_claim(label), {"Content-Type": MEDIA_TYPE}),
        ):
            statuses.append(status)
            bodies.append(body)
        issued.update(state.identity.issued())

    credentials = state.credentials
    loop("first")
    issued_token = state.identity.issued()[0]
    # Upstream bodies that echo secrets: a bare configured value, `token <v>`, `bearer <v>`.
    # (Only the webhook's own configured credentials can be known by value: it logs in with the password.)
    echoes = f"{credentials.password} token {issued_token} bearer {credentials.kubernetes_token}"
    faults: list[dict[str, Any]] = [
        {
            "api": "nova",
            "method": "POST",
            "status": 400,
            "body": {"badRequest": {"code": 400, "message": echoes}},
        },
        {"api": "nova", "status": 500, "body": f"proxy error: {echoes}"},
        {"api": "keystone", "status": 401, "body": {"error": {"code": 401, "message": echoes}}},
        {
            "api": "kubernetes",
            "path_pattern": "configmaps",
            "status": 500,
            "body": {"kind": "Status", "status": "Failure", "reason": "InternalError", "message": echoes},
        },
        {"api": "keystone", "status": 500},
        {"api": "keystone", "status": 401},
        {"api": "nova", "status": 500},
        {"api": "nova", "method": "POST", "status": 409},
        {"api": "nova", "method": "POST", "status": 403},
        {"api": "kubernetes", "path_pattern": "configmaps", "status": 500},
        {"api": "kubernetes", "path_pattern": "configmaps", "status": 403},
        {"api": "kubernetes", "path_pattern": "leases", "status": 401},
    ]
    for number, fault in enumerate(faults):
        state.expire_tokens()  # every round authenticates again: the password crosses the wire each time
        state.inject_fault(times=None, **fault)
        loop(f"fault{number}")
        state.clear_faults()
    loop("last")
    webhook.stop()

    assert 503 in statuses and 204 in statuses  # the faults were felt, and the webhook recovered
    secrets = {
        "password": credentials.password,
        "reader password": credentials.reader_password,
        "admin password": credentials.admin_password,
        "application credential secret": credentials.application_credential_secret,
        "kubernetes token": credentials.kubernetes_token,
        **{f"keystone token {n}": token for n, token in enumerate(sorted(issued))},
    }
    log = webhook.log_text()
    assert "[REDACTED]" in log  # lines that carried secrets were there, and were scrubbed
    for what, secret in secrets.items():
        assert secret not in log, f"the {what} is in the log"
        for body in bodies:
            assert secret.encode() not in body, f"the {what} is in a reply: {body!r}"
    assert "RESP BODY: [upstream body omitted]" in log  # keystoneauth's debug lines were there, bodies gone
    assert "proxy error" not in log and all(b"proxy error" not in body for body in bodies)
    errors = [reply["error"] for body in bodies if body and isinstance(reply := json.loads(body), dict)]
    assert any("keystone" in error for error in errors)
    assert any("kubernetes" in error or "lease" in error for error in errors)
