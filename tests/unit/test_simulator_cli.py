"""The landb-webhook-simulator command line: the demo's errors and the commands it prints."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
from pathlib import Path

import pytest

from landb_simulator.cli import main
from landb_simulator.demo import demo_instructions
from landb_webhook.webhook.wire import decode_changes, decode_endpoints


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("LANDB_")]:
        monkeypatch.delenv(name)


def test_a_second_demo_names_the_busy_port_and_how_to_choose_another(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        code = main(["demo", "--api-port=0", f"--health-port={port}"])

    assert code == 1
    assert capsys.readouterr().err == (
        f"landb-webhook-simulator demo: cannot listen on 127.0.0.1:{port} (--health-port): Address already "
        "in use. Is another demo running? Stop it, or choose free ports: make demo ARGS='--api-port 18888 "
        "--health-port 18080'\n"
    )


def test_demo_instructions_are_ready_to_paste() -> None:
    text = demo_instructions(
        api="http://127.0.0.1:8888",
        health="http://127.0.0.1:8080",
        state_dir=Path("/tmp/demo state"),
        cloud_name="simulator",
        ingress_ips=["188.184.1.3", "188.184.1.2"],
        node_name="demo-abc-node-0",
    )
    commands = [
        shlex.split(line) for line in text.splitlines() if line.strip().startswith(("curl", "kubectl", "OS_"))
    ]

    apply = next(words for words in commands if "-X" in words and words[-1].startswith("{"))
    changes = decode_changes(apply[-1])
    assert [(e.dns_name, e.record_type) for e in changes.create] == [
        ("myapp.cern.ch", "A"),
        ("a-myapp.cern.ch", "TXT"),
    ]
    assert changes.create[0].targets == ("188.184.1.2", "188.184.1.3")
    assert changes.create[1].targets[0].startswith('"heritage=external-dns,external-dns/owner=')
    assert dict(changes.create[1].labels) == {"ownedRecord": "myapp.cern.ch"}
    adjust = next(words for words in commands if any(word.endswith("/adjustendpoints") for word in words))
    assert decode_endpoints(adjust[-1])[0].dns_name == "myapp.cern.ch"
    assert [
        "kubectl",
        "--kubeconfig",
        "/tmp/demo state/kubeconfig",
        "get",
        "nodes",
        "--show-labels",
    ] in commands
    openstack = next(w for w in commands if w[0] == "OS_CLIENT_CONFIG_FILE=/tmp/demo state/clouds.yaml")
    # The CLI make demo installed, so the line works without activating the virtualenv.
    assert shutil.which(openstack[1]) is not None, openstack


def test_demo_instructions_show_the_load_balancer_service_and_its_tags() -> None:
    text = demo_instructions(
        api="http://127.0.0.1:8888",
        health="http://127.0.0.1:8080",
        state_dir=Path("/tmp/demo"),
        cloud_name="simulator",
        ingress_ips=["188.184.1.2"],
        node_name="demo-abc-node-0",
        load_balancer=("kube_service_demo_default_myservice", "137.138.4.5"),
    )
    commands = [
        shlex.split(line) for line in text.splitlines() if line.strip().startswith(("kubectl", "OS_"))
    ]

    assert ["kubectl", "--kubeconfig", "/tmp/demo/kubeconfig", "get", "services"] in commands
    (show,) = [words for words in commands if "loadbalancer" in words]
    assert show[-4:] == ["show", "kube_service_demo_default_myservice", "-c", "tags"]
    assert "VIP 137.138.4.5" in text
