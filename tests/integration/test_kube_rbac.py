"""deploy/rbac.yaml on a real kube-apiserver: the webhook's ServiceAccount gets what the adapters use and is
refused the rest (the adapter tests marked ``[kube-apiserver]`` show the grants suffice)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.events import KubernetesEventSink
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.backends import EventWriteFailed, KubeEvent, ObjectRef, UpstreamError
from support.clusters import RealCluster
from support.kube_apiserver import KubeApiServer


@pytest.fixture
def webhook_api(real_cluster: RealCluster) -> Iterator[client.CoreV1Api]:
    """The Kubernetes API as the webhook sees it: its ServiceAccount token, nothing more."""
    api_client = api_client_for(real_cluster.kubeconfig)
    yield client.CoreV1Api(api_client)
    api_client.close()


def allowed(
    server: KubeApiServer, cluster: RealCluster, verb: str, resource: str, namespace: str, group: str = ""
) -> bool:
    """What the API server's authorizer answers for the webhook's ServiceAccount."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{cluster.namespace}:{cluster.service_account}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{cluster.namespace}"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=namespace or None, group=group or None
            ),
        )
    )
    answer = client.AuthorizationV1Api(server.admin).create_subject_access_review(review)
    return bool(answer.status.allowed)


@pytest.mark.parametrize(
    ("verb", "resource"),
    [
        ("list", "nodes"),
        ("watch", "nodes"),
        ("get", "configmaps"),
        ("list", "configmaps"),
        ("watch", "configmaps"),  # the ownership cache
        ("create", "configmaps"),
        ("update", "configmaps"),
        ("list", "pods"),  # the ingress controller's pods, with LANDB_INGRESS_POD_SELECTOR
        ("watch", "pods"),
    ],
)
def test_what_the_adapters_use_is_granted(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster, verb: str, resource: str
) -> None:
    namespace = real_cluster.namespace if resource == "configmaps" else ""  # the rest: cluster-wide
    assert allowed(kube_apiserver, real_cluster, verb, resource, namespace)


@pytest.mark.parametrize(
    ("verb", "resource", "where"),
    [
        ("get", "nodes", "cluster"),
        ("create", "nodes", "cluster"),
        ("update", "nodes", "cluster"),
        ("patch", "nodes", "cluster"),
        ("delete", "nodes", "cluster"),
        ("patch", "configmaps", "own"),
        ("delete", "configmaps", "own"),
        ("get", "secrets", "own"),
        ("get", "pods", "own"),
        ("create", "pods", "own"),
        ("delete", "pods", "own"),
        ("list", "services", "own"),
        ("list", "configmaps", "other"),
        ("watch", "configmaps", "other"),
        ("create", "configmaps", "other"),
        ("list", "configmaps", "cluster"),
        ("watch", "configmaps", "cluster"),
    ],
)
def test_everything_else_is_refused(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster, verb: str, resource: str, where: str
) -> None:
    namespace = {"cluster": "", "own": real_cluster.namespace, "other": "kube-system"}[where]
    assert not allowed(kube_apiserver, real_cluster, verb, resource, namespace)


def test_a_refused_call_is_a_403_from_the_real_api_server(
    real_cluster: RealCluster, webhook_api: client.CoreV1Api
) -> None:
    real_cluster.add_node("cluster-node-0", labels={"role": "ingress"})
    attempts: list[Callable[[], object]] = [
        lambda: webhook_api.patch_node("cluster-node-0", {"metadata": {"labels": {"role": "worker"}}}),
        lambda: webhook_api.list_namespaced_secret(real_cluster.namespace),
        lambda: webhook_api.list_namespaced_config_map("kube-system"),
    ]
    for attempt in attempts:
        with pytest.raises(ApiException) as refused:
            attempt()
        assert refused.value.status == 403
    assert [node.metadata.name for node in webhook_api.list_node().items] == ["cluster-node-0"]


def test_an_ownership_store_outside_its_namespace_fails_with_a_clear_non_retryable_error(
    webhook_api: client.CoreV1Api,
) -> None:
    store = ConfigMapOwnershipStore(webhook_api, namespace="kube-system", name="landb-webhook-ownership")
    with pytest.raises(UpstreamError) as raised:
        store.records()
    assert (raised.value.upstream, raised.value.retryable) == ("kubernetes", False)
    assert "403" in raised.value.reason


EVENTS_GROUP = "events.k8s.io"
INGRESS_GROUP = "networking.k8s.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"


@pytest.mark.parametrize(
    ("verb", "resource", "group", "granted"),
    [
        ("create", "events", EVENTS_GROUP, True),  # a new event
        ("patch", "events", EVENTS_GROUP, True),  # a repeat: its series
        ("get", "ingresses", INGRESS_GROUP, True),  # the object's uid
        ("get", "services", "", True),
        ("update", "events", EVENTS_GROUP, False),
        ("delete", "events", EVENTS_GROUP, False),
        ("list", "events", EVENTS_GROUP, False),
        ("create", "events", "", False),  # the core v1 API is not used
        ("list", "ingresses", INGRESS_GROUP, False),
        ("watch", "ingresses", INGRESS_GROUP, False),
        ("update", "ingresses", INGRESS_GROUP, False),
        ("patch", "services", "", False),
        ("get", "httproutes", GATEWAY_GROUP, True),  # a route's uid (external-dns' gateway-* sources)
        ("get", "grpcroutes", GATEWAY_GROUP, True),
        ("get", "tlsroutes", GATEWAY_GROUP, True),
        ("list", "httproutes", GATEWAY_GROUP, False),
        ("watch", "grpcroutes", GATEWAY_GROUP, False),
        ("update", "httproutes", GATEWAY_GROUP, False),
        ("get", "gateways", GATEWAY_GROUP, False),
        ("get", "tcproutes", GATEWAY_GROUP, False),
    ],
)
def test_events_are_granted_exactly_create_and_patch_and_their_objects_get(
    kube_apiserver: KubeApiServer,
    real_cluster: RealCluster,
    verb: str,
    resource: str,
    group: str,
    granted: bool,
) -> None:
    """In any namespace an Ingress, Service or route lives in (events sit beside their object)."""
    assert allowed(kube_apiserver, real_cluster, verb, resource, "team-a", group) is granted


