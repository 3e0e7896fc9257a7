"""The user's path, for real: Ingress objects in a real kube-apiserver, external-dns ``--source=ingress``
with the README's flags, ``landb-webhook serve`` reading the nodes from that API server, Nova simulated.

Both programs authenticate as the chart's ServiceAccount (``external-dns``) with a TokenRequest token:
its rights are exactly the chart's ClusterRole for ``sources: [ingress]`` plus deploy/rbac.yaml.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from e2e_support import (
    EXTERNAL_DNS_TIMEOUT,
    REPO_ROOT,
    Result,
    WebhookProcess,
    WebhookTap,
    alias_tokens,
    ingress_selector,
    ownership_configmap,
    run_external_dns,
    server_id_of,
)
from kubernetes import client

from landb_simulator import Simulator, seed_cluster
from support.clusters import RealCluster
from support.kube_apiserver import KubeApiServer

CHART_SERVICE_ACCOUNT = "external-dns"
OWNER_ID = "landb-e2e-ingress"
README = REPO_ROOT / "README.md"


def readme_external_dns_flags(owner_id: str = OWNER_ID) -> list[str]:
    """The flags of the README's block for external-dns without the chart, as a user pastes them,
    ``<your-cluster-name>`` filled in, the webhook URL left out (each run gives the tap's)."""
    [block] = [b for b in README.read_text().split("```")[1::2] if b.startswith("\n--provider=webhook")]
    words = [word for line in block.splitlines() for word in line.split()]
    flags = [word.replace("<your-cluster-name>", owner_id) for word in words if word.startswith("--")]
    return [flag for flag in flags if not flag.startswith(("--webhook-provider-url=", "--provider="))]


TARGET_ANNOTATION = "external-dns.kubernetes.io/target"
LEGACY_TARGET_ANNOTATION = "external-dns.alpha.kubernetes.io/target"
"""The name older external-dns releases and many guides use; v0.22.0 ignores it."""


READ = ["get", "watch", "list"]
CHART_RULES = {
    "ingress": [
        {"apiGroups": ["extensions", "networking.k8s.io"], "resources": ["ingresses"], "verbs": READ}
    ],
    "service": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": READ},
        {"apiGroups": [""], "resources": ["services", "endpoints"], "verbs": READ},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
    ],
    # Any gateway source: the Gateways and the namespaces (listeners' allowedRoutes); then its routes.
    **{
        f"gateway-{kind}route": [
            {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["gateways"], "verbs": READ},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": READ},
            {"apiGroups": ["gateway.networking.k8s.io"], "resources": [f"{kind}routes"], "verbs": READ},
        ]
        for kind in ("http", "grpc")
    },
}


def chart_rbac(namespace: str, sources: Iterable[str] = ("ingress",)) -> list[dict[str, Any]]:
    """What the official external-dns chart (1.21.1) renders for ``sources``, release ``external-dns`` in
    ``namespace``: read access to what those sources read, nothing else (for ``ingress``: Ingresses)."""
    name = f"external-dns-{namespace}"  # cluster-wide names: one per test namespace
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [rule for source in sources for rule in CHART_RULES[source]],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": CHART_SERVICE_ACCOUNT, "namespace": namespace}],
        },
    ]


