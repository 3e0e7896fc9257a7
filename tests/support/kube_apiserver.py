"""A real Kubernetes API for the tests: etcd and kube-apiserver on 127.0.0.1, RBAC on.

Both binaries come from ``scripts/install-kube-apiserver.sh`` (``make kube-tools``). The server listens on
loopback only, on ports the kernel picked free, with everything in one temporary directory: a fresh CA, a
serving certificate, an admin client certificate (group ``system:masters``) and a service-account signing
key, so ServiceAccount tokens from the TokenRequest API authenticate as they do in a cluster. No
controller-manager runs: nothing garbage-collects, namespaces never finish terminating, and no default
ServiceAccount appears in a new namespace (``service_account_kubeconfig`` creates the one it needs).
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from landb_simulator.tls import CertificateAuthority, loopback_certificate, subject_name
from landb_webhook.adapters.kubernetes import api_client_for
from support.waiting import eventually

KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "3.7.3"
INSTALL_HINT = "run `make kube-tools` (scripts/install-kube-apiserver.sh)"
REPO_ROOT = Path(__file__).resolve().parents[2]
RBAC_MANIFEST = REPO_ROOT / "deploy" / "rbac.yaml"
INGRESS_PODS_RBAC_MANIFEST = REPO_ROOT / "deploy" / "rbac-ingress-pods.yaml"
"""The optional pod rules, for LANDB_INGRESS_POD_SELECTOR."""
ADMISSION_MANIFEST = REPO_ROOT / "deploy" / "admission-policies.yaml"
RBAC_DOCUMENTED_NAMESPACE = "external-dns"
"""The namespace and ServiceAccount name deploy/rbac.yaml is written for (its header says to adjust both)."""
RBAC_DOCUMENTED_SERVICE_ACCOUNT = "external-dns"
FIELD_MANAGER = "landb-webhook-tests"

GATEWAY_API_VERSION = "v1.6.1"
"""The Gateway API release whose standard CRDs the tests install (external-dns v0.22.0 is built with it)."""
GATEWAY_API_HINT = "run `make kube-tools` (scripts/install-gateway-api-crds.sh)"
CRD_ESTABLISHED_TIMEOUT = 60.0
"""Seconds for the API server to establish the Gateway API CRDs (a second or two on an idle machine)."""

START_TIMEOUT = 90.0
"""Seconds etcd plus kube-apiserver may take to be ready (a few on an idle machine; a loaded 2-core CI
runner building Go at the same time is much slower)."""
STOP_TIMEOUT = 10.0


def tools_cache() -> Path:
    """Where the install scripts keep what they fetch and build (LANDB_TOOLS_DIR)."""
    return Path(os.environ.get("LANDB_TOOLS_DIR") or Path.home() / ".cache" / "landb-webhook")


def tools_bin_dir() -> Path:
    return tools_cache() / "go" / "bin"


def gateway_api_crds_dir() -> Path:
    """Where scripts/install-gateway-api-crds.sh puts the CRDs: ``<tools>/gateway-api/<version>/standard``."""
    return tools_bin_dir().parents[1] / "gateway-api" / GATEWAY_API_VERSION / "standard"


def locate_gateway_api_crds() -> tuple[list[dict[str, Any]], str]:
    """Every document of the Gateway API standard install (the CRDs and the safe-upgrades admission policy),
    or nothing and why the tests needing them must skip."""
    directory = gateway_api_crds_dir()
    files = sorted(directory.glob("*.yaml"))
    if not (directory / "gateway.networking.k8s.io_httproutes.yaml").is_file():
        return [], f"the Gateway API {GATEWAY_API_VERSION} CRDs are not in {directory}: {GATEWAY_API_HINT}"
    return [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc], ""


def _version_line(binary: Path) -> str:
    completed = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    return completed.stdout + completed.stderr


def locate_binaries() -> tuple[tuple[Path, Path] | None, str]:
    """(etcd, kube-apiserver) from the install script's cache, or None and why the tests must skip."""
    etcd, apiserver = tools_bin_dir() / "etcd", tools_bin_dir() / "kube-apiserver"
    for binary, wanted in ((etcd, f"etcd Version: {ETCD_VERSION}"), (apiserver, KUBERNETES_VERSION)):
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            return None, f"{binary} not found: {INSTALL_HINT}"
        if wanted not in _version_line(binary):
            return None, f"{binary} is not {wanted!r}: {INSTALL_HINT}"
    return (etcd, apiserver), ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- PKI -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pki:
    ca: Path
    serving_certificate: Path
    serving_key: Path
    admin: Path
    """Certificate and key of the admin user, in one PEM file."""
    service_account_key: Path
    service_account_public_key: Path


