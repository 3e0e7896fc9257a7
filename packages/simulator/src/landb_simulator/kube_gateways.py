"""Gateway API objects in the simulated Kubernetes API (gateway.networking.k8s.io/v1, the v1.6.1 standard
channel): GatewayClass, Gateway, HTTPRoute and GRPCRoute, with their status subresources, and the status a
Gateway controller (Envoy Gateway, Cilium, NGINX Gateway Fabric...) writes into them.

What external-dns' gateway-httproute and gateway-grpcroute sources read (source/gateway.go): a route's
hostnames, its ``status.parents[]`` whose ``Accepted`` condition is ``True`` and whose ``parentRef`` is one of
its ``spec.parentRefs``, the Gateway's listeners (protocol, hostname, allowedRoutes) and the Gateway's
``status.addresses[].value``: the targets of the route's names. The controller's status writes are what the
helpers below make (``accepted_parents``, ``gateway_status``), as a controller that accepted everything
would; the simulator runs no controller of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

GROUP = "gateway.networking.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
GATEWAY_CLASSES = "gatewayclasses"
GATEWAYS = "gateways"
HTTP_ROUTES = "httproutes"
GRPC_ROUTES = "grpcroutes"
KINDS = {
    GATEWAY_CLASSES: "GatewayClass",
    GATEWAYS: "Gateway",
    HTTP_ROUTES: "HTTPRoute",
    GRPC_ROUTES: "GRPCRoute",
}
ROUTES = (HTTP_ROUTES, GRPC_ROUTES)
CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
"""The controller name Envoy Gateway's GatewayClass names (any controller would do)."""
SHORT_NAMES = {GATEWAY_CLASSES: ["gc"], GATEWAYS: ["gtw"]}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, reason: str, generation: int, message: str = "") -> dict[str, Any]:
    """One ``metav1.Condition`` with status True, as a controller sets it."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message or reason,
        "observedGeneration": generation,
        "lastTransitionTime": _now(),
    }


def gateway_class_manifest(name: str, controller: str = CONTROLLER) -> Obj:
    return {"metadata": {"name": name}, "spec": {"controllerName": controller}}


def gateway_manifest(name: str, gateway_class: str, *, port: int = 80, protocol: str = "HTTP") -> Obj:
    """A Gateway with one listener accepting routes from every namespace (a cluster's shared Gateway)."""
    listener = {
        "name": protocol.lower(),
        "port": port,
        "protocol": protocol,
        "allowedRoutes": {"namespaces": {"from": "All"}},
    }
    return {"metadata": {"name": name}, "spec": {"gatewayClassName": gateway_class, "listeners": [listener]}}


def route_manifest(
    name: str, hosts: Iterable[str], gateway: str, gateway_namespace: str | None = None
) -> Obj:
    """An HTTPRoute or GRPCRoute as an application team writes it: its hostnames, attached to ``gateway``."""
    parent: dict[str, Any] = {"group": GROUP, "kind": "Gateway", "name": gateway}
    if gateway_namespace is not None:
        parent["namespace"] = gateway_namespace
    return {"metadata": {"name": name}, "spec": {"parentRefs": [parent], "hostnames": list(hosts)}}


def gateway_class_status(gateway_class: Obj) -> Obj:
    generation = gateway_class["metadata"].get("generation", 1)
    return {"conditions": [condition("Accepted", "Accepted", generation)]}


def gateway_status(gateway: Obj, addresses: Iterable[str]) -> Obj:
    """What the controller writes once its data plane listens: the addresses it is reached at (the ingress
    nodes' for a data plane on them, a load balancer's VIP behind Octavia), Accepted and Programmed."""
    generation = gateway["metadata"].get("generation", 1)
    listeners = [
        {
            "name": listener["name"],
            "attachedRoutes": 0,
            "supportedKinds": [{"group": GROUP, "kind": "HTTPRoute"}, {"group": GROUP, "kind": "GRPCRoute"}],
            "conditions": [condition("Accepted", "Accepted", generation)],
        }
        for listener in gateway.get("spec", {}).get("listeners") or ()
    ]
    return {
        "addresses": [{"type": "IPAddress", "value": address} for address in addresses],
        "conditions": [
            condition("Accepted", "Accepted", generation),
            condition("Programmed", "Programmed", generation),
        ],
        "listeners": listeners,
    }


def accepted_parents(route: Obj, controller: str = CONTROLLER) -> Obj:
    """The route's status as a controller that accepted it on each of its parents writes it: one
    ``status.parents[]`` entry per ``spec.parentRefs[]``, Accepted and ResolvedRefs True."""
    generation = route["metadata"].get("generation", 1)
    return {
        "parents": [
            {
                "parentRef": dict(parent),
                "controllerName": controller,
                "conditions": [
                    condition("Accepted", "Accepted", generation, "Route is accepted"),
                    condition(
                        "ResolvedRefs", "ResolvedRefs", generation, "Resolved all the Object references"
                    ),
                ],
            }
            for parent in route.get("spec", {}).get("parentRefs") or ()
        ]
    }


def gateway_cells(resource: str, obj: Obj, age: str) -> list[Any]:
    """What ``kubectl get`` shows, as the CRDs' printer columns say."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    name = obj["metadata"]["name"]
    if resource == GATEWAY_CLASSES:
        return [name, spec.get("controllerName", ""), _condition_status(status, "Accepted"), age]
    if resource == GATEWAYS:
        address = ",".join(entry.get("value", "") for entry in status.get("addresses") or ())
        return [name, spec.get("gatewayClassName", ""), address, _condition_status(status, "Programmed"), age]
    return [name, ",".join(spec.get("hostnames") or ()), age]


def _condition_status(status: Mapping[str, Any], kind: str) -> str:
    return next(
        (c.get("status", "") for c in status.get("conditions") or () if c.get("type") == kind), "Unknown"
    )


def _column(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "type": "string", "format": "", "description": description, "priority": 0}


TABLE_COLUMNS = {
    GATEWAY_CLASSES: [
        _column("Name", "Name must be unique within a namespace."),
        _column("Controller", ""),
        _column("Accepted", ""),
        _column("Age", ""),
    ],
    GATEWAYS: [
        _column("Name", "Name must be unique within a namespace."),
        _column("Class", ""),
        _column("Address", ""),
        _column("Programmed", ""),
        _column("Age", ""),
    ],
    HTTP_ROUTES: [
        _column("Name", "Name must be unique within a namespace."),
        _column("Hostnames", ""),
        _column("Age", ""),
    ],
}
TABLE_COLUMNS[GRPC_ROUTES] = TABLE_COLUMNS[HTTP_ROUTES]


def api_resources() -> dict[str, Any]:
    """The discovery document of gateway.networking.k8s.io/v1 (what kubectl needs to map a kind)."""
    verbs = ["delete", "get", "list", "patch", "create", "update", "watch"]
    resources = []
    for resource, kind in KINDS.items():
        namespaced = resource != GATEWAY_CLASSES
        entry: dict[str, Any] = {
            "name": resource,
            "singularName": kind.lower(),
            "namespaced": namespaced,
            "kind": kind,
            "verbs": verbs,
            "categories": ["gateway-api"],
        }
        if resource in SHORT_NAMES:
            entry["shortNames"] = SHORT_NAMES[resource]
        resources.append(entry)
        status = {"name": f"{resource}/status", "singularName": "", "namespaced": namespaced, "kind": kind}
        resources.append({**status, "verbs": ["get", "patch", "update"]})
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": resources,
    }


API_GROUP: dict[str, Any] = {
    "name": GROUP,
    "versions": [{"groupVersion": API_VERSION, "version": VERSION}],
    "preferredVersion": {"groupVersion": API_VERSION, "version": VERSION},
}
