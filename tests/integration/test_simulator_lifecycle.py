"""Starting, stopping, seeding and the client configuration: what every other test relies on."""

from __future__ import annotations

import io
import ipaddress
import os
import re
import signal
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import dns.message
import dns.query
import httpx
import openstack.config
import openstack.connection
import pytest
import yaml
from kubernetes import client, config

from landb_simulator import Simulator, SimulatorState, run_simulator, seed_cluster


def test_seed_cluster_builds_a_magnum_cluster_reproducibly() -> None:
    first, second = SimulatorState(), SimulatorState()

    names = seed_cluster(first, cluster="prod-cluster", ingress_nodes=3, workers=2)
    assert seed_cluster(second, cluster="prod-cluster", ingress_nodes=3, workers=2) == names
    assert [(s.id, s.name, s.ip) for s in first.servers()] == [(s.id, s.name, s.ip) for s in second.servers()]

    suffix = names[0].split("-")[-3]
    assert all(re.fullmatch(rf"prod-cluster-{suffix}-node-{index}", name) for index, name in enumerate(names))
    assert re.fullmatch(r"[a-z0-9]{12}", suffix)
    other = seed_cluster(SimulatorState(), cluster="other", ingress_nodes=1, workers=0)
    assert other[0].split("-")[-3] != suffix

    servers = {server.name: server for server in first.servers()}
    addresses = [servers[name].ip for name in names]
    assert len(set(addresses)) == len(names)
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("188.184.0.0/16") for ip in addresses)
    for index, name in enumerate(names):
        node = first.node(name)
        assert node is not None
        assert node["spec"]["providerID"] == f"openstack:///{servers[name].id}"
        assert (node["metadata"]["labels"].get("role") == "ingress") == (index < 3)
        assert {"type": "InternalIP", "address": servers[name].ip} in node["status"]["addresses"]
        assert {"landb-mainuser", "landb-responsible", "landb-os", "cern-services"} <= set(
            servers[name].metadata
        )


def test_seed_cluster_without_foreign_metadata_leaves_servers_bare() -> None:
    state = SimulatorState()
    seed_cluster(state, ingress_nodes=1, workers=1, foreign_metadata=False)
    assert [server.metadata for server in state.servers()] == [{}, {}]


def test_simulators_get_their_own_ports_and_release_them(http: httpx.Client) -> None:
    with Simulator() as first, Simulator() as second:
        assert len({first.port, first.tls_port, second.port, second.tls_port}) == 4
        assert first.url == f"http://127.0.0.1:{first.port}"
        assert http.get(f"{second.url}/version").status_code == 200
        url = first.url
    with pytest.raises(httpx.ConnectError):
        http.get(f"{url}/version")
    first.stop()  # a second stop is harmless


def test_client_config_points_each_client_at_the_right_port(simulator: Simulator, tmp_path: Path) -> None:
    written = simulator.write_client_config(tmp_path)

    for path in (written.clouds_yaml, written.kubeconfig):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    clouds = yaml.safe_load(written.clouds_yaml.read_text())["clouds"]
    assert clouds[written.cloud_name]["auth"]["auth_url"] == f"{simulator.url}/identity/v3"
    assert clouds[written.appcred_cloud_name]["auth_type"] == "v3applicationcredential"
    kubeconfig = yaml.safe_load(written.kubeconfig.read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == simulator.https_url

    trusted = ssl.create_default_context(cafile=str(written.ca_file))
    token = simulator.state.credentials.kubernetes_token
    with httpx.Client(verify=trusted) as https:
        reply = https.get(f"{simulator.https_url}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
    assert reply.json()["kind"] == "NodeList"


def test_secrets_stay_out_of_reprs(simulator: Simulator) -> None:
    credentials = simulator.state.credentials
    assert credentials.password not in repr(credentials)
    assert credentials.kubernetes_token not in repr(credentials)


class _Console(io.StringIO):
    """Captures run_simulator's output and tells when it is ready for clients."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if "Stop with Ctrl-C" in self.getvalue():
            self.ready.set()
        return written


def test_run_simulator_serves_a_seeded_cluster_until_stopped(tmp_path: Path, http: httpx.Client) -> None:
    console, stop = _Console(), threading.Event()
    runner = threading.Thread(
        target=run_simulator,
        args=(tmp_path,),
        kwargs={"ingress_nodes": 2, "workers": 1, "stop": stop, "out": console},
    )
    runner.start()
    try:
        assert console.ready.wait(10), console.getvalue()
        url = re.search(r"listening on (http://\S+)", console.getvalue())
        assert url is not None
        assert http.get(f"{url[1]}/version").status_code == 200
        api_client = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
        nodes = client.CoreV1Api(api_client).list_node(label_selector="role=ingress").items
        services = client.CoreV1Api(api_client).list_service_for_all_namespaces().items
        api_client.close()
        assert len(nodes) == 2
        (service,) = services
        vip = service.status.load_balancer.ingress[0].ip
        assert service.spec.type == "LoadBalancer"
        assert f"Service default/myservice: type LoadBalancer, Octavia VIP {vip}" in console.getvalue()
        assert f"KUBECONFIG={tmp_path / 'kubeconfig'}" in console.getvalue()
        dig = re.search(r"dig @(\S+) -p (\d+) ", console.getvalue())
        assert dig is not None, console.getvalue()
        node = nodes[0].metadata.name
        query = dns.message.make_query(f"{node}.cern.ch.", "A")
        reply = dns.query.udp(query, dig[1], port=int(dig[2]), timeout=5)
        assert [rdata.to_text() for rrset in reply.answer for rdata in rrset] == [
            address.address for address in nodes[0].status.addresses if address.type == "InternalIP"
        ]
    finally:
        stop.set()
        runner.join(10)
    assert not runner.is_alive()
    assert console.getvalue().rstrip().endswith("Simulator stopped.")


def test_run_simulator_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    program = "import sys; from pathlib import Path; from landb_simulator import run_simulator; "
    program += "run_simulator(Path(sys.argv[1]))"
    process = subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "Stop with Ctrl-C" in line:
                break
        assert (tmp_path / "clouds.yaml").exists()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "Simulator stopped." in out


def test_run_simulator_without_load_balancers_serves_a_catalog_without_octavia(tmp_path: Path) -> None:
    """``serve --without-load-balancers``: a Nova-only cloud, whose token catalog lists no load-balancer."""
    console, stop = _Console(), threading.Event()
    runner = threading.Thread(
        target=run_simulator,
        args=(tmp_path,),
        kwargs={"ingress_nodes": 1, "workers": 0, "stop": stop, "out": console, "load_balancers": False},
    )
    runner.start()
    try:
        assert console.ready.wait(10), console.getvalue()
        loader = openstack.config.OpenStackConfig(
            config_files=[str(tmp_path / "clouds.yaml")], load_envvars=False
        )
        conn = openstack.connection.Connection(config=loader.get_one(cloud="simulator"))
        catalog = {
            entry["type"] for entry in conn.session.auth.get_access(conn.session).service_catalog.catalog
        }
        conn.close()
        assert "No load-balancer service in the catalog" in console.getvalue()
        assert "compute" in catalog and "load-balancer" not in catalog
    finally:
        stop.set()
        runner.join(10)
    assert not runner.is_alive()
