"""Adapters wired through real clients (openstacksdk, the kubernetes client) over HTTP: to the simulator,
and for the Kubernetes side also to a real kube-apiserver.

A test that uses ``kube_cluster`` runs once per backend (``[simulator]``, ``[kube-apiserver]``). A test that
also asks for ``simulator`` itself (directly or through ``client_config``) relies on what only the
simulator offers — fault injection, recorded API calls, watch-history compaction — and runs on it alone.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openstack.config
import openstack.connection
import pytest
from kubernetes import client

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_webhook.adapters.kubernetes import KubernetesNodeSource, api_client_for
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import OpenStackOptions, OpenStackSession
from landb_webhook.adapters.ownership import DEFAULT_MAX_BYTES, ConfigMapOwnershipStore
from landb_webhook.adapters.reflector import WatchOptions
from landb_webhook.metrics import Metrics
from landb_webhook.wiring import build_provider
from support import waiting
from support.clusters import KubeCluster, RealCluster, SimulatorCluster
from support.default_options import openstack_options, watch_options
from support.fake_time import FakeTime
from support.kube_apiserver import KubeApiServer
from support.provider_cluster import Cluster, settings_for, started

EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
CONFIGMAP = "landb-webhook-ownership"
WATCH_FIELDS = {field.name for field in dataclasses.fields(WatchOptions)}
OPENSTACK_FIELDS = {field.name for field in dataclasses.fields(OpenStackOptions)}


Eventually = Callable[..., Any]


@pytest.fixture
def eventually() -> Eventually:
    """support.waiting.eventually: the watch threads apply changes asynchronously, so tests wait for the
    visible effect, never for a fixed time."""
    return waiting.eventually


@pytest.fixture
def client_config(simulator: Any, tmp_path: Path) -> Any:
    return simulator.write_client_config(tmp_path)


LockServer = Callable[..., None]


@pytest.fixture
def lock_server(client_config: Any) -> LockServer:
    """``lock_server(id)`` / ``lock_server(id, locked=False)``: Nova's lock action as the project's member,
    through openstacksdk, as an operator locks a server before maintenance."""

    def lock(server_id: str, locked: bool = True, reason: str = "maintenance") -> None:
        loader = openstack.config.OpenStackConfig(
            config_files=[str(client_config.clouds_yaml)], load_envvars=False
        )
        region = loader.get_one(cloud=client_config.cloud_name)
        with openstack.connection.Connection(config=region) as conn:
            if locked:
                conn.compute.lock_server(server_id, locked_reason=reason)
            else:
                conn.compute.unlock_server(server_id)

    return lock


@pytest.fixture
def make_cluster(
    simulator: Simulator, sim_clients: ClientConfig, eventually: Eventually, lock_server: LockServer
) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(ingress_nodes, workers, clock=, seed=, **settings)``: a seeded simulator and the
    provider the composition root wires to it, its node cache synced; ``seed(nodes)`` adds to the
    cluster before the provider starts; ``clock`` (epoch seconds) is the provider's."""
    made: list[Cluster] = []

    def make(
        ingress_nodes: int = 3,
        workers: int = 1,
        clock: Callable[[], float] = time.time,
        seed: Callable[[list[str]], None] | None = None,
        **overrides: Any,
    ) -> Cluster:
        nodes = seed_cluster(simulator.state, ingress_nodes=ingress_nodes, workers=workers)
        if seed is not None:
            seed(nodes)
        metrics = Metrics.create(process_metrics=False)
        settings = settings_for(sim_clients, **overrides)
        provider, adapters = build_provider(settings, metrics, clock=clock)
        started(adapters)
        cluster = Cluster(
            simulator, provider, adapters, metrics, nodes, eventually, lock_server, settings, clock=clock
        )
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.adapters.close()


