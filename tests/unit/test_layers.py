"""The layers (docs/architecture.md) are import-linter contracts, ``[tool.importlinter]`` in pyproject.toml,
which ``make test`` checks on the packages as they are. Here each contract is shown to break on the import it
forbids: the linter runs on a copy of the product and the simulator with such imports added, one contract at
a time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

FORBIDDEN: dict[str, list[tuple[str, str, str]]] = {
    # contract id -> [(module of the copy, the import appended to it, the link the linter must name)]; the
    # module's path is inside the package the link starts from (landb_webhook, or landb_simulator).
    "pure-core": [
        ("landb/packing.py", "import socket", "landb_webhook.landb.packing -> socket"),
        (
            "landb/names.py",
            "from landb_webhook import metrics",
            "landb_webhook.landb.names -> landb_webhook.metrics",
        ),
    ],
    "rules-acyclic": [
        # the circle that was: the index rule typing the planner's output (under TYPE_CHECKING, counted)
        (
            "landb/indices.py",
            "from landb_webhook.landb import plan",
            "landb_webhook.landb.indices -> landb_webhook.landb.plan",
        ),
        # two rules of one layer
        (
            "landb/packing.py",
            "from landb_webhook.landb import holders",
            "landb_webhook.landb.packing -> landb_webhook.landb.holders",
        ),
    ],
    "provider-inside": [
        (
            "provider/records/view.py",
            "from landb_webhook import config",
            "landb_webhook.provider.records.view -> landb_webhook.config",
        ),
        (
            "provider/ownership/claims.py",
            "from landb_webhook import wiring",
            "landb_webhook.provider.ownership.claims -> landb_webhook.wiring",
        ),
    ],
    "provider-rooms": [
        # the watch reading status' values (the edge cut from dns_watch: short names, the linter wraps at 80)
        (
            "provider/watch/events.py",
            "from landb_webhook.provider.status import values",
            "landb_webhook.provider.watch.events -> landb_webhook.provider.status.values",
        ),
        # what is read reaching up into the apply path
        (
            "provider/read/health.py",
            "from landb_webhook.provider.apply import fence",
            "landb_webhook.provider.read.health -> landb_webhook.provider.apply.fence",
        ),
    ],
    "http-without-adapters": [
        (
            "webhook/wire.py",
            "from landb_webhook.adapters import retry",
            "landb_webhook.webhook.wire -> landb_webhook.adapters.retry",
        ),
    ],
    "adapters-outermost": [
        (
            "adapters/retry.py",
            "from landb_webhook import config",
            "landb_webhook.adapters.retry -> landb_webhook.config",
        ),
        (
            "adapters/memory.py",
            "import landb_webhook.provider",
            "landb_webhook.adapters.memory -> landb_webhook.provider",
        ),
    ],
    "no-simulator": [("cli.py", "import landb_simulator", "landb_webhook.cli -> landb_simulator")],
    "client-libraries-in-adapters": [
        ("wiring.py", "from kubernetes import client", "landb_webhook.wiring -> kubernetes"),
        ("cli.py", "import openstack", "landb_webhook.cli -> openstack"),
    ],
    "adapters-wired-in-one-place": [
        (
            "cli.py",
            "from landb_webhook.adapters import memory",
            "landb_webhook.cli -> landb_webhook.adapters.memory",
        ),
    ],
    "simulator-through-embedding": [
        # what the demo imported before embedding.py named the surface
        ("demo.py", "from landb_webhook.cli import run_webhook", "landb_simulator.demo -> landb_webhook.cli"),
        # the settings too come through embedding.py
        (
            "cli.py",
            "from landb_webhook.config import unknown_variables",
            "landb_simulator.cli -> landb_webhook.config",
        ),
        # the package itself is no way round
        ("runner.py", "import landb_webhook", "landb_simulator.runner -> landb_webhook"),
    ],
}


def lint(package_parent: Path, contract: str | None = None) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts on the packages found in ``package_parent``."""
    command = [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(PYPROJECT)]
    if contract is not None:
        command += ["--contract", contract]
    return subprocess.run(
        command,
        cwd=package_parent,
        env={"PYTHONPATH": str(package_parent), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def broken_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of both packages with every import of FORBIDDEN appended to its module."""
    parent = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "src" / "landb_webhook", parent / "landb_webhook")
    shutil.copytree(ROOT / "packages" / "simulator" / "src" / "landb_simulator", parent / "landb_simulator")
    for imports in FORBIDDEN.values():
        for module, statement, link in imports:
            package = link.split(".", 1)[0]
            with (parent / package / module).open("a", encoding="utf-8") as source:
                source.write(f"{statement}\n")
    return parent


def test_every_contract_is_shown_to_break() -> None:
    configured = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    assert sorted(contract["id"] for contract in configured) == sorted(FORBIDDEN)


@pytest.mark.parametrize("contract", sorted(FORBIDDEN))
def test_a_forbidden_import_breaks_its_contract(broken_copy: Path, contract: str) -> None:
    result = lint(broken_copy, contract)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 0 kept, 1 broken." in result.stdout
    for _, _, link in FORBIDDEN[contract]:
        assert link in result.stdout, result.stdout
