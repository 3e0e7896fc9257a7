"""The Go tools built in the background while the tests needing none of them run
(tests/support/tool_builds.py, scripts/build-tools.sh, .ci/run): tests needing a tool run last, in the
builder's order; a fixture locating a tool waits for an announced build step, then finds the tool or skips
with the build's failure; without an announced build nothing waits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest

from landb_webhook.config import unknown_variables
from support.tool_builds import POLL_INTERVAL, STATUS_DIR_VARIABLE, STEPS, await_tool_build, describe_builds

REPO_ROOT = Path(__file__).resolve().parents[2]


class Wait:
    """A virtual clock; its n-th sleep runs ``on_sleep(n)``: what the builder does meanwhile."""

    def __init__(self, on_sleep: Callable[[int], None] = lambda n: None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.said: list[str] = []
        self._on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self._on_sleep(len(self.sleeps))

    def __call__(self, step: str, status: Path | None, timeout: float = 3600.0) -> str | None:
        return await_tool_build(
            step, status, say=self.said.append, timeout=timeout, clock=self.clock, sleep=self.sleep
        )


def announced(tmp_path: Path, builder_pid: int) -> Path:
    """A status directory as .ci/run leaves it before `make test`: the builder's pid, nothing ended yet."""
    status = tmp_path / "tools"
    status.mkdir()
    (status / "builder.pid").write_text(f"{builder_pid}\n")
    return status


def reaped_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_without_an_announced_build_nothing_waits() -> None:
    wait = Wait()
    assert wait("kube-tools", None) is None
    assert wait.sleeps == [] and wait.said == []


def test_an_announced_step_is_waited_for_until_it_is_built(tmp_path: Path) -> None:
    status = announced(tmp_path, os.getpid())
    (status / "e2e-tools.ok").write_text("make e2e-tools took 300 s\n")  # another step's end is no answer

    def builder(sleeps: int) -> None:
        if sleeps == 3:
            (status / "kube-tools.ok").write_text("make kube-tools took 900 s\n")

    wait = Wait(builder)
    assert wait("kube-tools", status) is None
    assert wait.sleeps == [POLL_INTERVAL] * 3
    assert wait.said == [
        f"waiting for the background build of kube-tools (log: {status}/kube-tools.log)",
        "kube-tools built after a wait of 6 s",
    ]


def test_a_step_already_built_is_not_waited_for(tmp_path: Path) -> None:
    status = announced(tmp_path, os.getpid())
    (status / "deploy-tools.ok").write_text("make deploy-tools took 1 s\n")
    wait = Wait()
    assert wait("deploy-tools", status) is None
    assert wait.sleeps == [] and wait.said == []


def test_a_failed_step_is_the_reason_to_skip(tmp_path: Path) -> None:
    status = announced(tmp_path, os.getpid())

    def builder(sleeps: int) -> None:
        (status / "e2e-tools.failed").write_text("make e2e-tools exited 2 after 40 s\nno space left\n")

    wait = Wait(builder)
    assert wait("e2e-tools", status) == (
        "the background build of e2e-tools failed: make e2e-tools exited 2 after 40 s\n"
        f"no space left (log: {status}/e2e-tools.log)"
    )
    assert wait.sleeps == [POLL_INTERVAL]


def test_a_builder_gone_before_the_step_ended_ends_the_wait(tmp_path: Path) -> None:
    status = announced(tmp_path, reaped_pid())
    wait = Wait()
    assert wait("kube-tools", status) == (
        f"the background build ended before kube-tools did (log: {status}/kube-tools.log)"
    )
    assert wait.sleeps == []


def test_a_builder_ended_but_not_yet_reaped_counts_as_gone(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30.0  # the child has only to start Python and exit
        while Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.01)
        status = announced(tmp_path, process.pid)
        assert (
            Wait()("helm", status) == f"the background build ended before helm did (log: {status}/helm.log)"
        )
    finally:
        process.wait()


def test_the_wait_has_a_deadline(tmp_path: Path) -> None:
    status = announced(tmp_path, os.getpid())
    wait = Wait()
    reason = wait("kube-tools", status, timeout=60.0)
    assert reason == (
        f"gave up after 60 s waiting for the background build of kube-tools (log: {status}/kube-tools.log)"
    )
    assert wait.now == 62.0


