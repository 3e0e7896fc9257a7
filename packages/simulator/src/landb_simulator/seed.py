"""A reproducible CERN Magnum cluster: nodes named like Magnum's, a server each, LanDB keys already set;
and a LoadBalancer Service with the Octavia load balancer the cloud controller manager builds for it."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

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
    return _stable_address("188.184", f"ip:{cluster}", index)


def _stable_address(network: str, key: str, index: int) -> str:
    """The ``index``-th address in the /16 ``network``, from a start that ``key`` decides."""
    offset = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % (254 * 254)
    position = (offset + index) % (254 * 254)
    return f"{network}.{1 + position // 254}.{1 + position % 254}"


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


def load_balancer_vip(cluster: str, index: int = 0) -> str:
    """A distinct address in 137.138.0.0/16 (CERN's other routable range) per load balancer, stable per
    cluster: never one of the nodes' addresses, which are in 188.184.0.0/16."""
    return _stable_address("137.138", f"vip:{cluster}", index)


def seed_load_balancer_service(
    state: SimulatorState, *, cluster: str = "demo", namespace: str = "default", name: str = "myservice"
) -> tuple[str, str]:
    """A LoadBalancer Service and the Octavia load balancer the OpenStack cloud controller manager builds for
    it: named ``kube_service_<cluster>_<namespace>_<name>``, tagged with that name, its VIP written into the
    Service's ``status.loadBalancer.ingress``. The Service asks external-dns for ``<name>.cern.ch``.
    Returns (load balancer id, VIP)."""
    lb_name = f"kube_service_{cluster}_{namespace}_{name}"
    vip = load_balancer_vip(cluster)
    lb_id = state.octavia.add_load_balancer(
        lb_name,
        vip,
        tags=[lb_name],
        description=f"Kubernetes external service {namespace}/{name} from cluster {cluster}",
        load_balancer_id=str(uuid.uuid5(_NAMESPACE, f"{cluster}/load-balancer/{namespace}/{name}")),
    )
    state.add_service(
        namespace,
        name,
        ports=[443],
        annotations={"external-dns.kubernetes.io/hostname": f"{name}.cern.ch"},
    )
    state.set_load_balancer_ingress(namespace, name, [vip])
    return lb_id, vip


def seed_gateway_route(
    state: SimulatorState,
    addresses: Iterable[str],
    *,
    namespace: str = "default",
    name: str = "myapp",
    gateway_class: str = "envoy",
    gateway: str = "nodes",
) -> None:
    """A Gateway data plane on the ingress nodes, as a cluster moving off ingress-nginx runs one: the
    GatewayClass ``gateway_class``, the Gateway ``<namespace>/<gateway>`` at ``addresses`` (the ingress
    nodes'), and the HTTPRoute ``<namespace>/<name>`` for ``<name>.cern.ch`` on it, accepted, as its
    controller writes their status."""
    state.add_gateway_class(gateway_class)
    state.add_gateway(namespace, gateway, gateway_class, addresses)
    state.add_route(namespace, name, [f"{name}.cern.ch"], (namespace, gateway))
