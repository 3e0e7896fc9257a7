"""The composition root: settings in, a provider wired to real adapters out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import structlog
from kubernetes import client

from landb_webhook.adapters import cloudconf
from landb_webhook.adapters.kubeclient import secret_values as kube_secret_values
from landb_webhook.adapters.kubernetes import UPSTREAM as KUBERNETES
from landb_webhook.adapters.kubernetes import KubernetesNodeSource, api_client_for, json_body, upstream_error
from landb_webhook.adapters.lease import LeaseElector
from landb_webhook.adapters.memory import InMemoryOwnershipStore, InMemoryStateStore
from landb_webhook.adapters.openstack import OpenStackServerStore
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.adapters.state import ConfigMapStateStore
from landb_webhook.config import SettingError, Settings
from landb_webhook.logs import register_secrets
from landb_webhook.metrics import Metrics
from landb_webhook.ports import OwnershipStore, StateStore, UpstreamError
from landb_webhook.provider import LandbProvider, ProviderOptions, RemovalGuard
from landb_webhook.provider.health import HealthPolicy

log = structlog.get_logger(__name__)


@dataclass
class Resources:
    """What must be stopped when the service stops: the watches and the OpenStack session."""

    nodes: KubernetesNodeSource
    servers: OpenStackServerStore
    ownership: OwnershipStore
    lease: LeaseElector | None = None
    closed: bool = field(default=False)

    def close(self) -> None:
        """Called once the last apply has finished: the lease is released last, for the next replica."""
        if self.closed:
            return
        self.closed = True
        if self.lease is not None:
            self.lease.stop()
        self.nodes.stop()
        if isinstance(self.ownership, ConfigMapOwnershipStore):
            self.ownership.stop()
        self.servers.close()


def health_policy(settings: Settings) -> HealthPolicy:
    return HealthPolicy(
        grace_seconds=settings.node_grace_period, cordoned_carry=settings.cordoned_nodes_carry
    )


def provider_options(settings: Settings) -> ProviderOptions:
    return ProviderOptions(
        dns_domain=settings.dns_domain,
        domain_filter=tuple(settings.domain_filter),
        registry=settings.registry,
        index_floor=settings.index_floor,
        max_value_length=settings.max_value_length,
        write_concurrency=settings.write_concurrency,
        inventory_max_age=settings.inventory_max_age,
        dry_run=settings.dry_run,
        health=health_policy(settings),
        adopt_existing=settings.adopt_existing,
        removal_guard=RemovalGuard(
            max_share=settings.max_removal_share,
            min_count=settings.max_removal_min_count,
            allow=settings.allow_mass_removal,
            window_seconds=settings.removal_window,
        ),
        write_fence_margin=settings.upstream_timeout,
    )


@dataclass(frozen=True)
class Ports:
    """The adapters behind the provider's ports, as configured by the settings."""

    nodes: KubernetesNodeSource
    servers: OpenStackServerStore
    ownership: OwnershipStore
    state: StateStore
    """Where what must survive a restart is kept: beside the ownership ConfigMaps, or in memory."""


def build_ports(
    settings: Settings, *, metrics: Metrics | None = None, clock: Callable[[], float] = time.time
) -> tuple[Ports, Resources]:
    """Wire the adapters. Makes no remote call: the node watch is not started and OpenStack
    authenticates on first use. ``clock`` (epoch seconds) is what node grace periods are measured with;
    ``metrics``, when given, count the OpenStack calls."""
    if settings.os_cloud_conf is not None:
        try:  # a broken file stops start-up, not Records
            cloudconf.connection_options(settings.os_cloud_conf)
        except cloudconf.CloudConfError as error:
            raise SettingError("os_cloud_conf", str(error)) from None
    try:
        api_client = api_client_for(settings.kubeconfig)
    except Exception as error:  # only local files and the environment are read here
        where = settings.kubeconfig or "in-cluster service account, then $KUBECONFIG"
        raise SettingError("kubeconfig", f"no usable Kubernetes configuration ({where}): {error}") from None
    if settings.os_cloud_conf is None and (problem := cloudconf.clouds_yaml_problem(settings.os_cloud)):
        raise SettingError("os_cloud", problem)
    nodes = KubernetesNodeSource.from_settings(settings, api_client, wall_clock=clock)
    servers = OpenStackServerStore.from_settings(settings, metrics=metrics)
    register_secrets([*servers.secret_values(), *kube_secret_values(api_client)])
    ownership: OwnershipStore
    state: StateStore
    if settings.ownership_store == "configmap":
        ownership = ConfigMapOwnershipStore.from_settings(settings, api_client)
        state = ConfigMapStateStore.from_settings(settings, api_client)
    else:
        ownership = InMemoryOwnershipStore()
        state = InMemoryStateStore()
    ports = Ports(nodes, servers, ownership, state)
    return ports, Resources(nodes=nodes, servers=servers, ownership=ownership)


