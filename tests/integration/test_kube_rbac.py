"""deploy/rbac.yaml on a real kube-apiserver: the webhook's ServiceAccount gets what the adapters use and is
refused the rest (the adapter tests marked ``[kube-apiserver]`` show the grants suffice); its ConfigMaps and
Lease by name. deploy/admission-policies.yaml on the same server: only that ServiceAccount writes the claims
(a forged claim is refused), it writes nothing else, and an Ingress asks for at most 50 names.

The real_cluster fixture's ServiceAccount is bound by deploy/rbac.yaml and the optional
deploy/rbac-ingress-pods.yaml; tests/integration/test_deploy.py checks the README's install, without it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from landb_webhook.adapters.events import KubernetesEventSink
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.adapters.ownership import MANAGED_BY_LABEL, MANAGED_BY_VALUE, ConfigMapOwnershipStore
from landb_webhook.backends import EventWriteFailed, KubeEvent, ObjectRef, UpstreamError
from landb_webhook.endpoint import Endpoint
from support.clusters import RealCluster
from support.default_options import UPSTREAM_TIMEOUT, watch_options
from support.kube_apiserver import KubeApiServer, admission_documents, tools_cache

Eventually = Callable[..., Any]
InstallPolicy = Callable[[str, Callable[[], object]], None]


@pytest.fixture
def webhook_api(real_cluster: RealCluster) -> Iterator[client.CoreV1Api]:
    """The Kubernetes API as the webhook sees it: its ServiceAccount token, nothing more."""
    api_client = api_client_for(real_cluster.kubeconfig)
    yield client.CoreV1Api(api_client)
    api_client.close()


def allowed(
    server: KubeApiServer,
    cluster: RealCluster,
    verb: str,
    resource: str,
    namespace: str,
    group: str = "",
    name: str = "",
) -> bool:
    """What the API server's authorizer answers for the webhook's ServiceAccount (``kubectl auth can-i``)."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{cluster.namespace}:{cluster.service_account}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{cluster.namespace}"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                resource=resource,
                namespace=namespace or None,
                group=group or None,
                name=name or None,
            ),
        )
    )
    answer = client.AuthorizationV1Api(server.admin).create_subject_access_review(review)
    return bool(answer.status.allowed)


CLAIMS = "landb-webhook-ownership"
STATE = "landb-webhook-ownership-state"
LEASE = "landb-webhook"
LEASES = "coordination.k8s.io"


@pytest.mark.parametrize(
    ("verb", "resource", "name"),
    [
        ("list", "nodes", ""),
        ("watch", "nodes", ""),
        ("list", "configmaps", ""),  # the ownership cache: a labelled list, no name to limit it by
        ("watch", "configmaps", ""),
        ("get", "configmaps", CLAIMS),
        ("update", "configmaps", CLAIMS),
        ("get", "configmaps", f"{CLAIMS}-3"),  # overflow
        ("update", "configmaps", f"{CLAIMS}-3"),
        ("get", "configmaps", STATE),
        ("update", "configmaps", STATE),
        ("create", "configmaps", ""),  # RBAC cannot name it: the admission policy does
        ("get", "leases", LEASE),
        ("update", "leases", LEASE),
        ("create", "leases", ""),
        ("list", "pods", ""),  # the ingress controller's pods: the optional deploy/rbac-ingress-pods.yaml
        ("watch", "pods", ""),
    ],
)
def test_what_the_adapters_use_is_granted(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster, verb: str, resource: str, name: str
) -> None:
    namespace = real_cluster.namespace if resource in ("configmaps", "leases") else ""  # cluster-wide
    group = LEASES if resource == "leases" else ""
    assert allowed(kube_apiserver, real_cluster, verb, resource, namespace, group, name)


