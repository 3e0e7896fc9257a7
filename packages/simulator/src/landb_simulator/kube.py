"""The Kubernetes API over HTTP, at ``/``: discovery, nodes, pods, configmaps, services (with their status
subresource), namespaces (read-only), ``coordination.k8s.io/v1`` leases (what leader election uses), and the
Gateway API's GatewayClasses, Gateways, HTTPRoutes and GRPCRoutes with their status (kube_gateways.py).

Shaped for the official Python client and kubectl: bearer-token authentication, Status objects for errors,
list/watch with label and field selectors, limit/continue paging, server-side Table rendering (what
``kubectl get`` asks for), merge / strategic-merge / JSON patches, and watch streams that end with a 410
ERROR event when the requested resourceVersion has been compacted away.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from landb_simulator import kube_gateways
from landb_simulator.kube_services import service_cells
from landb_simulator.kube_store import (
    API_VERSIONS,
    CONFIGMAPS,
    EVENTS,
    GATEWAY_RESOURCES,
    INGRESSES,
    KINDS,
    LEASES,
    NODES,
    PODS,
    SERVICES,
    Gone,
    KubeError,
    Obj,
    WatchEvent,
    not_found,
)
from landb_simulator.lifecycle import CLOSED, Lifecycle
from landb_simulator.manifests import KUBELET_VERSION
from landb_simulator.selectors import FieldSelector, InvalidFieldSelector, parse_field_selector
from landb_simulator.state import SimulatorState
from landb_webhook.selector import InvalidSelector, LabelSelector

DEFAULT_WATCH_SECONDS = 1800
"""The API server's --min-request-timeout: a watch without timeoutSeconds ends after about this long."""
PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
BUILTIN_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")

_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
API_RESOURCES = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "configmaps",
            "singularName": "configmap",
            "namespaced": True,
            "kind": "ConfigMap",
            "verbs": _VERBS,
            "shortNames": ["cm"],
            "storageVersionHash": "qFsyl6wFWjQ=",
        },
        {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "verbs": ["list"]},
        {
            "name": "namespaces",
            "singularName": "namespace",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": ["get", "list"],
            "shortNames": ["ns"],
            "storageVersionHash": "Q3oi5N2YM8M=",
        },
        {
            "name": "nodes",
            "singularName": "node",
            "namespaced": False,
            "kind": "Node",
            "verbs": _VERBS,
            "shortNames": ["no"],
            "storageVersionHash": "XwShjMxG9Fs=",
        },
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": _VERBS,
            "shortNames": ["po"],
            "storageVersionHash": "xPOwRZ+Yhw8=",
        },
        {
            "name": "services",
            "singularName": "service",
            "namespaced": True,
            "kind": "Service",
            "verbs": _VERBS,
            "shortNames": ["svc"],
            "storageVersionHash": "0/CO1lhkEBI=",
        },
        {
            "name": "services/status",
            "singularName": "",
            "namespaced": True,
            "kind": "Service",
            "verbs": ["get", "patch", "update"],
        },
    ],
}

COORDINATION = "coordination.k8s.io"
COORDINATION_VERSION = f"{COORDINATION}/v1"
COORDINATION_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": COORDINATION_VERSION,
    "resources": [
        {
            "name": "leases",
            "singularName": "lease",
            "namespaced": True,
            "kind": "Lease",
            "verbs": [*_VERBS, "deletecollection"],
            "storageVersionHash": "gqkMMb/YqFM=",
        }
    ],
}
COORDINATION_GROUP: dict[str, Any] = {
    "name": COORDINATION,
    "versions": [{"groupVersion": COORDINATION_VERSION, "version": "v1"}],
    "preferredVersion": {"groupVersion": COORDINATION_VERSION, "version": "v1"},
}
API_GROUPS = {
    "kind": "APIGroupList",
    "apiVersion": "v1",
    "groups": [COORDINATION_GROUP, kube_gateways.API_GROUP],
}