def build_provider(
    settings: Settings, metrics: Metrics, *, clock: Callable[[], float] = time.time
) -> tuple[LandbProvider, Resources]:
    """The provider on the configured adapters; the node watch starts in the background, so
    negotiation is answered at once."""
    ports, resources = build_ports(settings, metrics=metrics, clock=clock)
    if settings.registry == "noop":
        log.warning(
            "registry noop: every landb-alias on the cluster's nodes counts as managed",
            consequence="with external-dns --policy=sync, aliases set by hand on these nodes will be removed",
        )
    lease = None
    if settings.leader_election:
        lease = LeaseElector.from_settings(settings, api_client_for(settings.kubeconfig))
        resources.lease = lease
    provider = LandbProvider(
        ports.nodes,
        ports.servers,
        ports.ownership,
        provider_options(settings),
        metrics,
        clock=clock,
        writer_lease=lease,
        state=ports.state,
    )
    metrics.watch(
        writer_lease_held=(lambda: True) if lease is None else lambda: lease.held(wait=0),
        node_cache_age=ports.nodes.cache_age,
    )
    ports.nodes.start()
    if isinstance(ports.ownership, ConfigMapOwnershipStore):
        ports.ownership.start()  # the one-shot commands (connected_ports) read the claims fresh instead
    if lease is not None:
        lease.start()
        log.info("leader election on", lease=f"{lease.namespace}/{lease.name}", identity=lease.identity)
    return provider, resources


def ask_openstack_once(resources: Resources) -> threading.Thread:
    """One cheap call (the metadata quota) in the background at start-up: /readyz says ready only once
    OpenStack has answered, and this gets that answer, or the reason, before external-dns' first loop."""

    def ask() -> None:
        try:
            quota = resources.servers.max_metadata_items()
        except UpstreamError as error:
            log.error(
                "OpenStack did not answer at start-up: not ready until a call succeeds",
                error=str(error),
                hint="check the credentials (LANDB_OS_CLOUD or LANDB_OS_CLOUD_CONF) and that Keystone and "
                "Nova are reachable from the pod",
            )
        else:
            log.info("OpenStack answered", metadata_key_quota=quota)

    thread = threading.Thread(target=ask, name="landb-openstack-first-call", daemon=True)
    thread.start()
    return thread


def _reach_kubernetes(settings: Settings) -> str:
    """One list of one node, so that a one-shot command stops at once, naming the API server, when it
    cannot be reached or refuses (rather than after the node watch's retries); returns its URL."""
    api_client = api_client_for(settings.kubeconfig)
    host = str(api_client.configuration.host)
    try:
        json_body(
            client.CoreV1Api(api_client).list_node(
                limit=1, _request_timeout=settings.upstream_timeout, _preload_content=False
            )
        )
    except Exception as error:
        raise upstream_error(error, f"list nodes at {host}") from None
    finally:
        api_client.close()  # type: ignore[no-untyped-call]
    return host


@contextmanager
def connected_ports(settings: Settings, *, sync_timeout: float) -> Iterator[Ports]:
    """The adapters for a one-shot command, with the node inventory listed once; stopped on exit.

    Raises UpstreamError when the node list does not arrive within ``sync_timeout`` seconds.
    """
    ports, resources = build_ports(settings)
    try:
        host = _reach_kubernetes(settings)
        ports.nodes.start()
        if not ports.nodes.wait_synced(sync_timeout):
            raise UpstreamError(
                KUBERNETES, f"the node list from {host} did not arrive within {sync_timeout:g} s"
            )
        yield ports
    finally:
        resources.close()