@pytest.mark.parametrize(
    ("verb", "resource", "name"),
    [
        ("get", "configmaps", "someone-elses"),
        ("update", "configmaps", "someone-elses"),
        ("get", "configmaps", f"{CLAIMS}-4"),  # past the overflow deploy/rbac.yaml names
        ("update", "configmaps", "kube-root-ca.crt"),
        ("get", "configmaps", ""),  # no name: a get of any ConfigMap
        ("update", "configmaps", ""),
        ("get", "leases", "someone-elses"),
        ("update", "leases", "someone-elses"),
        ("list", "leases", ""),
        ("delete", "leases", LEASE),
        ("patch", "leases", LEASE),
    ],
)
def test_configmaps_and_leases_other_than_its_own_are_refused(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster, verb: str, resource: str, name: str
) -> None:
    group = LEASES if resource == "leases" else ""
    assert not allowed(kube_apiserver, real_cluster, verb, resource, real_cluster.namespace, group, name)


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
    store = ConfigMapOwnershipStore(
        webhook_api,
        namespace="kube-system",
        name="landb-webhook-ownership",
        request_timeout=UPSTREAM_TIMEOUT,
        watch=watch_options(),
    )
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
        sink = KubernetesEventSink(api_client, instance="landb-webhook-0", request_timeout=UPSTREAM_TIMEOUT)
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


# -- deploy/admission-policies.yaml ------------------------------------------------------------------------

POLICY_ACTIVE = 30.0
"""Seconds for a new admission policy to reach the API server's admission chain (its informer: about a
second on an idle machine), however loaded the machine."""
EDITOR = "namespace-editor"
"""Another ServiceAccount of the webhook's namespace, allowed by RBAC to write every ConfigMap and Lease
there: the user a forged claim would come from."""


@pytest.fixture
def admission_policy(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster, eventually: Eventually
) -> Iterator[InstallPolicy]:
    """``install(policy, probe)``: that policy of deploy/admission-policies.yaml, bound to the cluster's
    namespace, once ``probe`` (a dry-run write it refuses) is seen accepted before and refused after: in
    force. Deleted at the end (policies are cluster-wide)."""
    installed: list[dict[str, Any]] = []

    def install(policy: str, probe: Callable[[], object]) -> None:
        assert refusal(probe) is None, "the probe is refused before the policy"
        documents = admission_documents(policy, real_cluster.namespace, real_cluster.service_account)
        installed.extend(documents)
        kube_apiserver.apply(documents)
        eventually(lambda: refusal(probe), what=f"{policy} in force", timeout=POLICY_ACTIVE)

    yield install
    kube_apiserver.delete(reversed(installed))


@pytest.fixture
def editor_api(
    kube_apiserver: KubeApiServer, real_cluster: RealCluster, tmp_path: Path
) -> Iterator[client.ApiClient]:
    """The Kubernetes API as EDITOR: every write on ConfigMaps and Leases of the namespace."""
    namespace = real_cluster.namespace
    kube_apiserver.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": EDITOR, "namespace": namespace},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
                    {"apiGroups": [LEASES], "resources": ["leases"], "verbs": ["*"]},
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": EDITOR, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": EDITOR},
                "subjects": [{"kind": "ServiceAccount", "name": EDITOR, "namespace": namespace}],
            },
        ]
    )
    api_client = api_client_for(
        kube_apiserver.service_account_kubeconfig(namespace, EDITOR, tmp_path / "editor.kubeconfig")
    )
    yield api_client
    api_client.close()


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def refusal(write: Callable[[], object]) -> ApiException | None:
    """The API server's refusal of ``write``, or None when it was accepted."""
    try:
        write()
    except ApiException as refused:
        return refused
    return None


