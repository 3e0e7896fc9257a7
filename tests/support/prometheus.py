"""The shipped alert rules, and the real Prometheus and promtool that judge them (``make prometheus-tools``).

deploy/prometheus-rules.yaml is a PrometheusRule (the Operator's manifest); promtool and Prometheus read plain
rule files, so :func:`write_rule_file` writes its ``spec`` as one. :class:`RunningPrometheus` is a real
Prometheus on 127.0.0.1 with its storage in a temporary directory, asked through its HTTP API.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from support.waiting import eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES = REPO_ROOT / "deploy" / "prometheus-rules.yaml"
PROMETHEUS_VERSION = "3.16.0"
"""What the binaries scripts/install-prometheus.sh builds report (module v0.316.0)."""
INSTALL_HINT = "run make prometheus-tools (scripts/install-prometheus.sh; needs Go)"
START_TIMEOUT = 120.0
"""Seconds Prometheus may take to answer /-/ready: about a second on an idle machine (a bound)."""
STOP_TIMEOUT = 30.0


def rules() -> list[dict[str, Any]]:
    """Every rule of deploy/prometheus-rules.yaml, in the file's order."""
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def write_rule_file(path: Path, *, for_divided_by: int = 1) -> Path:
    """The PrometheusRule's ``spec`` as a plain rule file at ``path``; each ``for:`` divided by
    ``for_divided_by`` (60: minutes become seconds) for a test that cannot wait for them."""
    spec = yaml.safe_load(RULES.read_text())["spec"]
    for group in spec["groups"]:
        for rule in group["rules"]:
            if "for" in rule and for_divided_by != 1:
                rule["for"] = f"{seconds(rule['for']) // for_divided_by}s"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def seconds(duration: str) -> int:
    """A Prometheus duration of one unit (``15m``, ``2h``, ``30s``) in seconds."""
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match is not None, f"not a one-unit duration: {duration!r}"
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


# -- the binaries --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrometheusTools:
    prometheus: Path
    promtool: Path


def tools_dir() -> Path:
    return Path(os.environ.get("LANDB_TOOLS_DIR") or Path.home() / ".cache" / "landb-webhook")


def locate_prometheus_tools() -> tuple[PrometheusTools | None, str]:
    """prometheus and promtool of the wanted version from the install script's cache, or None and why not."""
    found = {}
    for name in ("prometheus", "promtool"):
        binary = tools_dir() / "go" / "bin" / name
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            return None, f"{name} {PROMETHEUS_VERSION} not found at {binary}: {INSTALL_HINT}"
        completed = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        words = completed.stdout.split()
        version = words[2] if len(words) > 2 else completed.stdout.strip()
        if version != PROMETHEUS_VERSION:
            return None, f"{binary} reports {version!r}, the tests need {PROMETHEUS_VERSION}: {INSTALL_HINT}"
        found[name] = binary
    return PrometheusTools(**found), ""


def promtool(tools: PrometheusTools, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


# -- a running Prometheus --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One static scrape target, and the labels the Operator's relabelling would give it."""

    address: str
    labels: Mapping[str, str]


class RunningPrometheus:
    """A Prometheus scraping static targets every second and evaluating its rules every second."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.url = url
        self._process = process
        self.log_path = log_path
        self._http = httpx.Client(base_url=url, timeout=10)

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful answer of ``/api/v1/<path>``; fails the test on an error."""
        reply = self._http.get(f"/api/v1/{path}", params=params)
        body = reply.json()
        assert reply.status_code == 200 and body["status"] == "success", (path, params, reply.text)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return list(data["result"])

    def alerts(self, state: str = "firing") -> list[dict[str, Any]]:
        """The alerts in ``state`` (firing, pending) now."""
        return [alert for alert in self.api("alerts")["alerts"] if alert["state"] == state]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        self._http.close()
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(STOP_TIMEOUT)


@contextmanager
def running_prometheus(
    tools: PrometheusTools, workdir: Path, targets: Sequence[Target], rule_files: Sequence[Path], port: int
) -> Iterator[RunningPrometheus]:
    """Prometheus on 127.0.0.1:``port`` (its data in ``workdir``), scraping ``targets`` at ``/metrics``
    every second as the chart's ServiceMonitor does (job ``external-dns``), stopped when the block ends."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": "external-dns",
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [target.address], "labels": dict(target.labels)} for target in targets
                ],
            }
        ],
    }
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    checked = promtool(tools, "check", "config", str(config_path), cwd=workdir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    log_path = workdir / "prometheus.log"
    address = f"127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(tools.prometheus),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={address}",
            ],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = RunningPrometheus(f"http://{address}", process, log_path)
    try:
        eventually(
            lambda: _ready(server),
            what=f"Prometheus to answer /-/ready on {address}",
            timeout=START_TIMEOUT,
            every=0.2,
            detail=server.log_text,
        )
        yield server
    finally:
        server.stop()
    shutil.rmtree(workdir / "data", ignore_errors=True)


def _ready(server: RunningPrometheus) -> bool:
    assert server.alive(), f"prometheus exited:\n{server.log_text()}"
    try:
        return httpx.get(f"{server.url}/-/ready", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