class IngressWorld:
    """Nova (simulator) holds the servers; the real API server holds their Nodes and the Ingresses.

    The simulator's own Kubernetes API is emptied of nodes, so a name can only land if the webhook read
    the nodes from the real API server.
    """

    def __init__(
        self,
        server: KubeApiServer,
        simulator: Simulator,
        external_dns: Path,
        workdir: Path,
        webhook_settings: Mapping[str, str] | None = None,
        sources: tuple[str, ...] = ("ingress",),
    ) -> None:
        """``sources``: external-dns' sources, in place of the README's ``--source=ingress``."""
        self.server = server
        self.sources = sources
        self.sim = simulator
        self.state = simulator.state
        self.external_dns = external_dns
        self.workdir = workdir
        self.results: list[Result] = []
        self.extra_flags: list[str] = []
        """external-dns flags beside the README's (``--events-emit=...``)."""
        seed_cluster(self.state, ingress_nodes=3, workers=1)
        self.cluster = RealCluster(server, workdir, service_account=CHART_SERVICE_ACCOUNT)
        self.namespace = self.cluster.namespace
        server.apply(chart_rbac(self.namespace, sources))
        self.cluster.reset()
        for node in self.state.nodes():
            self.cluster.add_node(
                node["metadata"]["name"],
                labels=node["metadata"].get("labels", {}),
                provider_id=node["spec"].get("providerID"),
                internal_ips=[a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"],
            )
            self.state.delete_node(node["metadata"]["name"])
        self.apps_namespace = f"apps-{uuid.uuid4().hex[:10]}"
        server.create_namespace(self.apps_namespace)
        self.networking = client.NetworkingV1Api(server.admin)
        client_config = simulator.write_client_config(workdir)
        self.webhook = WebhookProcess(
            {
                "OS_CLIENT_CONFIG_FILE": str(client_config.clouds_yaml),
                "LANDB_OS_CLOUD": client_config.cloud_name,
                "LANDB_KUBECONFIG": str(self.cluster.kubeconfig),
                "LANDB_OWNERSHIP_NAMESPACE": self.namespace,
                "LANDB_REGISTRY": "txt",
                "LANDB_LOG_FORMAT": "json",
                "LANDB_DNS_WATCH": "false",  # tests ask no resolver but a loopback one
                **(webhook_settings or {}),
            },
            workdir / "webhook.log",
        )
        self.webhook.start()
        self.tap = WebhookTap(self.webhook.api_port)

    def close(self) -> None:
        self.tap.close()
        self.webhook.stop()
        self.networking.delete_collection_namespaced_ingress(self.apps_namespace)
        self.cluster.reset()

    # -- the cluster -----------------------------------------------------------------------------------

    def add_ingress(
        self, name: str, host: str, annotations: Mapping[str, str] | None = None, *, namespace: str = ""
    ) -> None:
        """An Ingress as an application team writes it, for the cluster's nginx IngressClass (in
        ``namespace``, by default the applications' one)."""
        backend = {"service": {"name": name, "port": {"number": 80}}}
        self.networking.create_namespaced_ingress(
            namespace or self.apps_namespace,
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": name, "annotations": dict(annotations or {})},
                "spec": {
                    "ingressClassName": "nginx",
                    "rules": [
                        {
                            "host": host,
                            "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]},
                        }
                    ],
                },
            },
        )

    def publish_status(self, name: str, ips: Iterable[str]) -> None:
        """What an ingress controller publishing its status writes (ingress-nginx on hostNetwork: the
        addresses of the nodes its pods run on), through the status subresource."""
        status = {"status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}}}
        self.networking.patch_namespaced_ingress_status(name, self.apps_namespace, status)

    def delete_ingress(self, name: str) -> None:
        self.networking.delete_namespaced_ingress(name, self.apps_namespace)

    def ingress_node_ips(self) -> list[str]:
        key, _, value = ingress_selector().partition("=")
        nodes = client.CoreV1Api(self.server.admin).list_node(label_selector=f"{key}={value}").items
        return sorted(a.address for node in nodes for a in node.status.addresses if a.type == "InternalIP")

    # -- driving external-dns --------------------------------------------------------------------------

    def run(self) -> Result:
        """One ``external-dns --once`` with the README's flags, reading Ingresses as the chart's account."""
        flags = readme_external_dns_flags()
        sources = [flag for flag in flags if flag.startswith("--source=")]
        assert "--source=ingress" in sources, sources
        result = run_external_dns(
            self.external_dns,
            *(flag for flag in flags if flag not in sources),
            *self.extra_flags,
            webhook_url=self.tap.url,
            source=[*(f"--source={s}" for s in self.sources), f"--kubeconfig={self.cluster.kubeconfig}"],
            tap=self.tap,
            timeout=EXTERNAL_DNS_TIMEOUT,
        )
        self.results.append(result)
        return result

    # -- observing -------------------------------------------------------------------------------------

    def ingress_server_ids(self) -> set[str]:
        key, _, value = ingress_selector().partition("=")
        nodes = client.CoreV1Api(self.server.admin).list_node(label_selector=f"{key}={value}").items
        return {server_id_of({"spec": {"providerID": node.spec.provider_id}}) for node in nodes}

    def aliases(self) -> dict[str, dict[str, set[int]]]:
        """server id -> label -> ``--load-N-`` indices, for every server in Nova."""
        return {server.id: alias_tokens(server.metadata) for server in self.state.servers()}

    def servers_carrying(self, label: str) -> set[str]:
        return {server_id for server_id, tokens in self.aliases().items() if label in tokens}

    def metadata_write_count(self) -> int:
        return sum(1 for change in self.state.metadata_history() if change.method != "direct")

    def ownership_claims(self) -> dict[str, str]:
        """TXT name -> value, from the webhook's ownership ConfigMap in the real API server."""
        configmap = self.cluster.configmap(ownership_configmap())
        records = [json.loads(value) for value in ((configmap or {}).get("data") or {}).values()]
        return {record["dnsName"]: record["targets"][0] for record in records}

    def diagnostics(self) -> list[tuple[str, str]]:
        sections = [(f"external-dns run {n}", result.describe()) for n, result in enumerate(self.results, 1)]
        sections.append(("landb-webhook serve log", self.webhook.log_text()[-20000:]))
        return sections


HOSTNAME_ANNOTATION = "external-dns.kubernetes.io/hostname"


class ServicesWorld(IngressWorld):
    """The ingress world with LoadBalancer Services too (external-dns' ``--source=service`` beside
    ``--source=ingress``, and ``sources``' others): each Service is deleted when the world closes."""

    def __init__(
        self,
        server: KubeApiServer,
        simulator: Simulator,
        external_dns: Path,
        workdir: Path,
        webhook_settings: Mapping[str, str] | None = None,
        sources: tuple[str, ...] = ("service", "ingress"),
    ) -> None:
        super().__init__(server, simulator, external_dns, workdir, webhook_settings, sources=sources)
        self.core = client.CoreV1Api(server.admin)

    def close(self) -> None:
        for service in self.core.list_namespaced_service(self.apps_namespace).items:
            self.core.delete_namespaced_service(service.metadata.name, self.apps_namespace)
        super().close()

    def add_service(self, name: str, host: str, ip: str) -> None:
        """A LoadBalancer Service with the hostname annotation, and the address the cloud gave it."""
        self.core.create_namespaced_service(
            self.apps_namespace,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "annotations": {HOSTNAME_ANNOTATION: host}},
                "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"port": 80}]},
            },
        )
        status = {"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}
        self.core.patch_namespaced_service_status(name, self.apps_namespace, status)
