"""The deploy files work as written: the official external-dns chart rendered with deploy/helm/values.yaml,
and the README's install, verify and migration steps run in the order written against a real kube-apiserver
with Pod Security enforced, Keystone and Nova simulated.

helm and the chart come from ``scripts/install-helm.sh`` (``make deploy-tools``); without them these tests
skip and say so. The real API server is the session fixture of tests/support/kube_apiserver.py.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_simulator.external_dns import loop_over_http
from landb_simulator.manifests import node_manifest
from landb_webhook.config import Settings, unknown_variables
from landb_webhook.endpoint import Endpoint
from landb_webhook.metrics import Metrics
from landb_webhook.wiring import build_provider
from support.kube_apiserver import KubeApiServer, tools_bin_dir
from support.serving import serving
from support.tool_builds import skip_unless_built

REPO_ROOT = Path(__file__).resolve().parents[2]
VALUES = REPO_ROOT / "deploy" / "helm" / "values.yaml"
README = REPO_ROOT / "README.md"
CREDENTIALS_EXAMPLE = REPO_ROOT / "deploy" / "openstack-credentials.example.yaml"
ADMIN_POD = REPO_ROOT / "deploy" / "landb-webhook-admin.yaml"
RBAC = REPO_ROOT / "deploy" / "rbac.yaml"
NETWORK_POLICY = REPO_ROOT / "deploy" / "network-policy.yaml"
ADMISSION_POLICIES = REPO_ROOT / "deploy" / "admission-policies.yaml"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"
EXTERNAL_DNS_VERSION = "v0.22.0"
CHART_VERSION = "1.21.1"
INSTALL_HINT = "run `make deploy-tools` (scripts/install-helm.sh)"
NAMESPACE = "external-dns"
RELEASE = "external-dns"
OWNER_ID = "my-cluster"
"""The values' txtOwnerId, which the README's adopt lines name."""
MEASURED_PEAK_RSS_MIB = 180
"""Peak resident memory of `landb-webhook serve` with the largest accepted body (python -m
bench.body_memory; tests/integration/test_body_memory.py measures it against the chart's request)."""
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
UNRUN_README_LINES = ("docker ", "helm repo add ", "kubectl -n external-dns logs ")
"""README install lines the test cannot run: the image push, the Helm repository (no network; the chart
comes from the Go module cache instead) and following a log (no kubelet runs pods here)."""
EXEC_IN_ADMIN_POD = "kubectl -n external-dns exec landb-webhook-admin -- "
"""README lines run in the admin pod: the test runs the same command from the virtualenv, with the pod's
environment, its Secret's files and its ServiceAccount's token (no kubelet runs pods here)."""


def helm_and_chart() -> tuple[tuple[Path, Path] | None, str]:
    helm = tools_bin_dir() / "helm"
    chart = (
        tools_bin_dir().parent
        / "mod"
        / f"sigs.k8s.io/external-dns@{EXTERNAL_DNS_VERSION}/charts/external-dns"
    )
    if not (helm.is_file() and os.access(helm, os.X_OK)):
        return None, f"{helm} not found: {INSTALL_HINT}"
    if not (chart / "Chart.yaml").is_file():
        return None, f"the external-dns chart is not in {chart}: {INSTALL_HINT}"
    if yaml.safe_load((chart / "Chart.yaml").read_text())["version"] != CHART_VERSION:
        return None, f"{chart} is not chart {CHART_VERSION}: {INSTALL_HINT}"
    return (helm, chart), ""


@pytest.fixture(scope="module")
def helm_chart(pytestconfig: pytest.Config) -> tuple[Path, Path]:
    skip_unless_built("deploy-tools", pytestconfig)  # waits while .ci/run builds helm in the background
    found, reason = helm_and_chart()
    if found is None:
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def rendered(helm_chart: tuple[Path, Path]) -> list[dict[str, Any]]:
    return render(helm_chart)


def render(helm_chart: tuple[Path, Path], *flags: str) -> list[dict[str, Any]]:
    """The chart with deploy/helm/values.yaml (and ``flags``, such as ``--set``), as documents."""
    helm, chart = helm_chart
    completed = subprocess.run(
        [str(helm), "template", RELEASE, str(chart), "-n", NAMESPACE, "-f", str(VALUES), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return [document for document in yaml.safe_load_all(completed.stdout) if document]


def the(documents: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    [found] = [document for document in documents if document["kind"] == kind]
    return found


def pod_spec(documents: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = the(documents, "Deployment")["spec"]["template"]["spec"]
    return spec


def container(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    [found] = [c for c in spec["containers"] if c["name"] == name]
    return found


def environment(sidecar: Mapping[str, Any]) -> dict[str, str]:
    return {variable["name"]: variable["value"] for variable in sidecar.get("env", [])}


def mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * {"Mi": 1, "Gi": 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}[unit]


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """What Pod Security "restricted" (Kubernetes' policy, v1.25 onwards) refuses in a pod spec."""
    pod = spec.get("securityContext") or {}
    problems = [f"pod: {field}" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]
    problems += [
        f"volume {v['name']}: type {kind} not allowed"
        for v in spec.get("volumes", [])
        for kind in v
        if kind != "name" and kind not in RESTRICTED_VOLUME_TYPES
    ]
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        context = c.get("securityContext") or {}
        where = f"container {c['name']}"
        if context.get("privileged"):
            problems.append(f"{where}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{where}: capabilities.drop lacks ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}: adds capabilities")
        if not context.get("runAsNonRoot", pod.get("runAsNonRoot")):
            problems.append(f"{where}: runAsNonRoot is not true")
        if context.get("runAsUser", pod.get("runAsUser")) == 0:
            problems.append(f"{where}: runs as user 0")
        seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile is {seccomp!r}")
        if c.get("ports") and any(port.get("hostPort") for port in c["ports"]):
            problems.append(f"{where}: hostPort")
    return problems


# -- the chart, rendered ----------------------------------------------------------------------------------


def readme_external_dns_flags() -> list[str]:
    """The README's flags for external-dns without the chart, the owner id as the values set it."""
    [block] = [b for b in README.read_text().split("```")[1::2] if b.startswith("\n--provider=webhook")]
    return [flag.replace("<your-cluster-name>", OWNER_ID) for flag in block.split()]


def test_external_dns_is_v0_22_with_the_readme_flags(rendered: list[dict[str, Any]]) -> None:
    external_dns = container(pod_spec(rendered), "external-dns")
    flags = readme_external_dns_flags()

    assert external_dns["image"] == f"registry.k8s.io/external-dns/external-dns:{EXTERNAL_DNS_VERSION}"
    # The chart leaves the webhook URL to external-dns' default, which the README writes out.
    default_url = f"--webhook-provider-url=http://localhost:{Settings().api_port}"
    assert not any(arg.startswith("--webhook-provider-url") for arg in external_dns["args"])
    assert [flag for flag in flags if flag not in external_dns["args"]] == [default_url]


def test_the_sidecar_serves_in_dry_run_with_known_settings_only(rendered: list[dict[str, Any]]) -> None:
    spec = pod_spec(rendered)
    sidecar = container(spec, "webhook")
    env = environment(sidecar)

    assert sidecar["args"] == ["serve"]
    assert env["LANDB_DRY_RUN"] == "true"
    assert unknown_variables(env) == []
    assert f"--registry={env['LANDB_REGISTRY']}" in container(spec, "external-dns")["args"]
    assert f"--txt-owner-id={env['LANDB_TXT_OWNER_ID']}" in container(spec, "external-dns")["args"]
    Settings.model_validate({name.removeprefix("LANDB_").lower(): value for name, value in env.items()})


def test_the_sidecar_probes_and_port_are_the_webhook_s_own(rendered: list[dict[str, Any]]) -> None:
    sidecar = container(pod_spec(rendered), "webhook")

    [port] = sidecar["ports"]
    assert (port["name"], port["containerPort"]) == ("http-webhook", Settings().health_port)
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-webhook"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-webhook"}
    service_ports = {p["name"]: p["targetPort"] for p in the(rendered, "Service")["spec"]["ports"]}
    assert service_ports["http-webhook"] == "http-webhook"  # what the ServiceMonitor scrapes


def test_the_service_monitor_carries_the_release_label_the_values_set(helm_chart: tuple[Path, Path]) -> None:
    """kube-prometheus-stack selects ServiceMonitors by ``release``: with monitoring turned on, as the README
    says, the rendered ServiceMonitor carries the label of deploy/helm/values.yaml."""
    monitor = the(render(helm_chart, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor")

    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_pod_is_clean_for_pod_security_restricted_with_a_read_only_root(
    rendered: list[dict[str, Any]],
) -> None:
    spec = pod_spec(rendered)
    sidecar = container(spec, "webhook")

    assert restricted_violations(spec) == []
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert sidecar["securityContext"]["runAsUser"] == 65532  # the image's numeric USER


def test_the_memory_request_covers_the_measured_peak(rendered: list[dict[str, Any]]) -> None:
    resources = container(pod_spec(rendered), "webhook")["resources"]

    request = mebibytes(resources["requests"]["memory"])
    assert MEASURED_PEAK_RSS_MIB <= request <= mebibytes(resources["limits"]["memory"])
    assert "cpu" in resources["requests"]


def test_the_credentials_secret_is_mounted_where_cloud_conf_and_its_ca_file_are_read(
    rendered: list[dict[str, Any]],
) -> None:
    spec = pod_spec(rendered)
    sidecar = container(spec, "webhook")
    [volume] = [
        v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == "landb-webhook-openstack"
    ]
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"] if m["name"] == volume["name"]}
    example = yaml.safe_load(CREDENTIALS_EXAMPLE.read_text())["stringData"]

    cloud_conf = Path(environment(sidecar)["LANDB_OS_CLOUD_CONF"])
    assert str(cloud_conf.parent) in mounts and "subPath" not in mounts[str(cloud_conf.parent)]
    assert cloud_conf.name in example
    ca_file = re.search(r'ca-file = "([^"]+)"', example["cloud.conf"]).group(1)  # type: ignore[union-attr]
    assert mounts[ca_file]["subPath"] in example
    assert all(mount["readOnly"] for mount in mounts.values())


def test_the_network_policy_admits_the_health_and_metrics_ports_of_the_chart_s_pod_and_nothing_else(
    rendered: list[dict[str, Any]],
) -> None:
    """deploy/network-policy.yaml selects the chart's pod, and its named ports are the webhook's health
    port and external-dns' metrics port: the API port is not among them."""
    policy = yaml.safe_load(NETWORK_POLICY.read_text())
    template = the(rendered, "Deployment")["spec"]["template"]
    ports = {
        port["name"]: port["containerPort"]
        for c in template["spec"]["containers"]
        for port in c.get("ports", [])
    }
    [rule] = policy["spec"]["ingress"]
    admitted = {ports[port["port"]] for port in rule["ports"]}

    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert "from" not in rule  # the kubelet's probes come from the node: any source
    assert admitted == {Settings().health_port, 7979}
    assert Settings().api_port not in admitted


# -- the README's install, verify and migration steps, on a real API server ----------------------------------


def readme_lines(heading: str) -> list[str]:
    """The command lines of the first ``sh`` block under ``heading``, comments left out."""
    section = README.read_text().split(f"\n{heading}\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture
def magnum_cloud_config(kube_apiserver: KubeApiServer, simulator: Simulator, tmp_path: Path) -> Iterator[str]:
    """Secret kube-system/cloud-config as a Magnum cluster carries it: a trust, for the simulated Keystone
    over TLS, and the CA file at the path Magnum writes on its nodes."""
    auth = yaml.safe_load(client_config(simulator, tmp_path).clouds_yaml.read_text())["clouds"]
    trust = auth["simulator-trust"]["auth"]
    cloud_conf = (
        f'[Global]\nauth-url = "{simulator.https_url}/identity/v3"\nuser-id = "{trust["user_id"]}"\n'
        f'password = "{trust["password"]}"\ntrust-id = "{trust["trust_id"]}"\nregion = "cern"\n'
        'ca-file = "/etc/kubernetes/ca-bundle.crt"\n'
    )
    core = client.CoreV1Api(kube_apiserver.admin)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="cloud-config", namespace="kube-system"),
        string_data={"cloud.conf": cloud_conf},
    )
    core.create_namespaced_secret("kube-system", body)
    yield cloud_conf
    core.delete_namespaced_secret("cloud-config", "kube-system")


def client_config(simulator: Simulator, tmp_path: Path) -> ClientConfig:
    return simulator.write_client_config(tmp_path / "simulator")


CONTROLLER_ALIASES = ("myapp", "web")
"""What the landb-alias-controller left on the ingress nodes: each name on each, N = the node's rank."""


@pytest.fixture
def controller_cluster(kube_apiserver: KubeApiServer, simulator: Simulator) -> Iterator[dict[str, str]]:
    """Nodes on the real API server, their servers in the simulated Nova, aliases as the controller wrote
    them (no claim). Yields each ingress server's metadata as it stands before the migration."""
    core = client.CoreV1Api(kube_apiserver.admin)
    seed_cluster(simulator.state, ingress_nodes=3, workers=1)
    ingress = []
    for node in simulator.state.nodes():
        name, labels = node["metadata"]["name"], node["metadata"].get("labels", {})
        addresses = tuple(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        core.create_node(node_manifest(name, labels, node["spec"]["providerID"], addresses))
        simulator.state.delete_node(name)
        if labels.get("role") == "ingress":
            ingress.append(node["spec"]["providerID"].rsplit("/", 1)[1])
    for rank, server_id in enumerate(sorted(ingress), start=1):
        value = ",".join(f"{alias}--load-{rank}-" for alias in CONTROLLER_ALIASES)
        simulator.state.set_metadata_direct(
            server_id, {**simulator.state.metadata(server_id), "landb-alias": value}
        )
    simulator.state.clear_metadata_history()
    yield {server_id: simulator.state.metadata(server_id)["landb-alias"] for server_id in ingress}
    core.delete_collection_node()


class AdminPod:
    """The admin pod of deploy/landb-webhook-admin.yaml, played without a kubelet: what its container
    would see (the env, the Secret's files at the mount paths, the ServiceAccount's token) under ``root``."""

    def __init__(self, server: KubeApiServer, root: Path) -> None:
        self.server = server
        self.root = root
        self.manifest = yaml.safe_load(ADMIN_POD.read_text())

    def mark_ready(self) -> None:
        """What the kubelet reports once the container runs: the README's `kubectl wait` then returns."""
        core = client.CoreV1Api(self.server.admin)
        meta = self.manifest["metadata"]
        pod = self.server.admin.sanitize_for_serialization(
            core.read_namespaced_pod(meta["name"], meta["namespace"])
        )
        pod["status"] = {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
            ],
        }
        core.replace_namespaced_pod_status(meta["name"], meta["namespace"], pod)

    def environment(self) -> dict[str, str]:
        """The container's env, paths under its mounts moved under ``root``, and the in-cluster
        credentials of its ServiceAccount as a kubeconfig (what the kubelet projects into the pod)."""
        spec = self.manifest["spec"]
        [container_] = spec["containers"]
        secret_names = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"]}
        core = client.CoreV1Api(self.server.admin)
        for mount in container_["volumeMounts"]:
            data = core.read_namespaced_secret(
                secret_names[mount["name"]], self.manifest["metadata"]["namespace"]
            ).data
            files = (
                {mount["mountPath"]: data[mount["subPath"]]}
                if "subPath" in mount
                else {f"{mount['mountPath']}/{key}": value for key, value in data.items()}
            )
            for path, encoded in files.items():
                target = self.moved(path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(
                    self.moved_text(base64.b64decode(encoded).decode(), container_["volumeMounts"])
                )
        env = {
            variable["name"]: self.moved_text(variable["value"], container_["volumeMounts"])
            for variable in container_["env"]
        }
        kubeconfig = self.server.service_account_kubeconfig(
            self.manifest["metadata"]["namespace"],
            spec["serviceAccountName"],
            self.root / "in-cluster.kubeconfig",
        )
        return {**env, "LANDB_KUBECONFIG": str(kubeconfig)}

    def moved(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def moved_text(self, text: str, mounts: Sequence[Mapping[str, Any]]) -> str:
        for mount in mounts:
            text = text.replace(mount["mountPath"], str(self.moved(mount["mountPath"])))
        return text

    def settings(self) -> Settings:
        """The settings ``landb-webhook`` reads in this pod."""
        variables = self.environment()
        return Settings.model_validate(
            {name.removeprefix("LANDB_").lower(): v for name, v in variables.items()}
        )

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        """A README `kubectl exec` line: the command after ``--``, from the virtualenv, as in the pod."""
        command = shlex.split(line.removeprefix(EXEC_IN_ADMIN_POD))
        assert command[0] == "landb-webhook", line
        environment = {"PATH": os.environ["PATH"], "HOME": str(self.root), **self.environment()}
        return subprocess.run(
            [str(VENV_BIN / command[0]), *command[1:]],
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture
def cluster_wide_policies_removed(kube_apiserver: KubeApiServer) -> Iterator[None]:
    """The README applies deploy/admission-policies.yaml, cluster-wide objects: taken away afterwards, so that
    no later test of the session meets the hostname cap."""
    yield
    kube_apiserver.delete(
        document for document in yaml.safe_load_all(ADMISSION_POLICIES.read_text()) if document
    )


def test_the_readme_install_verify_and_migration_steps_work_in_order(
    cluster_wide_policies_removed: None,
    kube_apiserver: KubeApiServer,
    helm_chart: tuple[Path, Path],
    simulator: Simulator,
    magnum_cloud_config: str,
    controller_cluster: dict[str, str],
    tmp_path: Path,
) -> None:
    helm, chart = helm_chart
    ca_bundle = client_config(simulator, tmp_path).ca_file
    assert ca_bundle is not None
    substitutions = {
        "external-dns/external-dns": str(chart),
        "/etc/pki/tls/certs/ca-bundle.crt": str(ca_bundle),
        "-f deploy/": f"-f {REPO_ROOT}/deploy/",
    }
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_apiserver.admin_kubeconfig),
        "PATH": f"{helm.parent}{os.pathsep}{os.environ['PATH']}",
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
    }
    admin = AdminPod(kube_apiserver, tmp_path / "admin-pod")
    metadata_before = {s: simulator.state.metadata(s) for s in controller_cluster}
    outputs: dict[str, str] = {}

    def run(line: str) -> None:
        if line.startswith(EXEC_IN_ADMIN_POD):
            completed = admin.run(line)
        else:
            command = line
            for written, local in substitutions.items():
                command = command.replace(written, local)
            completed = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        assert completed.returncode == 0, f"README line failed: {line}\n{completed.stdout}{completed.stderr}"
        outputs[line] = completed.stdout
        if line.startswith("kubectl apply -f deploy/landb-webhook-admin.yaml"):
            admin.mark_ready()

    skipped = []
    for line in readme_lines("## Install in dry run"):
        if line.startswith(UNRUN_README_LINES):
            skipped.append(line)
            continue
        run(line)
    assert [line.split()[0:3] for line in skipped] == [
        ["docker", "build", "-t"],
        ["helm", "repo", "add"],
        ["kubectl", "-n", "external-dns"],
    ]
    assert_the_install_left_what_the_readme_says(kube_apiserver, magnum_cloud_config, tmp_path)

    verify = readme_lines("## Verify with `status`")
    for line in verify:
        run(line)
    [status_line] = [line for line in verify if line.startswith(EXEC_IN_ADMIN_POD)]
    assert all(f"{alias}.cern.ch" in outputs[status_line] for alias in CONTROLLER_ALIASES)

    core = client.CoreV1Api(kube_apiserver.admin)
    migration = readme_lines("## Migrate from the landb-alias-controller")
    adopt_lines = [line for line in migration if " adopt " in line]
    assert [("--dry-run" in line) for line in adopt_lines] == [True, False]
    for line in migration:
        run(line)
        if line == adopt_lines[0]:
            assert "landb-webhook-ownership" not in {
                c.metadata.name for c in core.list_namespaced_config_map(NAMESPACE).items
            }
    deployment = client.AppsV1Api(kube_apiserver.admin).read_namespaced_deployment(RELEASE, NAMESPACE)
    assert deployment.spec.replicas == 1

    ownership = core.read_namespaced_config_map("landb-webhook-ownership", NAMESPACE).data
    claims = "\n".join(ownership.values())
    for alias in CONTROLLER_ALIASES:
        assert f"a-{alias}.cern.ch" in claims and f"external-dns/owner={OWNER_ID}" in claims
    assert_the_first_external_dns_loop_changes_nothing(admin.settings())
    assert {s: simulator.state.metadata(s) for s in controller_cluster} == metadata_before
    assert simulator.state.metadata_history() == []


def assert_the_first_external_dns_loop_changes_nothing(settings: Settings) -> None:
    """The README's "Verify": external-dns, back with the names the Ingresses ask for, finds them its own
    on every ingress node and sends no ApplyChanges at all."""
    provider, adapters = build_provider(settings, Metrics.create(process_metrics=False))
    try:
        assert adapters.nodes.wait_synced(60)
        desired = [Endpoint(f"{alias}.cern.ch", "A", ("192.0.2.1",)) for alias in CONTROLLER_ALIASES]
        with serving(provider) as webhook:
            loop = loop_over_http(webhook.api, desired, owner=OWNER_ID)
    finally:
        adapters.close()
    assert loop.succeeded and loop.changes is None


def assert_the_install_left_what_the_readme_says(
    server: KubeApiServer, cloud_conf: str, workdir: Path
) -> None:
    core = client.CoreV1Api(server.admin)
    secret = core.read_namespaced_secret("landb-webhook-openstack", NAMESPACE)
    assert base64.b64decode(secret.data["cloud.conf"]).decode() == cloud_conf
    assert set(secret.data) == {"cloud.conf", "ca-bundle.crt"}
    assert not (workdir / "cloud.conf").exists()  # the README removes its copy
    deployment = client.AppsV1Api(server.admin).read_namespaced_deployment(RELEASE, NAMESPACE)
    template = server.admin.sanitize_for_serialization(deployment.spec.template)
    assert environment(container(template["spec"], "webhook"))["LANDB_DRY_RUN"] == "true"

    assert_pods_of_the_template_pass_restricted_admission(core, template)
    assert_the_service_account_has_exactly_the_webhook_s_rights(server)


def test_the_admin_pod_is_the_sidecar_with_the_ownership_namespace_named() -> None:
    """deploy/landb-webhook-admin.yaml runs status and adopt as the sidecar would: same image, account,
    settings (the ownership namespace named, serve's dry run left out: adopt has its own), mounts, Secret."""
    values = yaml.safe_load(VALUES.read_text())
    sidecar = values["provider"]["webhook"]
    admin = yaml.safe_load(ADMIN_POD.read_text())
    [admin_container] = admin["spec"]["containers"]
    bound = {
        (subject["namespace"], subject["name"])
        for document in yaml.safe_load_all(RBAC.read_text())
        for subject in document.get("subjects", [])
    }

    assert admin["metadata"]["namespace"] == NAMESPACE
    assert bound == {(NAMESPACE, admin["spec"]["serviceAccountName"])}
    assert admin_container["image"] == f"{sidecar['image']['repository']}:{sidecar['image']['tag']}"
    expected = {name: value for name, value in environment(sidecar).items() if name != "LANDB_DRY_RUN"}
    assert environment(admin_container) == {**expected, "LANDB_OWNERSHIP_NAMESPACE": NAMESPACE}
    assert unknown_variables(environment(admin_container)) == []
    assert admin_container["volumeMounts"] == sidecar["extraVolumeMounts"]
    assert admin_container["securityContext"] == sidecar["securityContext"]
    assert admin_container["resources"] == sidecar["resources"]
    assert admin["spec"]["volumes"] == values["extraVolumes"]
    assert restricted_violations(admin["spec"]) == []


def assert_pods_of_the_template_pass_restricted_admission(
    core: client.CoreV1Api, template: dict[str, Any]
) -> None:
    """The API server's own PodSecurity admission judges a pod of the Deployment (server-side dry run),
    and refuses the same pod once one restricted requirement is taken away: enforcement is really on."""
    labels = core.read_namespace(NAMESPACE).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "check-"},
        "spec": template["spec"],
    }
    core.create_namespaced_pod(NAMESPACE, pod, dry_run="All")

    weakened = yaml.safe_load(yaml.safe_dump(pod))
    del container(weakened["spec"], "webhook")["securityContext"]["allowPrivilegeEscalation"]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(NAMESPACE, weakened, dry_run="All")
    assert refused.value.status == 403 and "allowPrivilegeEscalation" in str(refused.value.body)


def assert_the_service_account_has_exactly_the_webhook_s_rights(server: KubeApiServer) -> None:
    """``kubectl auth can-i`` as the ServiceAccount, after the README's install: what the webhook uses, its
    ConfigMaps and Lease by name, and no pod (the values set no LANDB_INGRESS_POD_SELECTOR, so the optional
    deploy/rbac-ingress-pods.yaml is not applied)."""

    def allowed(verb: str, resource: str, namespace: str | None, name: str | None = None) -> bool:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{NAMESPACE}:{RELEASE}",
                groups=["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb,
                    resource=resource,
                    namespace=namespace,
                    name=name,
                    group="coordination.k8s.io" if resource == "leases" else None,
                ),
            )
        )
        return bool(
            client.AuthorizationV1Api(server.admin).create_subject_access_review(review).status.allowed
        )

    claims, state = "landb-webhook-ownership", "landb-webhook-ownership-state"
    granted = [(verb, "nodes", None) for verb in ("list", "watch")]
    granted += [(verb, "configmaps", NAMESPACE) for verb in ("list", "watch", "create")]
    granted += [
        (verb, "configmaps", NAMESPACE, name) for verb in ("get", "update") for name in (claims, state)
    ]
    granted += [(verb, "leases", NAMESPACE, "landb-webhook") for verb in ("get", "update")]
    granted += [("create", "leases", NAMESPACE)]
    refused = [(verb, "configmaps", NAMESPACE, claims) for verb in ("patch", "delete")]
    refused += [(verb, "configmaps", NAMESPACE, "someone-elses") for verb in ("get", "update")]
    refused += [
        ("update", "leases", NAMESPACE, "someone-elses"),
        ("delete", "leases", NAMESPACE, "landb-webhook"),
    ]
    refused += [(verb, "pods", None) for verb in ("list", "watch", "get")]
    refused += [("update", "nodes", None), ("list", "configmaps", "kube-system")]
    refused += [("watch", "configmaps", "kube-system")]
    assert [check for check in granted if not allowed(*check)] == []
    assert [check for check in refused if allowed(*check)] == []
