"""backends.EventSink on the Kubernetes API: events.k8s.io/v1 Events ``regarding`` an Ingress, a Service or a
Gateway API route (HTTPRoute, GRPCRoute, TLSRoute).

``kubectl describe httproute myapp`` lists the events whose object reference carries the route's uid, so
each object's uid is read first (one GET of the object, cached: ``UID_CACHE`` objects, the least recently
used forgotten, and any the emitter says may have changed (``forget``); a 404 is the object gone). A new
event is one POST; a repeat is one merge PATCH of its ``series`` (count, lastObservedTime), as client-go's
events.k8s.io recorder does. The reporting controller is ``landb-webhook``, the reporting instance the
pod's name. RBAC: create and patch on events.k8s.io events, get on networking.k8s.io ingresses, on
services and on gateway.networking.k8s.io httproutes, grpcroutes and tlsroutes (deploy/rbac.yaml).
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.kubeclient import json_body, release_failed_response, upstream_error
from landb_webhook.adapters.lease import micro_time as lease_micro_time
from landb_webhook.backends import EventWriteFailed, KubeEvent, ObjectRef

REPORTING_CONTROLLER = "landb-webhook"
UID_CACHE = 4096
GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_VERSION = "v1"
"""The routes' served version in the Gateway API standard channel (v1.6.1: TLSRoute too; v1alpha2 and
v1alpha3 of TLSRoute are no longer served there)."""
GATEWAY_ROUTES = {"HTTPRoute": "httproutes", "GRPCRoute": "grpcroutes", "TLSRoute": "tlsroutes"}
"""Route kind -> its resource (plural), the kinds external-dns' gateway-* sources name in ``resource``."""
API_VERSIONS = {
    "Ingress": "networking.k8s.io/v1",
    "Service": "v1",
    **{kind: f"{GATEWAY_GROUP}/{GATEWAY_VERSION}" for kind in GATEWAY_ROUTES},
}
_MAX_INSTANCE = 128
_FAILURE_KINDS = {403: "forbidden", 401: "forbidden", 422: "invalid", 400: "invalid"}


def micro_time(epoch: float) -> str:
    """``2026-11-27T09:15:55.123456Z``: the MicroTime events.k8s.io/v1 wants. Known limit: the kubernetes
    client 37 turns the body's times into datetimes and back, and a time on a whole second comes out
    without microseconds, which the API server refuses (400, counted ``invalid``): one event in a million."""
    return lease_micro_time(datetime.fromtimestamp(epoch, UTC))


class KubernetesEventSink:
    def __init__(self, api_client: client.ApiClient, *, instance: str, request_timeout: float) -> None:
        """``instance``: the reporting instance (the pod's name); ``request_timeout``: seconds one request
        may take (LANDB_UPSTREAM_TIMEOUT)."""
        self._events = client.EventsV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._networking = client.NetworkingV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._instance = instance[:_MAX_INSTANCE]
        self._timeout = request_timeout
        self._uids: OrderedDict[ObjectRef, str] = OrderedDict()

    def write(self, event: KubeEvent) -> None:
        if event.count == 1:
            self._create(event)
        else:
            self._update_series(event)

    def forget(self, regarding: ObjectRef) -> None:
        self._uids.pop(regarding, None)

    def _create(self, event: KubeEvent) -> None:
        regarding = event.regarding
        uid = self._uid(regarding)
        body: Any = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": regarding.namespace},
            "eventTime": micro_time(event.first_at),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": event.action,
            "reason": event.reason,
            "note": event.note,
            "type": event.type,
            "regarding": {
                "apiVersion": API_VERSIONS[regarding.kind],
                "kind": regarding.kind,
                "namespace": regarding.namespace,
                "name": regarding.name,
                "uid": uid,
            },
        }
        self._call(
            "create the event",
            lambda: self._events.create_namespaced_event(
                regarding.namespace, body, _request_timeout=self._timeout, _preload_content=False
            ),
        )

    def _update_series(self, event: KubeEvent) -> None:
        patch = {"series": {"count": event.count, "lastObservedTime": micro_time(event.last_at)}}
        self._call(
            "update the event's series",
            lambda: self._events.patch_namespaced_event(
                event.name,
                event.regarding.namespace,
                patch,
                _request_timeout=self._timeout,
                _preload_content=False,
            ),
            gone="event_gone",
        )

    def _uid(self, regarding: ObjectRef) -> str:
        uid = self._uids.get(regarding)
        if uid is not None:
            self._uids.move_to_end(regarding)
            return uid
        found = self._call(
            f"read {regarding.kind} {regarding.namespace}/{regarding.name}",
            lambda: self._read(regarding),
            gone="object_gone",
        )
        uid = str(((found or {}).get("metadata") or {}).get("uid") or "")
        self._uids[regarding] = uid
        while len(self._uids) > UID_CACHE:
            self._uids.popitem(last=False)
        return uid

    def _read(self, regarding: ObjectRef) -> Any:
        """The object's GET (undecoded)."""
        name, namespace = regarding.name, regarding.namespace
        options: Any = {"_request_timeout": self._timeout, "_preload_content": False}
        if regarding.kind == "Ingress":
            return self._networking.read_namespaced_ingress(name, namespace, **options)
        if regarding.kind == "Service":
            return self._core.read_namespaced_service(name, namespace, **options)
        plural = GATEWAY_ROUTES[regarding.kind]
        return self._custom.get_namespaced_custom_object(
            GATEWAY_GROUP, GATEWAY_VERSION, namespace, plural, name, **options
        )

    def _call(self, action: str, call: Any, *, gone: str = "object_gone") -> Any:
        """The decoded answer of ``call``; every failure an EventWriteFailed of its kind."""
        try:
            return json_body(call())
        except ApiException as exc:
            release_failed_response(exc)
            status = exc.status or 0
            kind = gone if status == 404 else _FAILURE_KINDS.get(status, "unavailable")
            raise EventWriteFailed(kind, upstream_error(exc, action).reason) from None
        except Exception as exc:  # connection refused, timeouts: the API is not there
            raise EventWriteFailed("unavailable", upstream_error(exc, action).reason) from None