def new_event(regarding: ObjectRef, reason: str, note: str, *, type_: str = "Normal") -> KubeEvent:
    """A new event ``myapp.1`` (count 1) about ``regarding``."""
    return KubeEvent(
        name="myapp.1",
        regarding=regarding,
        type=type_,
        reason=reason,
        action="Write",
        note=note,
        first_at=1_800_000_000.25,  # kubernetes 37 re-encodes eventTime: a whole second loses its
        # microseconds and the API server refuses it (400); see adapters/events.py
        last_at=1_800_000_000.25,
        count=1,
    )


def test_the_event_sink_writes_and_updates_an_event_on_an_ingress_under_deploy_rbac(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster
) -> None:
    """The grants suffice: the adapter, as the webhook's ServiceAccount, creates an event regarding the
    Ingress with its uid and PATCHes its series; the admin reads both back."""
    admin_networking = client.NetworkingV1Api(kube_apiserver.admin)
    ingress = admin_networking.create_namespaced_ingress(
        real_cluster.namespace,
        {
            "metadata": {"name": "myapp"},
            "spec": {"rules": [{"host": "myapp.cern.ch"}]},
        },
    )
    api_client = api_client_for(real_cluster.kubeconfig)
    try:
        sink = KubernetesEventSink(api_client, instance="landb-webhook-0")
        regarding = ObjectRef("Ingress", real_cluster.namespace, "myapp")
        first = new_event(regarding, "Refused", "myapp.cern.ch not published: held by hand", type_="Warning")
        sink.write(first)
        sink.write(replace(first, count=2, last_at=1_800_000_060.5))
        with pytest.raises(EventWriteFailed) as gone:
            sink.write(replace(first, regarding=ObjectRef("Ingress", real_cluster.namespace, "nothing")))
        assert gone.value.kind == "object_gone"
    finally:
        api_client.close()
    event = client.EventsV1Api(kube_apiserver.admin).read_namespaced_event("myapp.1", real_cluster.namespace)
    assert event.regarding.uid == ingress.metadata.uid
    assert (event.reporting_controller, event.reporting_instance) == ("landb-webhook", "landb-webhook-0")
    assert event.series.count == 2


def httproute(name: str, host: str) -> dict[str, object]:
    """An HTTPRoute as an application team writes it, attached to a Gateway ``nodes``."""
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": "nodes"}], "hostnames": [host]},
    }


def test_the_event_sink_writes_on_the_httproute_alive_now_under_deploy_rbac(
    gateway_api: KubeApiServer, real_cluster: RealCluster
) -> None:
    """A route's event names it by group, version and uid; a route deleted and created again under the same
    name gets its next event by its new uid once the sink forgets the old one, and a deleted route none."""
    routes = client.CustomObjectsApi(gateway_api.admin)
    namespace = real_cluster.namespace

    def create() -> str:
        created = routes.create_namespaced_custom_object(
            GATEWAY_GROUP, "v1", namespace, "httproutes", httproute("myapp", "myapp.cern.ch")
        )
        return str(created["metadata"]["uid"])

    def delete() -> None:
        routes.delete_namespaced_custom_object(GATEWAY_GROUP, "v1", namespace, "httproutes", "myapp")

    first_uid = create()
    api_client = api_client_for(real_cluster.kubeconfig)
    regarding = ObjectRef("HTTPRoute", namespace, "myapp")
    written = new_event(regarding, "Written", "myapp.cern.ch written on 3 ingress nodes")
    try:
        sink = KubernetesEventSink(api_client, instance="landb-webhook-0")
        sink.write(written)
        delete()
        second_uid = create()
        sink.forget(regarding)  # the emitter's word: the object behind the name may have changed
        sink.write(replace(written, name="myapp.2", reason="OnTheAir"))
        delete()
        sink.forget(regarding)
        with pytest.raises(EventWriteFailed) as gone:
            sink.write(replace(written, name="myapp.3", reason="Removed"))
        assert gone.value.kind == "object_gone"
    finally:
        api_client.close()
    events = client.EventsV1Api(gateway_api.admin)
    first, second = (events.read_namespaced_event(name, namespace) for name in ("myapp.1", "myapp.2"))
    assert (first.regarding.api_version, first.regarding.kind) == (f"{GATEWAY_GROUP}/v1", "HTTPRoute")
    assert (first.regarding.uid, second.regarding.uid) == (first_uid, second_uid)
    assert [e.metadata.name for e in events.list_namespaced_event(namespace).items] == ["myapp.1", "myapp.2"]
