"""adapters/state.py: the webhook's state ConfigMap, on the simulator and on a real kube-apiserver (as the
webhook's ServiceAccount bound by deploy/rbac.yaml)."""

from __future__ import annotations

import pytest
from kubernetes import client

from landb_webhook.adapters.ownership import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from landb_webhook.adapters.state import ConfigMapStateStore
from landb_webhook.backends import UpstreamError
from support.clusters import KubeCluster
from support.default_options import UPSTREAM_TIMEOUT

NAME = "landb-webhook-ownership-state"


def store_of(api_client: client.ApiClient, cluster: KubeCluster) -> ConfigMapStateStore:
    return ConfigMapStateStore(
        client.CoreV1Api(api_client), namespace=cluster.namespace, name=NAME, request_timeout=UPSTREAM_TIMEOUT
    )


def test_what_is_saved_is_loaded_back_and_a_save_replaces_it(
    kube_cluster: KubeCluster, kube_api_client: client.ApiClient
) -> None:
    store = store_of(kube_api_client, kube_cluster)
    assert store.load() == {}
    assert kube_cluster.configmap(NAME) is None

    store.save({"carrying-servers": '{"a":{"node":"n","internalIPs":[]}}', "removal-window": "[]"})
    store.save({"carrying-servers": "{}", "removal-window": "[]"})

    assert store.load() == {"carrying-servers": "{}", "removal-window": "[]"}
    configmap = kube_cluster.configmap(NAME)
    assert configmap is not None
    assert configmap["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE


def test_a_same_named_configmap_of_someone_else_is_neither_used_nor_overwritten(
    kube_cluster: KubeCluster, kube_api_client: client.ApiClient
) -> None:
    kube_cluster.put_configmap(NAME, {"someone": "else's data"})
    store = store_of(kube_api_client, kube_cluster)
    for attempt in (store.load, lambda: store.save({"removal-window": "[]"})):
        with pytest.raises(UpstreamError, match="without label") as raised:
            attempt()
        assert raised.value.retryable is False
    configmap = kube_cluster.configmap(NAME)
    assert configmap is not None
    assert configmap["data"] == {"someone": "else's data"}


def test_a_save_over_someone_elses_newer_write_reads_again_and_goes_over_it(
    kube_cluster: KubeCluster, kube_api_client: client.ApiClient
) -> None:
    """The writer's own knowledge is the truth: a 409 costs a fresh read, never the write."""
    ours, other = store_of(kube_api_client, kube_cluster), store_of(kube_api_client, kube_cluster)
    ours.save({"removal-window": "[]"})
    other.load()
    other.save({"removal-window": "[[1, 2, [], []]]", "extra": "x"})

    ours.save({"removal-window": "[]", "carrying-servers": "{}"})

    assert other.load() == {"removal-window": "[]", "carrying-servers": "{}"}