def status_body(
    code: int, reason: str, message: str, *, name: str = "", resource: str = ""
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if name or resource:
        body["details"] = {key: value for key, value in (("name", name), ("kind", resource)) if value}
    return body


def kube_error(code: int, reason: str, message: str, *, name: str = "", resource: str = "") -> JSONResponse:
    return JSONResponse(status_body(code, reason, message, name=name, resource=resource), status_code=code)


def _from_error(error: KubeError) -> JSONResponse:
    return kube_error(error.code, error.reason, error.message, name=error.name, resource=error.resource)


def human_age(created: str, now: datetime) -> str:
    """The AGE column as the API server renders it (k8s.io/apimachinery duration.HumanDuration)."""
    try:
        then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 365 * 8 else f"{days // 365}y"


def _node_cells(node: Obj, now: datetime) -> list[Any]:
    status = node.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in _conditions(node))
    state = "Ready" if ready else "NotReady"
    if node.get("spec", {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels", {})
    roles = sorted(
        {key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/")}
        | ({labels["kubernetes.io/role"]} if "kubernetes.io/role" in labels else set())
    )
    addresses = status.get("addresses", [])

    def address(kind: str) -> str:
        return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")

    info = status.get("nodeInfo", {})
    return [
        node["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        human_age(node["metadata"].get("creationTimestamp", ""), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _column(name: str, kind: str, description: str, priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


TABLE_COLUMNS = {
    NODES: [
        _column("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        _column("Status", "string", "The status of the node"),
        _column("Roles", "string", "The roles of the node"),
        _column("Age", "string", "CreationTimestamp is the time the object was created."),
        _column("Version", "string", "Kubelet Version reported by the node."),
        _column("Internal-IP", "string", "List of addresses reachable to the node.", 1),
        _column("External-IP", "string", "List of addresses reachable to the node.", 1),
        _column("OS-Image", "string", "OS Image reported by the node from /etc/os-release.", 1),
        _column("Kernel-Version", "string", "Kernel Version reported by the node.", 1),
        _column("Container-Runtime", "string", "Container runtime version reported by the node.", 1),
    ],
    PODS: [
        _column("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        _column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        _column("Status", "string", "The aggregate status of the containers in this pod."),
        _column("Restarts", "string", "The number of times the containers in this pod have been restarted."),
        _column("Age", "string", "CreationTimestamp is the time the object was created."),
        _column("Node", "string", "Name of the Node this pod runs on.", 1),
    ],
    CONFIGMAPS: [
        _column("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        _column("Data", "string", "Data contains the configuration data."),
        _column("Age", "string", "CreationTimestamp is the time the object was created."),
    ],
    LEASES: [
        _column("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        _column("Holder", "string", "The holder of the lease."),
        _column("Age", "string", "CreationTimestamp is the time the object was created."),
    ],
    SERVICES: [
        _column("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        _column("Type", "string", "The type of the service."),
        _column("Cluster-IP", "string", "The cluster IP of the service."),
        _column("External-IP", "string", "The external IP of the service."),
        _column("Port(s)", "string", "The ports of the service."),
        _column("Age", "string", "CreationTimestamp is the time the object was created."),
        _column("Selector", "string", "The label selector of the service.", 1),
    ],
    "namespaces": [
        _column("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        _column("Status", "string", "The status of the namespace"),
        _column("Age", "string", "CreationTimestamp is the time the object was created."),
    ],
}


TABLE_COLUMNS.update(kube_gateways.TABLE_COLUMNS)


def _cells(resource: str, obj: Obj, now: datetime) -> list[Any]:
    created = obj["metadata"].get("creationTimestamp", "")
    if resource in GATEWAY_RESOURCES:
        return kube_gateways.gateway_cells(resource, obj, human_age(created, now))
    if resource == NODES:
        return _node_cells(obj, now)
    if resource == PODS:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in _conditions(obj))
        containers = len(obj.get("spec", {}).get("containers") or ())
        phase = "Terminating" if obj["metadata"].get("deletionTimestamp") else obj["status"].get("phase")
        return [
            obj["metadata"]["name"],
            f"{containers if ready else 0}/{containers}",
            phase or "Pending",
            0,
            human_age(created, now),
            obj.get("spec", {}).get("nodeName", "<none>"),
        ]
    if resource == CONFIGMAPS:
        count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
        return [obj["metadata"]["name"], count, human_age(created, now)]
    if resource == LEASES:
        holder = (obj.get("spec") or {}).get("holderIdentity") or ""
        return [obj["metadata"]["name"], holder, human_age(created, now)]
    if resource == SERVICES:
        return service_cells(obj, human_age(created, now))
    return [obj["metadata"]["name"], "Active", human_age(created, now)]


def _conditions(obj: Obj) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or ())


def wants_table(request: Request) -> bool:
    return "as=table" in request.headers.get("accept", "").replace(" ", "").lower()


def as_table(
    request: Request, resource: str, items: list[Obj], list_metadata: dict[str, Any]
) -> dict[str, Any]:
    include = request.query_params.get("includeObject", "Metadata")
    now = datetime.now(UTC)
    rows = []
    for item in items:
        row: dict[str, Any] = {"cells": _cells(resource, item, now)}
        if include == "Object":
            row["object"] = item
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": TABLE_COLUMNS[resource],
        "rows": rows,
    }


def _encode_continue(namespace: str, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([namespace, name]).encode()).decode()


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        namespace, name = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, TypeError):
        raise KubeError(400, "BadRequest", "continue key is not valid: invalid token") from None
    return str(namespace), str(name)


def _since(raw: str | None) -> int | None:
    """A watch's starting point: None means "send the current state first" (unset or "0")."""
    if not raw or raw == "0":
        return None
    try:
        return int(raw)
    except ValueError:
        raise KubeError(
            400, "BadRequest", f'resourceVersion: Invalid value: "{raw}": must be an integer'
        ) from None


def _is_true(raw: str | None) -> bool:
    return (raw or "").lower() in ("true", "1")


async def _json_body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except ValueError as exc:
        raise KubeError(400, "BadRequest", f"error decoding request body: {exc}") from None


def _namespace_object(name: str, created: str) -> Obj:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "creationTimestamp": created,
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def _status_success(deleted: Obj, resource: str) -> dict[str, Any]:
    metadata = deleted["metadata"]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": metadata["name"], "kind": resource, "uid": metadata.get("uid")},
    }


def _watch_line(event_type: str, obj: Obj) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


Handler = Callable[[Request], Awaitable[Response]]
ResourceHandler = Callable[[Request, str], Awaitable[Response]]


class KubeApi:
    def __init__(self, state: SimulatorState, lifecycle: Lifecycle) -> None:
        self.state = state
        self.store = state.kube
        self.lifecycle = lifecycle
        self.started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _verbs(self) -> tuple[dict[str, ResourceHandler], dict[str, ResourceHandler]]:
        """The handlers of a collection (list, create) and of one object (get, replace, patch, delete)."""
        collection: dict[str, ResourceHandler] = {"GET": self.collection, "POST": self.create}
        single: dict[str, ResourceHandler] = {
            "GET": self.read,
            "PUT": self.replace,
            "PATCH": self.patch,
            "DELETE": self.delete,
        }
        return collection, single

    def routes(self) -> list[BaseRoute]:
        collection, single = self._verbs()
        auth = self._authenticated
        resource = self._resource_endpoint
        object_verbs = ["GET", "PUT", "PATCH", "DELETE"]
        return [
            Route("/version", self.version, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/livez", self.healthz, methods=["GET"]),
            Route("/readyz", self.healthz, methods=["GET"]),
            Route("/api", auth(self.api_versions), methods=["GET"]),
            Route("/apis", auth(self.api_groups), methods=["GET"]),
            Route("/api/v1", auth(self.api_resources), methods=["GET"]),
            Route("/api/v1/nodes", resource(NODES, collection), methods=["GET", "POST"]),
            Route("/api/v1/nodes/{name}", resource(NODES, single), methods=object_verbs),
            Route("/api/v1/configmaps", resource(CONFIGMAPS, {"GET": self.collection}), methods=["GET"]),
            Route("/api/v1/namespaces", auth(self.list_namespaces), methods=["GET"]),
            Route("/api/v1/namespaces/{namespace}", auth(self.read_namespace), methods=["GET"]),
            Route("/api/v1/pods", resource(PODS, {"GET": self.collection}), methods=["GET"]),
            Route("/api/v1/namespaces/{namespace}/pods", resource(PODS, collection), methods=["GET", "POST"]),
            Route("/api/v1/namespaces/{namespace}/pods/{name}", resource(PODS, single), methods=object_verbs),
            *(
                Route(path, auth(self.empty_list), methods=["GET"])
                for path in ("/api/v1/events", "/api/v1/namespaces/{namespace}/events")
            ),
            Route(
                "/api/v1/namespaces/{namespace}/configmaps",
                resource(CONFIGMAPS, collection),
                methods=["GET", "POST"],
            ),
            Route(
                "/api/v1/namespaces/{namespace}/configmaps/{name}",
                resource(CONFIGMAPS, single),
                methods=object_verbs,
            ),
            Route("/api/v1/services", resource(SERVICES, {"GET": self.collection}), methods=["GET"]),
            Route(
                "/api/v1/namespaces/{namespace}/services",
                resource(SERVICES, collection),
                methods=["GET", "POST"],
            ),
            Route(
                "/api/v1/namespaces/{namespace}/services/{name}",
                resource(SERVICES, single),
                methods=object_verbs,
            ),
            Route(
                "/api/v1/namespaces/{namespace}/services/{name}/status",
                resource(
                    SERVICES, {"GET": self.read, "PUT": self.replace_status, "PATCH": self.patch_status}
                ),
                methods=["GET", "PUT", "PATCH"],
            ),
            *self._group_routes("networking.k8s.io/v1", INGRESSES),
            *self._group_routes("events.k8s.io/v1", EVENTS),
            *self._gateway_routes(),
            Route(f"/apis/{COORDINATION}", auth(self.api_group), methods=["GET"]),
            Route(f"/apis/{COORDINATION_VERSION}", auth(self.coordination_resources), methods=["GET"]),
            Route(
                f"/apis/{COORDINATION_VERSION}/leases",
                resource(LEASES, {"GET": self.collection}),
                methods=["GET"],
            ),
            Route(
                f"/apis/{COORDINATION_VERSION}/namespaces/{{namespace}}/leases",
                resource(LEASES, collection),
                methods=["GET", "POST"],
            ),
            Route(
                f"/apis/{COORDINATION_VERSION}/namespaces/{{namespace}}/leases/{{name}}",
                resource(LEASES, single),
                methods=object_verbs,
            ),
        ]

    def _group_routes(self, group_version: str, resource: str) -> list[BaseRoute]:
        """A namespaced resource of an API group: listed across namespaces, and list, create, get, replace,
        patch and delete in one namespace."""
        collection, single = self._verbs()
        base = f"/apis/{group_version}"
        endpoint = self._resource_endpoint
        return [
            Route(f"{base}/{resource}", endpoint(resource, {"GET": self.collection}), methods=["GET"]),
            Route(
                f"{base}/namespaces/{{namespace}}/{resource}",
                endpoint(resource, collection),
                methods=["GET", "POST"],
            ),
            Route(
                f"{base}/namespaces/{{namespace}}/{resource}/{{name}}",
                endpoint(resource, single),
                methods=["GET", "PUT", "PATCH", "DELETE"],
            ),
        ]

    def _gateway_routes(self) -> list[BaseRoute]:
        """gateway.networking.k8s.io/v1: discovery, the namespaced kinds as any group's, GatewayClasses
        cluster-wide, and the status subresource of each."""
        base = f"/apis/{kube_gateways.API_VERSION}"
        collection, single = self._verbs()
        status: dict[str, ResourceHandler] = {
            "GET": self.read,
            "PUT": self.replace_status,
            "PATCH": self.patch_status,
        }
        endpoint, auth = self._resource_endpoint, self._authenticated
        classes = kube_gateways.GATEWAY_CLASSES
        namespaced = [r for r in kube_gateways.KINDS if r != classes]
        return [
            Route(f"/apis/{kube_gateways.GROUP}", auth(self.gateway_group), methods=["GET"]),
            Route(base, auth(self.gateway_resources), methods=["GET"]),
            *(
                route
                for resource in namespaced
                for route in self._group_routes(kube_gateways.API_VERSION, resource)
            ),
            *(
                Route(
                    f"{base}/namespaces/{{namespace}}/{resource}/{{name}}/status",
                    endpoint(resource, status),
                    methods=["GET", "PUT", "PATCH"],
                )
                for resource in namespaced
            ),
            Route(f"{base}/{classes}", endpoint(classes, collection), methods=["GET", "POST"]),
            Route(
                f"{base}/{classes}/{{name}}",
                endpoint(classes, single),
                methods=["GET", "PUT", "PATCH", "DELETE"],
            ),
            Route(
                f"{base}/{classes}/{{name}}/status",
                endpoint(classes, status),
                methods=["GET", "PUT", "PATCH"],
            ),
        ]

    def _authenticated(self, handler: Handler) -> Handler:
        async def wrapped(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            expected = self.state.credentials.kubernetes_token
            if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), expected):
                return kube_error(401, "Unauthorized", "Unauthorized")
            try:
                return await handler(request)
            except KubeError as error:
                return _from_error(error)
            except (InvalidSelector, InvalidFieldSelector) as error:
                return kube_error(400, "BadRequest", str(error))

        return wrapped

    def _resource_endpoint(self, resource: str, verbs: dict[str, ResourceHandler]) -> Handler:
        async def dispatch(request: Request) -> Response:
            return await verbs[request.method](request, resource)

        return self._authenticated(dispatch)

    # -- discovery -----------------------------------------------------------------------------------

    async def version(self, request: Request) -> Response:
        major, minor, _ = KUBELET_VERSION.lstrip("v").split(".")
        return JSONResponse(
            {
                "major": major,
                "minor": minor,
                "gitVersion": KUBELET_VERSION,
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2024-12-10T00:00:00Z",
                "goVersion": "go1.22.9",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        )

    async def healthz(self, request: Request) -> Response:
        return Response("ok", media_type="text/plain")

    async def api_versions(self, request: Request) -> Response:
        address = {"clientCIDR": "0.0.0.0/0", "serverAddress": request.url.netloc}
        return JSONResponse(
            {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [address]}
        )

    async def api_groups(self, request: Request) -> Response:
        return JSONResponse(API_GROUPS)

    async def api_group(self, request: Request) -> Response:
        return JSONResponse({"kind": "APIGroup", "apiVersion": "v1", **COORDINATION_GROUP})

    async def gateway_group(self, request: Request) -> Response:
        return JSONResponse({"kind": "APIGroup", "apiVersion": "v1", **kube_gateways.API_GROUP})

    async def gateway_resources(self, request: Request) -> Response:
        return JSONResponse(kube_gateways.api_resources())

    async def coordination_resources(self, request: Request) -> Response:
        return JSONResponse(COORDINATION_RESOURCES)

    async def api_resources(self, request: Request) -> Response:
        return JSONResponse(API_RESOURCES)

    # -- nodes and configmaps ------------------------------------------------------------------------

    async def collection(self, request: Request, resource: str) -> Response:
        namespace = request.path_params.get("namespace")
        labels = LabelSelector.parse(request.query_params.get("labelSelector", ""))
        fields = parse_field_selector(resource, request.query_params.get("fieldSelector"))
        if _is_true(request.query_params.get("watch")):
            return self.watch(request, resource, namespace, labels, fields)
        items, resource_version = self.store.select(resource, namespace, labels, fields)
        metadata: dict[str, Any] = {"resourceVersion": str(resource_version)}
        token = request.query_params.get("continue")
        if token:
            start_after = _decode_continue(token)
            items = [item for item in items if _position(item) > start_after]
        limit = _int_param(request, "limit")
        if 0 < limit < len(items):
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
            metadata["continue"] = _encode_continue(*_position(items[-1]))
        if wants_table(request):
            return JSONResponse(as_table(request, resource, items, metadata))
        for item in items:  # list items carry no kind/apiVersion on a real API server either
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return JSONResponse(
            {
                "kind": f"{KINDS[resource]}List",
                "apiVersion": API_VERSIONS[resource],
                "metadata": metadata,
                "items": items,
            }
        )

    def watch(
        self,
        request: Request,
        resource: str,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> Response:
        since = _since(request.query_params.get("resourceVersion"))
        timeout = _int_param(request, "timeoutSeconds") or DEFAULT_WATCH_SECONDS
        store, lifecycle = self.store, self.lifecycle

        table = wants_table(request)  # kubectl get -w: every event carries a one-row Table

        def visible(event: WatchEvent) -> bytes | None:
            seen = event.for_selection(labels, fields)
            if seen is None:
                return None
            event_type, obj = seen
            if table:
                obj = as_table(
                    request, resource, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}
                )
            return _watch_line(event_type, obj)

        async def stream() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()

            def deliver(event: WatchEvent) -> None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: the stream is gone already
                    loop.call_soon_threadsafe(queue.put_nowait, event)

            try:
                backlog, subscription = store.watch(resource, namespace, since, deliver)
            except Gone as gone:
                yield _watch_line("ERROR", status_body(410, "Expired", str(gone)))
                return
            lifecycle.register(queue)
            try:
                for event in backlog:
                    if (chunk := visible(event)) is not None:
                        yield chunk
                deadline = loop.time() + timeout
                while (remaining := deadline - loop.time()) > 0:
                    try:
                        update = await asyncio.wait_for(queue.get(), timeout=remaining)
                    except TimeoutError:
                        return
                    if update is CLOSED:
                        return
                    if (chunk := visible(update)) is not None:
                        yield chunk
            finally:
                subscription.close()
                lifecycle.unregister(queue)

        return StreamingResponse(stream(), media_type="application/json")

    async def create(self, request: Request, resource: str) -> Response:
        if request.query_params.get("dryRun"):
            raise KubeError(400, "BadRequest", "dryRun is not supported by the simulator")
        body = await _json_object(request)
        created = self.store.create(resource, request.path_params.get("namespace"), body)
        return JSONResponse(created, status_code=201)

    async def read(self, request: Request, resource: str) -> Response:
        name = request.path_params["name"]
        obj = self.store.get(resource, request.path_params.get("namespace"), name)
        if obj is None:
            raise not_found(resource, name)
        if wants_table(request):
            metadata = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            return JSONResponse(as_table(request, resource, [obj], metadata))
        return JSONResponse(obj)

    async def replace(self, request: Request, resource: str, *, status: bool = False) -> Response:
        body = await _json_object(request)
        namespace, name = request.path_params.get("namespace"), request.path_params["name"]
        return JSONResponse(self.store.update(resource, namespace, name, body, status=status))

    async def patch(self, request: Request, resource: str, *, status: bool = False) -> Response:
        patch_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        body = await _json_body(request)
        namespace, name = request.path_params.get("namespace"), request.path_params["name"]
        return JSONResponse(self.store.patch(resource, namespace, name, patch_type, body, status=status))

    async def replace_status(self, request: Request, resource: str) -> Response:
        return await self.replace(request, resource, status=True)

    async def patch_status(self, request: Request, resource: str) -> Response:
        return await self.patch(request, resource, status=True)

    async def delete(self, request: Request, resource: str) -> Response:
        options = await _json_object(request) if (await request.body()).strip() else {}
        preconditions = options.get("preconditions") or {}
        namespace, name = request.path_params.get("namespace"), request.path_params["name"]
        deleted = self.store.delete(
            resource,
            namespace,
            name,
            resource_version=preconditions.get("resourceVersion"),
            uid=preconditions.get("uid"),
        )
        return JSONResponse(_status_success(deleted, resource))

    # -- namespaces: every name exists, as if created with the cluster --------------------------------

    async def list_namespaces(self, request: Request) -> Response:
        items, resource_version = self.store.select(CONFIGMAPS)
        items += self.store.select(PODS)[0]
        names = sorted(set(BUILTIN_NAMESPACES) | {item["metadata"]["namespace"] for item in items})
        objects = [_namespace_object(name, self.started) for name in names]
        metadata = {"resourceVersion": str(resource_version)}
        if wants_table(request):
            return JSONResponse(as_table(request, "namespaces", objects, metadata))
        return JSONResponse(
            {"kind": "NamespaceList", "apiVersion": "v1", "metadata": metadata, "items": objects}
        )

    async def empty_list(self, request: Request) -> Response:
        """Events exist only so ``kubectl describe node`` works: the simulator records none."""
        metadata = {"resourceVersion": str(self.store.resource_version)}
        return JSONResponse({"kind": "EventList", "apiVersion": "v1", "metadata": metadata, "items": []})

    async def read_namespace(self, request: Request) -> Response:
        obj = _namespace_object(request.path_params["namespace"], self.started)
        if wants_table(request):
            return JSONResponse(as_table(request, "namespaces", [obj], {}))
        return JSONResponse(obj)


def _position(obj: Obj) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _int_param(request: Request, name: str) -> int:
    raw = request.query_params.get(name)
    try:
        return int(raw) if raw else 0
    except ValueError:
        raise KubeError(400, "BadRequest", f'{name}: Invalid value: "{raw}": must be an integer') from None


async def _json_object(request: Request) -> dict[str, Any]:
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise KubeError(400, "BadRequest", "the request body must be a JSON object")
    return body
