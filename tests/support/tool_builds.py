"""The Go tools .ci/run builds in the background while the tests that need none of them run.

A fresh machine spends most of a CI run building external-dns, prometheus, helm, etcd and kube-apiserver
from the Go module proxy. .ci/run starts ``scripts/build-tools.sh`` (niced) in the background and announces
it by exporting ``TEST_TOOL_BUILDS``, the builder's status directory, before it runs ``make test``; then:

- the tests are ordered so that those needing no tool run first, and the others in the order the builder
  builds what they need (:data:`STEPS`): ``order_by_tool_builds``, called from tests/conftest.py;
- a fixture that locates a tool first waits for its build step to end (``await_tool_build``), then
  locates it as always, or skips with the build's failure.

The status directory, as scripts/build-tools.sh writes it:

| file                | written                              | holds                                      |
|---------------------|--------------------------------------|--------------------------------------------|
| ``builder.pid``     | by .ci/run, before ``make test``     | the builder's process id                   |
| ``<step>.log``      | while ``make <step>`` runs           | its output                                 |
| ``<step>.ok``       | when it succeeded (renamed in whole) | how long it took                           |
| ``<step>.failed``   | when it failed (renamed in whole)    | its exit status and time; its last lines   |

Without ``TEST_TOOL_BUILDS`` (a developer's ``make test``) nothing waits: a missing tool skips its tests
with the reason and how to build it, as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

STATUS_DIR_VARIABLE = "TEST_TOOL_BUILDS"
"""Not ``LANDB_``-prefixed: the webhook and the simulator refuse an unknown ``LANDB_*`` variable (exit 2), and
every process the tests start inherits this one."""

STEPS = ("e2e-tools", "prometheus-tools", "kube-tools", "deploy-tools")
"""The Makefile targets scripts/build-tools.sh runs, in its order. external-dns first: its 20 e2e tests are
the longest group to run once it is there, and they run while prometheus, etcd and kube-apiserver (most of
the build) are built. prometheus and promtool next (about 6 CPU-minutes): their tests (promtool's, the
scrape of ``serve``: 2 or 3 minutes) run while etcd and kube-apiserver build, so they add no wait at the
end; anywhere before the last step their build adds the same CPU time, and last it would leave their tests
after everything. helm last (3 CPU-minutes), built while the ~75 tests needing the API server run: what is
left after the last build is its 7 tests."""

FIXTURE_STEPS = {
    "external_dns_binary": "e2e-tools",
    "prometheus_tools": "prometheus-tools",
    "helm_chart": "deploy-tools",
    "kube_apiserver": "kube-tools",
    "gateway_api": "kube-tools",
}
"""The fixtures that locate a tool, and the step that builds it. A test reaching a tool another way
(``request.getfixturevalue``) says so with ``@pytest.mark.needs_tools(step)``."""

WAIT_TIMEOUT = 75 * 60.0
"""Seconds a fixture waits for one step: a fresh build on a 2-core machine takes about 35 minutes; CI
itself is stopped at 90."""
POLL_INTERVAL = 2.0
"""Seconds between two looks at the status directory."""


def steps_needed(item: pytest.Item) -> set[str]:
    """The build steps whose tools ``item`` uses: through its fixtures, or as its marks say."""
    fixtures = getattr(item, "fixturenames", ())
    needed = {step for fixture, step in FIXTURE_STEPS.items() if fixture in fixtures}
    for mark in item.iter_markers("needs_tools"):
        needed.update(mark.args)
    return needed


def build_rank(item: pytest.Item) -> int:
    """0 for a test needing no tool; else 1 + the position in :data:`STEPS` of the last step it waits for."""
    needed = steps_needed(item)
    return 1 + max(STEPS.index(step) for step in needed) if needed else 0


def order_by_tool_builds(items: list[pytest.Item]) -> None:
    """Tests needing no tool first, then by the build step they wait for last; within each group the order
    pytest chose is kept (a stable sort): a module's tests stay together, its fixtures set up once a group."""
    items.sort(key=build_rank)


def announced_builds() -> Path | None:
    """The status directory of the background build .ci/run announced, if any."""
    announced = os.environ.get(STATUS_DIR_VARIABLE)
    return Path(announced) if announced else None


def await_tool_build(
    step: str,
    status: Path | None,
    *,
    say: Callable[[str], None],
    timeout: float = WAIT_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Wait until the background build announced in ``status`` (None: no build announced) has ended ``step``.

    None when no build is announced or ``step`` built: the caller then locates the tool as usual. Otherwise
    why the tool is not coming: the step failed (its reason and log), the builder is gone without ending
    it, or ``timeout`` seconds passed. ``say`` gets a line when the wait starts and when it ends.
    """
    if status is None:
        return None
    log = status / f"{step}.log"
    started = clock()
    waiting = False
    while True:
        alive = _builder_alive(status)  # before the results: the builder writes the last one, then ends
        if (status / f"{step}.ok").exists():
            if waiting:
                say(f"{step} built after a wait of {clock() - started:.0f} s")
            return None
        failed = status / f"{step}.failed"
        if failed.exists():
            return f"the background build of {step} failed: {failed.read_text().strip()} (log: {log})"
        if not alive:
            return f"the background build ended before {step} did (log: {log})"
        if clock() - started > timeout:
            return f"gave up after {timeout:.0f} s waiting for the background build of {step} (log: {log})"
        if not waiting:
            say(f"waiting for the background build of {step} (log: {log})")
            waiting = True
        sleep(POLL_INTERVAL)


def skip_unless_built(step: str, config: pytest.Config) -> None:
    """Wait for the announced background build of ``step``, if any; skip the test if the tool is not coming.

    The waits are said on the terminal, past pytest's output capture: they are the CI run's phases."""

    def say(line: str) -> None:
        capture = config.pluginmanager.getplugin("capturemanager")
        reporter = config.pluginmanager.getplugin("terminalreporter")
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"tool builds: {line}")

    reason = await_tool_build(step, announced_builds(), say=say)
    if reason is not None:
        pytest.skip(reason)


def describe_builds(status: Path | None) -> list[str]:
    """One line per step of the announced build: how it ended, or that it has not (for the test summary)."""
    if status is None:
        return []
    lines = []
    for step in STEPS:
        ended = [status / f"{step}.{result}" for result in ("ok", "failed")]
        found = [path for path in ended if path.exists()]
        outcome = found[0].read_text().splitlines()[0] if found else "not ended"
        lines.append(f"tool builds: {step}: {outcome} (log: {status / step}.log)")
    return lines


def _builder_alive(status: Path) -> bool:
    """Whether the process named in builder.pid still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        pid = int((status / "builder.pid").read_text())
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return state != "Z"
