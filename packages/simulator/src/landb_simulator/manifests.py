"""The objects the simulator registers: Nodes shaped like a kubelet on a CERN Magnum VM registers them,
ingress controller pods, and Services as users write them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

FLAVOR_NAME = "m2.large"
KUBELET_VERSION = "v1.31.4"
_NAMESPACE = uuid.UUID("3a1f7e0c-5d2b-4b8e-9c61-0f4e2d7a8b93")


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_ready(obj: dict[str, Any], status: str, *also: str, since: datetime | None = None) -> None:
    """What a kubelet writes to a Node's or pod's status: the Ready condition (and ``also`` those) set to
    ``status``, its lastTransitionTime moved on a change (to ``since`` if given, even without one). The
    simulator's state applies it to its objects; a test on a real API server to the status it read."""
    moment = _timestamp() if since is None else since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for condition in obj.setdefault("status", {}).setdefault("conditions", []):
        if condition.get("type") in ("Ready", *also) and (condition.get("status") != status or since):
            condition["status"] = status
            condition["lastTransitionTime"] = moment


def node_manifest(
    name: str,
    labels: Mapping[str, str] | None,
    provider_id: str | None,
    internal_ips: tuple[str, ...],
    ready: bool = True,
) -> dict[str, Any]:
    """A Node as a kubelet on a Magnum (Fedora CoreOS) VM registers it."""
    now = _timestamp()
    addresses = [{"type": "InternalIP", "address": ip} for ip in internal_ips]
    addresses.append({"type": "Hostname", "address": name})
    spec: dict[str, Any] = {"podCIDR": "10.100.0.0/24", "podCIDRs": ["10.100.0.0/24"]}
    if provider_id:
        spec["providerID"] = provider_id
    capacity = {"cpu": "4", "memory": "7964432Ki", "pods": "110", "ephemeral-storage": "41921540Ki"}
    system_uuid = str(uuid.uuid5(_NAMESPACE, f"system:{name}"))
    return {
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": FLAVOR_NAME,
                "topology.kubernetes.io/region": "cern",
                "topology.kubernetes.io/zone": "cern-geneva-a",
                **(labels or {}),
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        "status": {
            "addresses": addresses,
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready else "container runtime is down",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid5(_NAMESPACE, f"boot:{name}")),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.5.12-100.fc37.x86_64",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": system_uuid.replace("-", ""),
                "operatingSystem": "linux",
                "osImage": "Fedora CoreOS 38.20230806.3.0",
                "systemUUID": system_uuid,
            },
        },
    }


def pod_manifest(
    name: str, node: str, labels: Mapping[str, str] | None, ready: bool, since: str | None = None
) -> dict[str, Any]:
    """A running pod of a DaemonSet-like ingress controller, bound to ``node``; Ready or not."""
    now = _timestamp()
    status = "True" if ready else "False"
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "controller", "image": "registry.k8s.io/ingress-nginx/controller"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": status, "lastTransitionTime": since or now},
                {"type": "ContainersReady", "status": status, "lastTransitionTime": since or now},
            ],
            "startTime": now,
        },
    }


def service_manifest(
    name: str,
    service_type: str,
    ports: tuple[int, ...],
    selector: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
) -> dict[str, Any]:
    """A Service as a user writes it; the API server fills in the cluster IP, node ports and status."""
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "metadata": metadata,
        "spec": {
            "type": service_type,
            "selector": dict(selector or {"app": name}),
            "ports": [{"name": f"port-{port}", "port": port, "protocol": "TCP"} for port in ports],
        },
    }
