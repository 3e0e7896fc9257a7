"""Fixtures shared by every test tree: a running simulator and clients configured for it; Hypothesis
profiles for every property test.

Hypothesis profiles: ``dev`` (the default) is Hypothesis' own budget; ``ci`` (set by .ci/run) searches
harder; ``deep`` is for a bug hunt after changing a rule (minutes). Pick one with
``HYPOTHESIS_PROFILE=ci``. None has a deadline: a shared 2-core runner must not turn a slow example into
a failure."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, settings

from landb_simulator import ClientConfig, Simulator
from landb_simulator.identity import DOMAIN_NAME, PROJECT_NAME
from support.kube_apiserver import (
    KubeApiServer,
    locate_binaries,
    locate_gateway_api_crds,
    running_kube_apiserver,
)
from support.logging_state import restored_logging
from support.prometheus import PrometheusTools, locate_prometheus_tools
from support.tool_builds import announced_builds, describe_builds, order_by_tool_builds, skip_unless_built

settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("deep", parent=settings.get_profile("ci"), max_examples=3000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by parametrized fixtures
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests needing no Go tool first: .ci/run builds the tools in the background meanwhile
    (support/tool_builds.py)."""
    order_by_tool_builds(items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How each background tool build ended (before pytest's closing line, which CI reads)."""
    for line in describe_builds(announced_builds()):
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def logging_as_found() -> Iterator[None]:
    """What a test configures (every CLI command calls configure_logging) is undone after it."""
    with restored_logging():
        yield


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    """A fresh, empty simulator on loopback (seed it with ``seed_cluster(simulator.state)``)."""
    with Simulator() as running:
        yield running


@pytest.fixture(scope="session")
def kube_apiserver(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[KubeApiServer]:
    """A real etcd + kube-apiserver on loopback for the whole session (skipped, with the reason, when
    ``make kube-tools`` has not built them); tests isolate themselves by namespace. Waits for them while
    .ci/run builds them in the background."""
    skip_unless_built("kube-tools", pytestconfig)
    binaries, reason = locate_binaries()
    if binaries is None:
        pytest.skip(reason)
    with running_kube_apiserver(*binaries, workdir=tmp_path_factory.mktemp("kube-apiserver")) as server:
        yield server


@pytest.fixture(scope="session")
def gateway_api(kube_apiserver: KubeApiServer) -> KubeApiServer:
    """The real API server with the Gateway API standard CRDs installed and Established (skipped, with the
    reason, when ``make kube-tools`` has not fetched them)."""
    documents, reason = locate_gateway_api_crds()
    if not documents:
        pytest.skip(reason)
    kube_apiserver.install_gateway_api(documents)
    return kube_apiserver


@pytest.fixture(scope="session")
def prometheus_tools(pytestconfig: pytest.Config) -> PrometheusTools:
    """The real prometheus and promtool (skipped, with the reason, when ``make prometheus-tools`` has not
    built them). Waits for them while .ci/run builds them in the background."""
    skip_unless_built("prometheus-tools", pytestconfig)
    tools, reason = locate_prometheus_tools()
    if tools is None:
        pytest.skip(reason)
    return tools


@pytest.fixture
def sim_clients(simulator: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ClientConfig:
    """clouds.yaml and kubeconfig for ``simulator``, exported as OS_CLIENT_CONFIG_FILE, OS_CLOUD and
    KUBECONFIG so ``openstack.connect(cloud="simulator")``, the openstack CLI and kubectl find them."""
    config = simulator.write_client_config(tmp_path / "simulator-clients")
    for name, value in config.environment().items():
        monkeypatch.setenv(name, value)
    # kubectl caches discovery per server address; a private cache keeps tests independent.
    monkeypatch.setenv("KUBECACHEDIR", str(tmp_path / "kube-cache"))
    return config


NovaClientFactory = Callable[..., httpx.Client]
TokenFactory = Callable[[str], str]

_TLS_CONTEXT = ssl.create_default_context()
"""Built once: httpx loads the CA bundle for every client otherwise, which costs more than a request."""


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    """A plain HTTP client for one-off requests to a simulator (pass full URLs)."""
    with httpx.Client(timeout=10, verify=_TLS_CONTEXT) as client:
        yield client


@pytest.fixture
def keystone_token(simulator: Simulator) -> TokenFactory:
    """``keystone_token(user)``: a fresh project-scoped token for one of the simulator's users."""
    credentials = simulator.state.credentials
    passwords = {
        credentials.username: credentials.password,
        credentials.reader_username: credentials.reader_password,
        credentials.admin_username: credentials.admin_password,
    }
    return lambda user: issue_token(simulator.url, user, passwords[user])


@pytest.fixture
def nova_http(simulator: Simulator, keystone_token: TokenFactory) -> Iterator[NovaClientFactory]:
    """Raw HTTP to the simulated Nova, for what the SDK hides (status codes, bodies, microversions).

    ``nova_http()`` logs in as the webhook's member user, ``nova_http(user="landb-reader")`` as the
    read-only one; the client sends ``OpenStack-API-Version: compute <microversion>``.
    """
    clients: list[httpx.Client] = []

    def make(user: str = simulator.state.credentials.username, microversion: str = "2.96") -> httpx.Client:
        token = keystone_token(user)
        headers = {"X-Auth-Token": token, "OpenStack-API-Version": f"compute {microversion}"}
        http = httpx.Client(
            base_url=f"{simulator.url}/compute/v2.1", headers=headers, timeout=10, verify=_TLS_CONTEXT
        )
        clients.append(http)
        return http

    yield make
    for http in clients:
        http.close()


def issue_token(url: str, user: str, password: str) -> str:
    """A project-scoped Keystone token, obtained the way keystoneauth asks for one."""
    body = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {"user": {"name": user, "domain": {"name": DOMAIN_NAME}, "password": password}},
            },
            "scope": {"project": {"name": PROJECT_NAME, "domain": {"name": DOMAIN_NAME}}},
        }
    }
    with httpx.Client(timeout=10, verify=_TLS_CONTEXT) as http:
        reply = http.post(f"{url}/identity/v3/auth/tokens", json=body)
    assert reply.status_code == 201, reply.text
    return reply.headers["X-Subject-Token"]