def _write_pki(directory: Path) -> _Pki:
    """One CA signs the serving certificate (127.0.0.1, localhost) and the admin client certificate."""
    directory.mkdir(mode=0o700)
    authority = CertificateAuthority.create("landb-webhook tests kube-apiserver CA")
    serving = loopback_certificate(("127.0.0.1", "localhost"), authority)
    admin_certificate, admin_key = authority.issue(
        subject_name("landb-test-admin", organization="system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    service_account_key = ec.generate_private_key(ec.SECP256R1())
    files = {
        "ca.crt": serving.ca_pem,
        "serving.crt": serving.certificate_pem,
        "serving.key": serving.key_pem,
        "admin.pem": admin_certificate + admin_key,
        "service-account.key": service_account_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        "service-account.pub": service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    for name, content in files.items():
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o600)
    return _Pki(*(directory / name for name in files))


# -- kubeconfigs ------------------------------------------------------------------------------------------


def write_kubeconfig(path: Path, server: str, ca_file: Path, user: Mapping[str, str]) -> Path:
    """A one-context kubeconfig (``user`` holds the credential fields: a token, or client cert files)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "test", "user": dict(user)}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# -- manifests --------------------------------------------------------------------------------------------


def rbac_documents(
    namespace: str, service_account: str, manifest: Path = RBAC_MANIFEST
) -> list[dict[str, Any]]:
    """deploy/rbac.yaml with its documented namespace and ServiceAccount name replaced, as a user would."""
    documents = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc]
    for document in documents:
        metadata = document.setdefault("metadata", {})
        if metadata.get("namespace") == RBAC_DOCUMENTED_NAMESPACE:
            metadata["namespace"] = namespace
        if document.get("kind") == "Namespace" and metadata.get("name") == RBAC_DOCUMENTED_NAMESPACE:
            metadata["name"] = namespace
        if (
            document.get("kind") == "ServiceAccount"
            and metadata.get("name") == RBAC_DOCUMENTED_SERVICE_ACCOUNT
        ):
            metadata["name"] = service_account
        for subject in document.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                if subject.get("namespace") == RBAC_DOCUMENTED_NAMESPACE:
                    subject["namespace"] = namespace
                if subject.get("name") == RBAC_DOCUMENTED_SERVICE_ACCOUNT:
                    subject["name"] = service_account
    return documents


def admission_documents(
    policy: str, namespace: str, service_account: str, manifest: Path = ADMISSION_MANIFEST
) -> list[dict[str, Any]]:
    """Policy ``policy`` of deploy/admission-policies.yaml and its binding, bound to ``namespace`` only and
    naming ServiceAccount ``namespace/service_account`` where the file names the documented one, as a user
    with another release would; renamed ``<policy>-<namespace>``, as policies are cluster-wide objects."""
    documented = f"'system:serviceaccount:{RBAC_DOCUMENTED_NAMESPACE}:{RBAC_DOCUMENTED_SERVICE_ACCOUNT}'"
    ours = f"'system:serviceaccount:{namespace}:{service_account}'"
    documents = [
        document
        for document in yaml.safe_load_all(manifest.read_text())
        if document and policy in (document["metadata"]["name"], document["spec"].get("policyName"))
    ]
    for document in documents:
        document["metadata"]["name"] = f"{policy}-{namespace}"
        spec = document["spec"]
        if document["kind"] == "ValidatingAdmissionPolicyBinding":
            spec["policyName"] = f"{policy}-{namespace}"
            spec["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
        for variable in spec.get("variables", []):
            variable["expression"] = variable["expression"].replace(documented, ours)
    assert [document["kind"] for document in documents] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ], f"{policy} and its binding in {manifest}"
    return documents


# -- the running server -----------------------------------------------------------------------------------


class KubeApiServer:
    """A running etcd + kube-apiserver; ``admin`` is an ApiClient with every right (system:masters)."""

    def __init__(self, url: str, workdir: Path, pki: _Pki, admin_kubeconfig: Path) -> None:
        self.url = url
        self.workdir = workdir
        self.ca_file = pki.ca
        self.admin_kubeconfig = admin_kubeconfig
        self.admin = api_client_for(admin_kubeconfig)
        self._dynamic: DynamicClient | None = None
        self._gateway_api = False

    def __repr__(self) -> str:
        return f"KubeApiServer({self.url})"

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.admin)
        return self._dynamic

    def apply(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Server-side apply, as ``kubectl apply --server-side`` does: creates or updates each object."""
        for document in documents:
            resource = self.dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
            resource.server_side_apply(
                body=copy.deepcopy(dict(document)),
                namespace=document.get("metadata", {}).get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

    def install_gateway_api(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Apply the Gateway API standard install (``locate_gateway_api_crds``) and wait until each of its
        CRDs is Established, as ``kubectl wait --for=condition=Established`` does; once per server (the CRDs
        are cluster-wide: every test sees them)."""
        if self._gateway_api:
            return
        documents = list(documents)
        self.apply(documents)
        crds = [d["metadata"]["name"] for d in documents if d["kind"] == "CustomResourceDefinition"]
        extensions = client.ApiextensionsV1Api(self.admin)

        def established() -> bool:
            for name in crds:
                conditions = extensions.read_custom_resource_definition(name).status.conditions or []
                if not any(c.type == "Established" and c.status == "True" for c in conditions):
                    return False
            return True

        eventually(established, what="the Gateway API CRDs established", timeout=CRD_ESTABLISHED_TIMEOUT)
        self._dynamic = None  # discovery cached before the CRDs knows none of their kinds
        self._gateway_api = True

    def create_namespace(self, name: str) -> None:
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path, expiration_seconds: int = 3600
    ) -> Path:
        """A kubeconfig authenticating as ServiceAccount ``namespace/name`` (created if missing) with a
        token from the TokenRequest API, as the kubelet projects one into a pod."""
        self.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                }
            ]
        )
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        token = client.CoreV1Api(self.admin).create_namespaced_service_account_token(name, namespace, request)
        return write_kubeconfig(path, self.url, self.ca_file, {"token": token.status.token})

    def apply_rbac(self, namespace: str, service_account: str, *, ingress_pods: bool = True) -> None:
        """deploy/rbac.yaml, for ServiceAccount ``namespace/service_account``, and with ``ingress_pods``
        the optional deploy/rbac-ingress-pods.yaml, as an operator using LANDB_INGRESS_POD_SELECTOR."""
        self.apply(rbac_documents(namespace, service_account))
        if ingress_pods:
            self.apply(rbac_documents(namespace, service_account, INGRESS_PODS_RBAC_MANIFEST))

    def delete(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Delete each object (cluster-wide or namespaced) if it exists."""
        for document in documents:
            resource = self.dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
            metadata = document["metadata"]
            with contextlib.suppress(NotFoundError):
                resource.delete(name=metadata["name"], namespace=metadata.get("namespace"))

    def close(self) -> None:
        self.admin.close()


def _wait(what: str, check: Any, processes: Iterable[tuple[str, subprocess.Popen[bytes], Path]]) -> None:
    """Poll ``check()`` until it is true; fail at once if a process exits, and after START_TIMEOUT."""
    deadline = time.monotonic() + START_TIMEOUT
    last_error = ""
    while time.monotonic() < deadline:
        for name, process, log in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; log:\n{_tail(log)}")
        try:
            if check():
                return
        except (httpx.HTTPError, ssl.SSLError) as exc:
            last_error = str(exc)
        time.sleep(0.1)
    logs = "\n".join(f"--- {name} ---\n{_tail(log)}" for name, _, log in processes)
    raise TimeoutError(f"{what} not ready within {START_TIMEOUT} s ({last_error}); logs:\n{logs}")


def _tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT)


@contextlib.contextmanager
def running_kube_apiserver(
    etcd: Path, apiserver: Path, workdir: Path | None = None
) -> Iterator[KubeApiServer]:
    """Start etcd, then kube-apiserver, wait until ``/readyz`` answers ok; stop both on exit."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-apiserver-")))
        pki = _write_pki(workdir / "pki")
        logs: list[IO[bytes]] = []
        stack.callback(lambda: [log.close() for log in logs])
        processes: list[tuple[str, subprocess.Popen[bytes], Path]] = []

        def start(name: str, command: list[str]) -> subprocess.Popen[bytes]:
            log_path = workdir / f"{name}.log"
            log = log_path.open("wb")
            logs.append(log)
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
            stack.callback(_stop, process)
            processes.append((name, process, log_path))
            return process

        client_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        start(
            "etcd",
            [
                str(etcd),
                "--name=test",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=test=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # throw-away data: no fsync keeps a loaded disk from slowing writes
                "--log-level=warn",
            ],
        )
        with httpx.Client(timeout=2) as http:
            _wait("etcd", lambda: http.get(f"{etcd_url}/health").json().get("health") == "true", processes)

        port = free_port()
        url = f"https://127.0.0.1:{port}"
        start(
            "kube-apiserver",
            [
                str(apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                "--endpoint-reconciler-type=none",  # the default reconciler refuses a loopback address
                "--authorization-mode=RBAC",
                f"--client-ca-file={pki.ca}",
                f"--tls-cert-file={pki.serving_certificate}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--cert-dir={workdir / 'certificates'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.service_account_public_key}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-cluster-ip-range=10.96.0.0/24",  # an allocation range only; no traffic goes there
                "--profiling=false",
            ],
        )
        admin_kubeconfig = write_kubeconfig(
            workdir / "admin.kubeconfig",
            url,
            pki.ca,
            {"client-certificate": str(pki.admin), "client-key": str(pki.admin)},
        )
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.admin))
        with httpx.Client(timeout=5, verify=context) as http:
            _wait("kube-apiserver", lambda: http.get(f"{url}/readyz").status_code == 200, processes)
        server = KubeApiServer(url, workdir, pki, admin_kubeconfig)
        stack.callback(server.close)
        yield server