@pytest.fixture
def make_server_store(client_config: Any) -> Iterator[Callable[..., OpenStackServerStore]]:
    stores: list[OpenStackServerStore] = []

    def make(**options: Any) -> OpenStackServerStore:
        """Backoff sleeps are virtual unless the test passes its own ``clock`` and ``sleep``; ``options``
        mixes the store's arguments and OpenStackOptions fields; ``cloud`` names another credential of the
        simulator's clouds.yaml (``simulator-admin``...)."""
        fake = FakeTime()
        cloud = options.pop("cloud", client_config.cloud_name)
        calls = {name: options.pop(name) for name in OPENSTACK_FIELDS & options.keys()}
        options = {"clock": fake.monotonic, "sleep": fake.sleep, **options}
        store = OpenStackServerStore(
            OpenStackSession(
                cloud,
                clouds_yaml=client_config.clouds_yaml,
                options=openstack_options(**{"timeout": 3.0, **calls}),
                **options,
            )
        )
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def server_store(make_server_store: Callable[..., OpenStackServerStore]) -> OpenStackServerStore:
    return make_server_store()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kube_cluster" in metafunc.fixturenames:
        only_simulator = "simulator" in metafunc.fixturenames
        real = pytest.param("kube-apiserver", marks=pytest.mark.needs_tools("kube-tools"))
        backends = ["simulator"] if only_simulator else ["simulator", real]
        metafunc.parametrize("kube_cluster", backends, indirect=True)


@pytest.fixture
def kube_cluster(request: pytest.FixtureRequest) -> Iterator[KubeCluster]:
    """The cluster a test seeds and the adapters read (see the module docstring)."""
    if request.param == "simulator":
        simulator = request.getfixturevalue("simulator")
        yield SimulatorCluster(simulator, request.getfixturevalue("client_config").kubeconfig)
        return
    yield request.getfixturevalue("real_cluster")


@pytest.fixture
def real_cluster(kube_apiserver: KubeApiServer, tmp_path: Path) -> Iterator[RealCluster]:
    """A fresh namespace of the real API server, its ServiceAccount bound by deploy/rbac.yaml, no node."""
    cluster = RealCluster(kube_apiserver, tmp_path)
    cluster.reset()
    yield cluster
    cluster.reset()


@pytest.fixture
def kube_api_client(kube_cluster: KubeCluster) -> Iterator[client.ApiClient]:
    api_client = api_client_for(kube_cluster.kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture
def make_node_source(kube_api_client: client.ApiClient) -> Iterator[Callable[..., KubernetesNodeSource]]:
    sources: list[KubernetesNodeSource] = []

    def make(**options: Any) -> KubernetesNodeSource:
        """``options``: the source's arguments and WatchOptions fields, mixed."""
        timing = {name: options.pop(name) for name in WATCH_FIELDS & options.keys()}
        watch = watch_options(
            **{"request_timeout": 3.0, "backoff_initial": 0.05, "backoff_max": 0.5, **timing}
        )
        options = {"ingress_selector": "role=ingress", "exclude_label": EXCLUDE_LABEL, **options}
        source = KubernetesNodeSource(kube_api_client, watch=watch, **options)
        sources.append(source)
        return source

    yield make
    for source in sources:
        source.stop()


@pytest.fixture
def make_configmap_store(
    kube_api_client: client.ApiClient, kube_cluster: KubeCluster
) -> Iterator[Callable[..., ConfigMapOwnershipStore]]:
    """Stores of the cluster's namespace; ``options`` are the store's arguments and WatchOptions fields
    (its cache, when a test starts it); every store's cache is stopped at the end."""
    stores: list[ConfigMapOwnershipStore] = []

    def make(api: client.CoreV1Api | None = None, **options: Any) -> ConfigMapOwnershipStore:
        timing = {name: options.pop(name) for name in WATCH_FIELDS & options.keys()}
        small = options.get("max_bytes", DEFAULT_MAX_BYTES) < DEFAULT_MAX_BYTES
        if small and isinstance(kube_cluster, RealCluster):
            kube_cluster.grant_overflow_configmaps(CONFIGMAP, 64)  # many more than a real cluster fills
        watch = watch_options(
            **{"request_timeout": 3.0, "backoff_initial": 0.05, "backoff_max": 0.5, **timing}
        )
        options = {"namespace": kube_cluster.namespace, "name": CONFIGMAP, "request_timeout": 3.0, **options}
        store = ConfigMapOwnershipStore(api or client.CoreV1Api(kube_api_client), watch=watch, **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.stop()
