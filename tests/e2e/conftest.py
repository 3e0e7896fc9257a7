"""Fixtures for the end-to-end tests: the real external-dns, the feeder, the simulator and the webhook.

The tests skip (never fail) when external-dns or Go is missing, with the reason and the fix in the
skip message. When a test fails, the webhook log and the external-dns runs are attached to its report.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from e2e_support import E2EStack, Feeder, build_feeder, locate_external_dns

from landb_simulator import Simulator, seed_cluster
from support.tool_builds import skip_unless_built


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            diagnostics = getattr(value, "diagnostics", None)
            if callable(diagnostics):
                report.sections.extend(diagnostics())
    return report


@pytest.fixture(scope="session")
def external_dns_binary(pytestconfig: pytest.Config) -> Path:
    skip_unless_built("e2e-tools", pytestconfig)  # waits while .ci/run builds it in the background
    binary, reason = locate_external_dns()
    if binary is None:
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="session")
def feeder_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH: the connector-source feeder cannot be built")
    return build_feeder(tmp_path_factory.mktemp("feeder-bin"))


@pytest.fixture
def feeder(feeder_binary: Path, tmp_path: Path) -> Iterator[Feeder]:
    running = Feeder(feeder_binary, tmp_path)
    yield running
    running.stop()


@pytest.fixture
def stack(external_dns_binary: Path, feeder: Feeder, tmp_path: Path) -> Iterator[E2EStack]:
    """A fresh simulated cloud with 3 ingress nodes and 1 worker; the webhook starts on first use."""
    with Simulator() as simulator:
        seed_cluster(simulator.state, ingress_nodes=3, workers=1)
        world = E2EStack(
            simulator=simulator, workdir=tmp_path, external_dns=external_dns_binary, feeder=feeder
        )
        try:
            yield world
        finally:
            world.close()
