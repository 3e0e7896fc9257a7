"""A reproducible CERN Magnum cluster: nodes named like Magnum's, a server each, LanDB keys already set."""

from __future__ import annotations

import hashlib
import uuid

from landb_simulator.state import SimulatorState

_NAMESPACE = uuid.UUID("7c1d3a52-3f0e-4f7b-a8f2-2a9e63d5c4b8")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def stack_suffix(cluster: str) -> str:
    """The 12 lowercase alphanumerics Heat puts in a stack's resource names, derived from the cluster."""
    number = int.from_bytes(hashlib.sha256(cluster.encode()).digest(), "big")
    chars = []
    for _ in range(12):
        number, digit = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[digit])
    return "".join(chars)


def node_name(cluster: str, index: int) -> str:
    """``<cluster[:30]>-<12 chars>-node-<i>``, as the Magnum Heat driver names workers (== Nova name)."""
    return f"{cluster[:30]}-{stack_suffix(cluster)}-node-{index}"


def server_id(cluster: str, name: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{cluster}/{name}"))


def node_ip(cluster: str, index: int) -> str:
    """A distinct address in 188.184.0.0/16 (CERN's routable range) per node, stable per cluster."""
    offset = int.from_bytes(hashlib.sha256(f"ip:{cluster}".encode()).digest()[:4], "big") % (254 * 254)
    position = (offset + index) % (254 * 254)
    return f"188.184.{1 + position // 254}.{1 + position % 254}"


def cern_vm_metadata(cluster: str, name: str) -> dict[str, str]:
    """Keys CERN's cloud puts on every VM; the webhook must never change them."""
    return {
        "landb-mainuser": "kubernetes-admins",
        "landb-responsible": "kubernetes-admins",
        "landb-os": "LINUX",
        "landb-osversion": "FCOS 38",
        "landb-description": f"Kubernetes node {name} of cluster {cluster}",
        "cern-services": "true",
        "cern-checkdns": "true",
    }


def seed_cluster(
    state: SimulatorState,
    *,
    cluster: str = "demo",
    ingress_nodes: int = 3,
    workers: int = 1,
    foreign_metadata: bool = True,
) -> list[str]:
    """Add ``ingress_nodes + workers`` nodes and their servers; the first ``ingress_nodes`` carry
    ``role=ingress``. Same cluster name, same names, ids and addresses. Returns the node names."""
    if ingress_nodes < 0 or workers < 0:
        raise ValueError("node counts must not be negative")
    names = []
    for index in range(ingress_nodes + workers):
        name = node_name(cluster, index)
        ip = node_ip(cluster, index)
        uuid_ = state.add_server(
            name,
            cern_vm_metadata(cluster, name) if foreign_metadata else None,
            server_id=server_id(cluster, name),
            ip=ip,
        )
        labels = {
            "magnum.openstack.org/role": "worker",
            "magnum.openstack.org/nodegroup": "default-worker",
        }
        if index < ingress_nodes:
            labels["role"] = "ingress"
        state.add_node(name, labels=labels, provider_id=f"openstack:///{uuid_}", internal_ips=[ip])
        names.append(name)
    return names