def forged_claim(owned: str) -> dict[str, Any]:
    """A ConfigMap of the claims' name and form claiming ``owned`` for owner ``thief``."""
    record = {
        "dnsName": f"a-{owned}",
        "recordType": "TXT",
        "targets": ['"heritage=external-dns,external-dns/owner=thief,external-dns/resource=ingress/b/x"'],
        "labels": {"ownedRecord": owned},
    }
    body = configmap(CLAIMS, {f"a-{owned}": json.dumps(record)})
    body["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    return body


def test_only_the_webhook_writes_its_claims_and_a_forged_claim_is_refused(
    real_cluster: RealCluster,
    admission_policy: InstallPolicy,
    editor_api: client.ApiClient,
) -> None:
    namespace = real_cluster.namespace
    editor = client.CoreV1Api(editor_api)
    forged = forged_claim("myapp.cern.ch")
    admission_policy(
        "landb-webhook-claims", lambda: editor.create_namespaced_config_map(namespace, forged, dry_run="All")
    )

    created = refusal(lambda: editor.create_namespaced_config_map(namespace, forged))
    assert created is not None and created.status == 403
    assert "only the landb-webhook ServiceAccount" in str(created.body)
    assert real_cluster.configmap(CLAIMS) is None

    # The webhook stores its claim under the policy; the editor can neither overwrite nor forge beside it.
    api_client = api_client_for(real_cluster.kubeconfig)
    try:
        store = ConfigMapOwnershipStore(
            client.CoreV1Api(api_client),
            namespace=namespace,
            name=CLAIMS,
            request_timeout=UPSTREAM_TIMEOUT,
            watch=watch_options(),
        )
        claim = Endpoint(
            "a-myapp.cern.ch",
            "TXT",
            ('"heritage=external-dns,external-dns/owner=my-cluster,external-dns/resource=ingress/a/myapp"',),
            labels=(("ownedRecord", "myapp.cern.ch"),),
        )
        store.apply([claim], [])
        assert store.records() == [claim]
    finally:
        api_client.close()
    stored = editor.read_namespaced_config_map(CLAIMS, namespace)
    stored.data = forged["data"]
    replaced = refusal(lambda: editor.replace_namespaced_config_map(CLAIMS, namespace, stored))
    overflow = refusal(
        lambda: editor.create_namespaced_config_map(
            namespace, {**forged_claim("x.cern.ch"), "metadata": {"name": f"{CLAIMS}-7"}}
        )
    )
    state = refusal(lambda: editor.create_namespaced_config_map(namespace, configmap(STATE, {})))
    lease = refusal(
        lambda: client.CoordinationV1Api(editor_api).create_namespaced_lease(
            namespace, {"metadata": {"name": LEASE}, "spec": {"holderIdentity": "thief"}}
        )
    )
    assert [getattr(answer, "status", None) for answer in (replaced, overflow, state, lease)] == [403] * 4
    assert "a-myapp.cern.ch" in (real_cluster.configmap(CLAIMS) or {}).get("data", {})

    # Anything else of the namespace is the editor's as before.
    assert (
        refusal(lambda: editor.create_namespaced_config_map(namespace, configmap("app-settings", {}))) is None
    )


def test_the_webhook_s_service_account_writes_no_other_configmap_or_lease(
    real_cluster: RealCluster, admission_policy: InstallPolicy
) -> None:
    """RBAC lets it create any ConfigMap and Lease of the namespace (create cannot be limited by name): the
    policy allows only its own names."""
    namespace = real_cluster.namespace
    api_client = api_client_for(real_cluster.kubeconfig)
    try:
        core = client.CoreV1Api(api_client)
        leases = client.CoordinationV1Api(api_client)
        other = configmap("app-settings", {"k": "v"})
        admission_policy(
            "landb-webhook-claims", lambda: core.create_namespaced_config_map(namespace, other, dry_run="All")
        )

        refused = refusal(lambda: core.create_namespaced_config_map(namespace, other))
        other_lease = refusal(
            lambda: leases.create_namespaced_lease(namespace, {"metadata": {"name": "someone-elses"}})
        )
        own_state = refusal(lambda: core.create_namespaced_config_map(namespace, configmap(STATE, {})))
        own_lease = refusal(lambda: leases.create_namespaced_lease(namespace, {"metadata": {"name": LEASE}}))
    finally:
        api_client.close()
    assert refused is not None and refused.status == 403
    assert "writes only its own configmaps" in str(refused.body)
    assert other_lease is not None and other_lease.status == 403
    assert (own_state, own_lease) == (None, None)


def ingress(name: str, hosts: int = 0, annotated: int = 0, tls: int = 0) -> dict[str, Any]:
    """An Ingress asking for ``hosts`` rule hosts, ``annotated`` names in the hostname annotation and
    ``tls`` TLS hosts."""
    spec: dict[str, Any] = {"rules": [{"host": f"h{i}.cern.ch"} for i in range(hosts)] or [{}]}
    if tls:
        spec["tls"] = [{"hosts": [f"t{i}.cern.ch" for i in range(tls)]}]
    annotations = {"external-dns.kubernetes.io/hostname": ",".join(f"a{i}.cern.ch" for i in range(annotated))}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "annotations": annotations if annotated else {}},
        "spec": spec,
    }


