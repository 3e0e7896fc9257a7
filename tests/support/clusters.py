"""One Kubernetes cluster for a test, on the simulator or on a real kube-apiserver, seeded the same way.

A test states what the cluster holds (nodes, ConfigMaps) through a :class:`KubeCluster`; the code under
test reaches it through ``kubeconfig``: on the simulator, the simulator's token; on the real API server, a
ServiceAccount token whose only rights are those deploy/rbac.yaml grants, so RBAC is exercised for real.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_simulator import Simulator
from landb_simulator.manifests import node_manifest, pod_manifest, set_ready
from support.kube_apiserver import KubeApiServer

Obj = dict[str, Any]


class KubeCluster(Protocol):
    backend: str
    """``simulator`` or ``kube-apiserver``."""
    kubeconfig: Path
    """What the code under test authenticates with."""
    namespace: str
    """The webhook's namespace: where its ownership ConfigMaps live and its rights apply."""

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        provider_id: str | None = None,
        internal_ips: Iterable[str] = (),
        ready: bool = True,
    ) -> None: ...

    def label_node(self, name: str, key: str, value: str | None) -> None: ...

    def delete_node(self, name: str) -> None:
        """Delete the node; one with finalizers only gets its deletionTimestamp (see remove_finalizers)."""
        ...

    def set_node_ready(
        self, name: str, ready: bool, *, status: Literal["False", "Unknown"] = "False"
    ) -> None: ...

    def cordon_node(self, name: str, cordoned: bool = True) -> None: ...

    def remove_finalizers(self, name: str) -> None: ...

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        labels: Mapping[str, str] | None = None,
        ready: bool = True,
    ) -> None: ...

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None: ...

    def delete_pod(self, namespace: str, name: str) -> None: ...

    def configmap(self, name: str) -> Obj | None:
        """A ConfigMap of ``namespace`` as a plain dict, or None."""
        ...

    def put_configmap(self, name: str, data: Mapping[str, str]) -> None:
        """Create a ConfigMap in ``namespace`` or replace its data (as someone else would)."""
        ...


class SimulatorCluster:
    """The simulator's own seeding methods; the webhook's token has every right."""

    backend = "simulator"

    def __init__(self, simulator: Simulator, kubeconfig: Path, namespace: str = "landb") -> None:
        self.state = simulator.state
        self.kubeconfig = kubeconfig
        self.namespace = namespace

    def add_node(self, name: str, **node: Any) -> None:
        self.state.add_node(name, **node)

    def label_node(self, name: str, key: str, value: str | None) -> None:
        self.state.label_node(name, key, value)

    def delete_node(self, name: str) -> None:
        self.state.delete_node(name)

    def __getattr__(self, name: str) -> Any:
        """Node health and pods: the simulator's methods of the same name and signature."""
        if name in {
            "set_node_ready",
            "cordon_node",
            "remove_finalizers",
            "add_pod",
            "set_pod_ready",
            "delete_pod",
        }:
            return getattr(self.state, name)
        raise AttributeError(name)

    def configmap(self, name: str) -> Obj | None:
        return self.state.configmap(self.namespace, name)

    def put_configmap(self, name: str, data: Mapping[str, str]) -> None:
        self.state.put_configmap(self.namespace, name, data)


