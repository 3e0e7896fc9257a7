"""Services in the simulated Kubernetes API: what the API server fills in on create, and ``kubectl get svc``.

A Service of type LoadBalancer gets a cluster IP and a node port per port, as the API server allocates
them; its ``status.loadBalancer.ingress[].ip`` is written through the status subresource by the cloud
controller manager (on CERN clusters, the OpenStack one: the Octavia VIP), which is what external-dns'
service source publishes.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]

SERVICE_CIDR = ipaddress.ip_network("10.254.0.0/16")
"""Magnum's default service network."""
NODE_PORTS = range(30000, 32768)
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
IP_MODES = ("Proxy", "VIP")


def prepare_new_service(service: Obj, existing: Iterable[Obj]) -> list[str]:
    """Fill in what the API server defaults and allocates on create (type, cluster IP, node ports, an
    empty status); returns what is invalid instead, in the API server's words."""
    spec = service.setdefault("spec", {})
    if not isinstance(spec, dict):
        return ["spec: Invalid value: must be an object"]
    kind = spec.setdefault("type", "ClusterIP")
    if kind not in SERVICE_TYPES:
        return [f'spec.type: Unsupported value: "{kind}": supported values: {", ".join(SERVICE_TYPES)}']
    ports = spec.get("ports") or []
    if kind != "ExternalName" and not ports:
        return ["spec.ports: Required value"]
    if not isinstance(ports, list) or not all(isinstance(port, dict) for port in ports):
        return ["spec.ports: Invalid value: must be a list of objects"]
    taken_ips: set[str] = set()
    taken_ports: set[int] = set()
    for other in existing:
        taken_ips.update(other.get("spec", {}).get("clusterIPs") or ())
        taken_ports.update(port.get("nodePort", 0) for port in other.get("spec", {}).get("ports") or ())
    if kind != "ExternalName" and not spec.get("clusterIP"):
        # The first address belongs to the ``kubernetes`` Service of every cluster.
        free = next(
            str(ip) for ip in itertools.islice(SERVICE_CIDR.hosts(), 1, None) if str(ip) not in taken_ips
        )
        spec["clusterIP"] = free
        spec["clusterIPs"] = [free]
    for port in ports:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
        if kind in ("NodePort", "LoadBalancer") and not port.get("nodePort"):
            port["nodePort"] = next(number for number in NODE_PORTS if number not in taken_ports)
            taken_ports.add(port["nodePort"])
    service["status"] = {"loadBalancer": {}}
    return []


def default_and_check_status(service: Obj) -> list[str]:
    """The API server's defaulting and checks of ``status.loadBalancer.ingress`` on a status write: an
    ``ip`` must be an address and comes with an ``ipMode`` (``VIP`` or ``Proxy``), which defaults to ``VIP``
    only when the object written says ``type: LoadBalancer`` (defaulting sees the body as sent)."""
    if service.get("spec", {}).get("type") == "LoadBalancer":
        for entry in load_balancer_ingress(service):
            if entry.get("ip") and entry.get("ipMode") is None:
                entry["ipMode"] = "VIP"
    problems = []
    for index, entry in enumerate(load_balancer_ingress(service)):
        where = f"status.loadBalancer.ingress[{index}]"
        ip, mode = entry.get("ip"), entry.get("ipMode")
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                problems.append(f'{where}.ip: Invalid value: "{ip}": must be a valid IP address')
        if ip and mode is None:
            problems.append(f"{where}.ipMode: Required value: must be specified when `ip` is set")
        elif mode is not None and mode not in IP_MODES:
            problems.append(f'{where}.ipMode: Unsupported value: "{mode}": supported values: "Proxy", "VIP"')
    return problems


def load_balancer_ingress(service: Obj) -> list[dict[str, Any]]:
    return list(((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or ())


def service_cells(service: Obj, age: str) -> list[Any]:
    """NAME, TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S), AGE, SELECTOR as ``kubectl get services`` shows them."""
    spec = service.get("spec", {})
    kind = spec.get("type", "ClusterIP")
    external = [entry.get("ip") or entry.get("hostname") for entry in load_balancer_ingress(service)]
    external += spec.get("externalIPs") or []
    if external:
        external_ip = ",".join(address for address in external if address)
    else:
        external_ip = "<pending>" if kind == "LoadBalancer" else "<none>"
    ports = [_port_cell(port) for port in spec.get("ports") or ()]
    selector = ",".join(f"{key}={value}" for key, value in (spec.get("selector") or {}).items())
    return [
        service["metadata"]["name"],
        kind,
        spec.get("clusterIP") or "<none>",
        external_ip,
        ",".join(ports) or "<none>",
        age,
        selector or "<none>",
    ]


def _port_cell(port: dict[str, Any]) -> str:
    """``80:31234/TCP``: the port, its node port if it has one, the protocol."""
    node_port = f":{port['nodePort']}" if port.get("nodePort") else ""
    return f"{port.get('port')}{node_port}/{port.get('protocol')}"