def test_an_ingress_asking_for_more_than_50_names_is_refused(
    kube_apiserver: KubeApiServer,
    real_cluster: RealCluster,
    admission_policy: InstallPolicy,
) -> None:
    namespace = real_cluster.namespace
    networking = client.NetworkingV1Api(kube_apiserver.admin)
    flood = ingress("flood", annotated=10_001)  # issue 36: one object stopping every loop
    admission_policy(
        "landb-webhook-hostname-cap",
        lambda: networking.create_namespaced_ingress(namespace, flood, dry_run="All"),
    )

    accepted = [
        refusal(lambda: networking.create_namespaced_ingress(namespace, ingress("rules", hosts=50))),
        refusal(lambda: networking.create_namespaced_ingress(namespace, ingress("mixed", 20, 20, 10))),
    ]
    refused = [
        refusal(lambda: networking.create_namespaced_ingress(namespace, flood)),
        refusal(lambda: networking.create_namespaced_ingress(namespace, ingress("rules51", hosts=51))),
        refusal(lambda: networking.create_namespaced_ingress(namespace, ingress("mixed51", 20, 20, 11))),
        refusal(
            lambda: networking.patch_namespaced_ingress(
                "mixed",
                namespace,
                {"metadata": {"annotations": {"external-dns.alpha.kubernetes.io/hostname": "x.cern.ch"}}},
            )
        ),
    ]
    assert accepted == [None, None]
    assert [getattr(answer, "status", None) for answer in refused] == [422] * 4
    assert "asks for 10001 DNS names; at most 50" in str(refused[0].body)


GATEWAY_API_CRDS = tools_cache() / "gateway-api"
"""Where the Gateway API's CRDs are kept (standard channel), when something has fetched them."""


def route_crd() -> dict[str, Any] | None:
    found = sorted(GATEWAY_API_CRDS.glob("v*/standard/gateway.networking.k8s.io_httproutes.yaml"))
    return yaml.safe_load(found[-1].read_text()) if found else None


def test_a_route_asking_for_more_than_50_names_is_refused(
    kube_apiserver: KubeApiServer,
    real_cluster: RealCluster,
    admission_policy: InstallPolicy,
    eventually: Eventually,
) -> None:
    crd = route_crd()
    if crd is None:
        pytest.skip(f"no Gateway API CRDs under {GATEWAY_API_CRDS}: the routes' part of the cap is untested")
    kube_apiserver.apply([crd])
    routes = client.CustomObjectsApi(kube_apiserver.admin)
    namespace = real_cluster.namespace

    def route(name: str, annotated: int) -> dict[str, Any]:
        names = ",".join(f"a{i}.cern.ch" for i in range(annotated))
        return {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": name, "annotations": {"external-dns.kubernetes.io/hostname": names}},
            "spec": {"hostnames": [f"h{i}.cern.ch" for i in range(16)]},  # the CRD's own maximum
        }

    def create(body: dict[str, Any], dry_run: str | None = None) -> object:
        return routes.create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "httproutes", body, dry_run=dry_run
        )

    eventually(
        lambda: refusal(lambda: create(route("probe", 0), "All")) is None, what="the HTTPRoute CRD served"
    )
    admission_policy("landb-webhook-hostname-cap", lambda: create(route("flood", 1000), "All"))

    accepted = refusal(lambda: create(route("fifty", 34)))
    refused = refusal(lambda: create(route("fifty-one", 35)))

    assert accepted is None
    assert refused is not None and refused.status == 422
    assert "asks for 51 DNS names; at most 50" in str(refused.body)


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
        sink = KubernetesEventSink(api_client, instance="landb-webhook-0", request_timeout=UPSTREAM_TIMEOUT)
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