def test_the_builder_runs_the_steps_in_order_and_publishes_each_as_the_fixtures_read_it(
    tmp_path: Path,
) -> None:
    """scripts/build-tools.sh with `make` replaced: its steps in STEPS' order, a failed one not stopping
    the next, each result read back by await_tool_build and summed up by describe_builds."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    made = tmp_path / "made"
    (fake_bin / "make").write_text(
        "#!/bin/sh\n"
        f'echo "$2" >> {made}\n'
        'if [ "$2" = deploy-tools ]; then echo "go: helm.sh/helm/v3@v3.22.0: no space left"; exit 2; fi\n'
        'echo "built $2"\n'
    )
    (fake_bin / "make").chmod(0o755)
    status = tmp_path / "tools"
    completed = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "build-tools.sh"), str(status)],
        env={**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 1, completed.stderr
    assert made.read_text().split() == list(STEPS)
    assert (status / "e2e-tools.log").read_text() == "built e2e-tools\n"

    (status / "builder.pid").write_text(f"{reaped_pid()}\n")  # it has ended: results decide, no waiting
    wait = Wait()
    assert wait("e2e-tools", status) is None
    assert wait("kube-tools", status) is None
    failure = wait("deploy-tools", status)
    assert failure is not None
    assert re.fullmatch(
        r"the background build of deploy-tools failed: "
        r"make deploy-tools exited 2 after \d+ s, \d+ CPU-seconds\n"
        rf"go: helm.sh/helm/v3@v3.22.0: no space left \(log: {status}/deploy-tools.log\)",
        failure,
    )
    assert wait.sleeps == []
    summary = dict(zip(STEPS, describe_builds(status), strict=True))
    assert [line.split(":")[1].strip() for line in summary.values()] == list(STEPS)
    log = f"{status}/deploy-tools.log"
    assert re.fullmatch(
        rf"tool builds: deploy-tools: make deploy-tools exited 2 after \d+ s, \d+ CPU-seconds \(log: {log}\)",
        summary["deploy-tools"],
    )
    log = f"{status}/kube-tools.log"
    assert re.fullmatch(
        rf"tool builds: kube-tools: make kube-tools took \d+ s, \d+ CPU-seconds \(log: {log}\)",
        summary["kube-tools"],
    )


# What each test of these modules uses, read from the modules themselves: the expectation the order and
# the skips are held to (support/tool_builds.py works it out from the fixtures and marks instead).
MODULES = [
    "tests/integration/test_deploy.py",
    "tests/e2e/test_ingress_path.py",
    "tests/e2e/test_external_dns_outage.py",
    "tests/integration/test_simulator_services.py",
    "tests/unit/test_docs.py",
    "tests/unit/test_prometheus_rules.py",
]


def steps_used(test_id: str) -> set[str]:
    if "test_ingress_path.py" in test_id:
        return {"e2e-tools", "kube-tools"}
    if "readme_install" in test_id:
        return {"deploy-tools", "kube-tools"}
    if "[kube-apiserver" in test_id:
        return {"kube-tools"}
    if "test_deploy.py" in test_id and "admin_pod" not in test_id:
        return {"deploy-tools"}
    if "tests/e2e/" in test_id:
        return {"e2e-tools"}
    if "::test_promtool_" in test_id:
        return {"prometheus-tools"}
    return set()


def waits_for(test_id: str) -> int:
    """0: needs no tool; else 1 + the builder's position of the last step it needs."""
    return max((1 + STEPS.index(step) for step in steps_used(test_id)), default=0)


@pytest.fixture(scope="module")
def run_with_failed_builds(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str | None]]:
    """pytest on MODULES (tool tests named first) while .ci/run's build has failed every step: each test
    in the order it ran, with its skip reason (None: it ran)."""
    tmp = tmp_path_factory.mktemp("tool-builds")
    status = tmp / "status"
    status.mkdir()
    (status / "builder.pid").write_text(f"{os.getpid()}\n")
    for step in STEPS:
        (status / f"{step}.failed").write_text(f"make {step} exited 2 after 1 s\n{step} broke\n")
    junit = tmp / "junit.xml"
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", *MODULES],
        cwd=REPO_ROOT,
        env={**os.environ, STATUS_DIR_VARIABLE: str(status), "LANDB_TOOLS_DIR": str(tmp / "no-tools")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    ran = []
    for case in ElementTree.parse(junit).iter("testcase"):
        test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        skipped = case.find("skipped")
        ran.append((test_id, None if skipped is None else skipped.get("message", "")))
    return ran


def test_tests_needing_no_tool_run_first_then_in_the_builders_order(
    run_with_failed_builds: list[tuple[str, str | None]],
) -> None:
    ran = [test_id for test_id, _ in run_with_failed_builds]
    ranks = [waits_for(test_id) for test_id in ran]
    assert set(ranks) == set(range(1 + len(STEPS)))  # every kind is there: the order says something
    assert ranks == sorted(ranks), "\n".join(
        f"{rank}  {test_id}" for rank, test_id in zip(ranks, ran, strict=True)
    )
    # Within each kind, the order pytest collected them in: module by module, as named.
    collected = sorted(ran, key=lambda test_id: MODULES.index(test_id.split("::")[0]))
    for rank in set(ranks):
        assert [t for t in ran if waits_for(t) == rank] == [t for t in collected if waits_for(t) == rank]


def test_a_test_needing_a_tool_whose_build_failed_is_skipped_with_the_failure(
    run_with_failed_builds: list[tuple[str, str | None]],
) -> None:
    for test_id, skipped in run_with_failed_builds:
        used = steps_used(test_id)
        if not used:
            assert skipped is None, test_id
            continue
        assert skipped is not None, test_id
        step = re.search(
            r"the background build of (\S+) failed: make \1 exited 2 after 1 s\n\1 broke", skipped
        )
        assert step is not None and step[1] in used, (test_id, skipped)


def test_the_variable_announcing_the_builds_is_no_setting_the_programs_would_refuse() -> None:
    """Every process the tests start (serve, the simulator, the demo, the image's smoke run) inherits it;
    a ``LANDB_*`` name that sets nothing stops each of them with exit 2 (config.unknown_variables)."""
    assert unknown_variables({STATUS_DIR_VARIABLE: "/tmp/tool-builds"}) == []
