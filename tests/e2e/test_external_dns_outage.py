"""external-dns in its normal loop (not ``--once``) lives through a Nova outage and converges after it.

With ``--once`` any error is fatal, so the other e2e tests cannot show this: here the real binary runs
its interval loop while Nova answers 503, and must log a soft error, stay up, and publish the aliases
once Nova is back (design invariant 6).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_support import DOMAIN, E2EStack, endpoint_json, stop_process

from support.waiting import eventually

pytestmark = pytest.mark.e2e

WAIT = 30.0
SOFT_ERROR = "failed to get records with code 503 (consecutive soft errors"
RECOVERED = "Reconciliation succeeded after"


def wait_for(condition: Callable[[], bool], what: str, process: subprocess.Popen[str], log: Path) -> None:
    """Wait on ``condition`` (bounded); fail at once, with the log, if external-dns exits meanwhile."""

    def running_and(condition: Callable[[], bool]) -> bool:
        if process.poll() is not None:
            pytest.fail(f"external-dns exited ({process.returncode}) waiting for {what}:\n{log.read_text()}")
        return condition()

    eventually(
        lambda: running_and(condition),
        what=what,
        timeout=WAIT,
        every=0.1,
        detail=lambda: log.read_text()[-4000:],
    )


@pytest.fixture
def looping_external_dns(stack: E2EStack, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    stack.start_webhook()
    assert stack.tap is not None
    log = tmp_path / "external-dns-loop.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [
                str(stack.external_dns),
                "--provider=webhook",
                f"--webhook-provider-url={stack.tap.url}",
                "--source=connector",
                f"--connector-source-server={stack.feeder.address}",
                "--registry=txt",
                f"--txt-owner-id={stack.owner_id}",
                "--policy=sync",
                f"--domain-filter={DOMAIN}",
                "--interval=1s",
                "--log-level=debug",
                "--metrics-address=127.0.0.1:0",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        yield process, log
    finally:
        stop_process(process)


def test_nova_outage_is_a_soft_error_and_the_loop_converges_once_nova_is_back(
    stack: E2EStack, looping_external_dns: tuple[subprocess.Popen[str], Path]
) -> None:
    process, log = looping_external_dns
    outage = stack.state.inject_fault(api="nova", status=503, times=None)
    stack.want(endpoint_json("app.cern.ch", "A", "192.0.2.10"))

    wait_for(lambda: log.read_text().count(SOFT_ERROR) >= 2, "two soft errors", process, log)
    assert stack.metadata_write_count() == 0

    outage.cancel()
    ingress = stack.ingress_server_ids()
    wait_for(
        lambda: all("app" in stack.aliases()[sid] for sid in ingress),
        "aliases on every ingress node",
        process,
        log,
    )
    wait_for(lambda: RECOVERED in log.read_text(), "external-dns to report the recovery", process, log)
    assert process.poll() is None, "external-dns must still be running"