class RealCluster:
    """A fresh namespace on a shared real API server, and ServiceAccount ``service_account`` in it bound
    by deploy/rbac.yaml. Nodes are cluster-wide: ``reset`` gives each test an empty node list."""

    backend = "kube-apiserver"

    def __init__(self, server: KubeApiServer, workdir: Path, service_account: str = "landb-webhook") -> None:
        self.server = server
        self.namespace = f"test-{uuid.uuid4().hex[:10]}"
        self.service_account = service_account
        self.core = client.CoreV1Api(server.admin)
        self._pod_namespaces: set[str] = set()
        server.create_namespace(self.namespace)
        server.apply_rbac(self.namespace, service_account)
        self.kubeconfig = server.service_account_kubeconfig(
            self.namespace, service_account, workdir / "service-account.kubeconfig"
        )

    def grant_overflow_configmaps(self, name: str, count: int) -> None:
        """get and update on ``<name>-4`` to ``<name>-<count>`` besides the ``-1`` to ``-3`` deploy/rbac.yaml
        names: for the store tests that shrink a ConfigMap to a few hundred bytes so that claims spill into
        many, which a real cluster's 900 KiB ConfigMaps never do."""
        self.server.apply(
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": "tests-overflow-configmaps", "namespace": self.namespace},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "resources": ["configmaps"],
                            "verbs": ["get", "update"],
                            "resourceNames": [f"{name}-{index}" for index in range(4, count + 1)],
                        }
                    ],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "tests-overflow-configmaps", "namespace": self.namespace},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "tests-overflow-configmaps",
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": self.service_account, "namespace": self.namespace}
                    ],
                },
            ]
        )

    def reset(self) -> None:
        """No node, and no pod where this cluster made any (pods are deleted at once: no kubelet)."""
        for node in self.core.list_node().items:
            if node.metadata.finalizers:
                self.remove_finalizers(node.metadata.name)
        self.core.delete_collection_node()
        for namespace in self._pod_namespaces:
            self.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)

    def add_node(self, name: str, **node: Any) -> None:
        """Register the node with its status (addresses, Ready) in one create, as a kubelet does: the API
        server keeps a Node's status on create, so no watcher ever sees it without addresses."""
        manifest = node_manifest(
            name,
            node.get("labels"),
            node.get("provider_id"),
            tuple(node.get("internal_ips", ())),
            node.get("ready", True),
        )
        if node.get("finalizers"):
            manifest["metadata"]["finalizers"] = list(node["finalizers"])
        self.core.create_node(manifest)

    def label_node(self, name: str, key: str, value: str | None) -> None:
        self.core.patch_node(name, {"metadata": {"labels": {key: value}}})

    def delete_node(self, name: str) -> None:
        self.core.delete_node(name)

    def set_node_ready(
        self, name: str, ready: bool, *, status: Literal["False", "Unknown"] = "False"
    ) -> None:
        """What the kubelet (True/False) or the node lifecycle controller (Unknown) writes."""
        node = self._plain(self.core.read_node_status(name))
        set_ready(node, "True" if ready else status)
        self.core.replace_node_status(name, node)

    def cordon_node(self, name: str, cordoned: bool = True) -> None:
        self.core.patch_node(name, {"spec": {"unschedulable": True if cordoned else None}})

    def remove_finalizers(self, name: str) -> None:
        self.core.patch_node(name, {"metadata": {"finalizers": None}})

    def add_pod(self, namespace: str, name: str, **pod: Any) -> None:
        """A pod bound to ``node``, then its status as the kubelet reports it (the API server drops a
        pod's status on create)."""
        self.server.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": namespace},
                },
            ]
        )
        self._pod_namespaces.add(namespace)
        manifest = pod_manifest(name, pod["node"], pod.get("labels"), pod.get("ready", True))
        status = manifest.pop("status")
        created = self._plain(self.core.create_namespaced_pod(namespace, manifest))
        self.core.replace_namespaced_pod_status(name, namespace, {**created, "status": status})

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None:
        pod = self._plain(self.core.read_namespaced_pod_status(name, namespace))
        set_ready(pod, "True" if ready else "False", "ContainersReady")
        self.core.replace_namespaced_pod_status(name, namespace, pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def _plain(self, obj: Any) -> Obj:
        return dict(self.server.admin.sanitize_for_serialization(obj))

    def configmap(self, name: str) -> Obj | None:
        try:
            found = self.core.read_namespaced_config_map(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._plain(found)

    def put_configmap(self, name: str, data: Mapping[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": dict(data)}
        try:
            self.core.create_namespaced_config_map(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.replace_namespaced_config_map(name, self.namespace, body)
