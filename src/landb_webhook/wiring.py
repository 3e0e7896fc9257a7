"""The composition root: settings in, a provider wired to real adapters out.

The only module that reads Settings for the adapters: they take plain arguments, and know nothing of
how the service is configured.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from landb_webhook.adapters import cloudconf
from landb_webhook.adapters.dns import DnsResolver
from landb_webhook.adapters.events import KubernetesEventSink
from landb_webhook.adapters.kubeclient import (
    ApiClient,
    Namespace,
    coordination_api,
    core_api,
    current_namespace,
)
from landb_webhook.adapters.kubeclient import secret_values as kube_secret_values
from landb_webhook.adapters.kubeclient import verifies_tls as kube_verifies_tls
from landb_webhook.adapters.kubernetes import UPSTREAM as KUBERNETES
from landb_webhook.adapters.kubernetes import KubernetesNodeSource, api_client_for, list_one_node
from landb_webhook.adapters.lease import LeaseElector, default_identity
from landb_webhook.adapters.memory import InMemoryOwnershipStore, InMemoryStateStore
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.octavia import ABSENT, OctaviaLoadBalancers
from landb_webhook.adapters.openstack import OpenStackOptions, OpenStackSession
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore
from landb_webhook.adapters.reflector import WatchOptions
from landb_webhook.adapters.retry import RetryPolicy
from landb_webhook.adapters.state import STATE_SUFFIX, ConfigMapStateStore
from landb_webhook.backends import NameLookup, OwnershipStore, Ports, StateStore, UpstreamError
from landb_webhook.config import ENV_PREFIX, SettingError, Settings, flag_and_variable, parse_resolver
from landb_webhook.landb.name_policy import NamePolicy
from landb_webhook.logs import register_secrets
from landb_webhook.metrics import Metrics
from landb_webhook.provider import LandbProvider, ProviderOptions, RemovalGuard
from landb_webhook.provider.read.health import HealthPolicy
from landb_webhook.provider.status.reader import published_in
from landb_webhook.provider.status.values import ClusterStatus
from landb_webhook.provider.watch.dns_watch import DnsCheck, DnsWatch, DnsWatchOptions, ask_once
from landb_webhook.provider.watch.event_emitter import EventEmitter
from landb_webhook.provider.watch.publications import STATE_KEY, PublicationLog

log = structlog.get_logger(__name__)


@dataclass
class Adapters:
    """The adapters the settings configure, held by their concrete types, and the threads started beside
    them. Distinct from backends.Ports, which hands the provider the same objects by their Protocols: the
    start-up and shut-down work here (the node and claim watches, the first OpenStack call, the lease, the
    DNS watch, the Events) needs what the Protocols do not offer."""

    nodes: KubernetesNodeSource
    servers: OpenStackServerStore
    ownership: OwnershipStore
    state: StateStore
    """Where what must survive a restart is kept: beside the ownership ConfigMaps, or in memory."""
    load_balancers: OctaviaLoadBalancers | None = None
    """The project's Octavia load balancers, on Nova's OpenStack session; None: LANDB_LOADBALANCERS off."""
    names: NameLookup | None = None
    """DNS, asked before a name's first write (the DNS watch's resolvers); None: LANDB_DNS_WATCH=false."""
    lease: LeaseElector | None = None
    """The writer Lease; None: LANDB_LEADER_ELECTION=false, or a one-shot command (which never writes)."""
    published: PublicationLog = field(default_factory=PublicationLog)
    """What the provider publishes, for the DNS watcher."""
    dns_watch: DnsWatch | None = None
    events: EventEmitter | None = None
    """The Kubernetes Events of the names' objects; None: LANDB_EVENTS=false."""
    closed: bool = field(default=False)

    def ports(self) -> Ports:
        """The same adapters as the provider and ``status`` see them: by their Protocols, passed whole."""
        return Ports(
            self.nodes,
            self.servers,
            self.ownership,
            self.state,
            self.load_balancers,
            writer_lease=self.lease,
            names=self.names,
        )

    def close(self) -> None:
        """Called once the last apply has finished: the lease is released last, for the next replica."""
        if self.closed:
            return
        self.closed = True
        if self.dns_watch is not None:
            self.dns_watch.stop()
        if self.events is not None:
            self.events.stop()
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
        registry=settings.external_dns_registry,
        index_floor=settings.index_floor,
        max_value_length=settings.max_value_length,
        reserved_metadata_keys=settings.reserved_metadata_keys,
        max_published_per_namespace=settings.max_published_per_namespace,
        write_concurrency=settings.write_concurrency,
        inventory_max_age=settings.inventory_max_age,
        dry_run=settings.dry_run,
        health=health_policy(settings),
        adopt_existing=settings.adopt_existing,
        txt_owner_id=settings.txt_owner_id,
        name_policy=NamePolicy.parse(settings.name_policy, settings.reserved_names),
        removal_guard=RemovalGuard(
            max_share=settings.max_removal_share,
            min_count=settings.max_removal_min_count,
            allow=settings.allow_mass_removal,
            window_seconds=settings.removal_window,
        ),
        write_fence_margin=settings.upstream_timeout,
        takeover_names=frozenset(settings.takeover_names),
        max_request_body=settings.max_request_body,
        max_names_per_resource=settings.max_names_per_resource,
        max_names_per_namespace=settings.max_names_per_namespace,
        shared_load_balancers=frozenset(settings.shared_load_balancers),
        ingress_selector=settings.ingress_selector,
    )


# -- each adapter from the settings ---------------------------------------------------------------


def watch_options(settings: Settings, **overrides: Any) -> WatchOptions:
    """How the node and ownership caches list and watch; ``overrides`` are fields settings do not cover
    (a test's clock, watch period)."""
    configured = WatchOptions(
        request_timeout=settings.upstream_timeout, max_staleness=settings.node_cache_max_age
    )
    return replace(configured, **overrides)


def node_source(
    settings: Settings,
    api_client: ApiClient,
    *,
    wall_clock: Callable[[], float] = time.time,
    **watch_overrides: Any,
) -> KubernetesNodeSource:
    """``wall_clock`` (epoch seconds) must be the one the provider measures grace periods with."""
    return KubernetesNodeSource(
        api_client,
        ingress_selector=settings.ingress_selector,
        exclude_label=settings.exclude_label,
        ingress_pod_selector=settings.ingress_pod_selector,
        ingress_pod_namespace=settings.ingress_pod_namespace,
        watch=watch_options(settings, **watch_overrides),
        wall_clock=wall_clock,
    )


def server_store(
    settings: Settings, *, clouds_yaml: Path | None = None, metrics: Metrics | None = None, **injected: Any
) -> OpenStackServerStore:
    """Nova on an OpenStack session of its own (build_adapters builds Octavia on the same session)."""
    return OpenStackServerStore(
        openstack_session(settings, clouds_yaml=clouds_yaml, metrics=metrics, **injected)
    )


def openstack_session(
    settings: Settings, *, clouds_yaml: Path | None = None, metrics: Metrics | None = None, **injected: Any
) -> OpenStackSession:
    """``injected``: constructor arguments settings do not cover (a test's clock and sleeper)."""
    return OpenStackSession(
        settings.os_cloud,
        clouds_yaml=clouds_yaml,
        cloud_conf=settings.os_cloud_conf,
        cacert=settings.os_cacert,
        options=openstack_options(settings),
        metrics=metrics,
        **injected,
    )


def openstack_options(settings: Settings) -> OpenStackOptions:
    """How the OpenStack session times and retries its calls, and bounds Nova's."""
    return OpenStackOptions(
        timeout=settings.upstream_timeout,
        retry=RetryPolicy(
            transient_retries=settings.upstream_retries, conflict_retries=settings.conflict_retries
        ),
        budget=settings.request_timeout,
    )


def ownership_namespace(settings: Settings) -> Namespace:
    """The namespace of the ownership ConfigMap: the setting, else where kubectl would look."""
    if settings.ownership_namespace:
        return Namespace(settings.ownership_namespace, f"{ENV_PREFIX}OWNERSHIP_NAMESPACE")
    return current_namespace(settings.kubeconfig)


def ownership_namespace_hint(settings: Settings, error: UpstreamError) -> str | None:
    """What to change when the claims' or the state's ConfigMaps are refused or not found (403, 404),
    or None for any other failure. From a workstation whose kubeconfig context names no namespace they
    are looked for in ``default``, where the chart's RBAC grants nothing: the error alone says 403.
    (The adapters name each ConfigMap call ``... ConfigMap ...`` in the reason.)"""
    if error.upstream != KUBERNETES or error.status not in {403, 404} or "ConfigMap" not in error.reason:
        return None
    namespace = ownership_namespace(settings)
    setting = flag_and_variable("ownership_namespace")
    if settings.ownership_namespace:
        return (
            f"the claims and the webhook's state are read in namespace {namespace.name}, as {setting} says: "
            "check it is the webhook's namespace and that your account may read ConfigMaps there"
        )
    return (
        f"the claims and the webhook's state are read in namespace {namespace.name} ({namespace.source}): "
        f"set {setting} to the webhook's namespace, or run this in its admin pod"
    )


def ownership_store(
    settings: Settings, api_client: ApiClient, **watch_overrides: Any
) -> ConfigMapOwnershipStore:
    return ConfigMapOwnershipStore(
        core_api(api_client),
        namespace=ownership_namespace(settings).name,
        name=settings.ownership_configmap,
        request_timeout=settings.upstream_timeout,
        watch=watch_options(settings, **watch_overrides),
    )


def state_store(settings: Settings, api_client: ApiClient) -> ConfigMapStateStore:
    """Beside the ownership ConfigMaps: ``<ownership ConfigMap>-state``."""
    return ConfigMapStateStore(
        core_api(api_client),
        namespace=ownership_namespace(settings).name,
        name=settings.ownership_configmap + STATE_SUFFIX,
        request_timeout=settings.upstream_timeout,
    )


def lease_elector(settings: Settings, api_client: ApiClient) -> LeaseElector:
    return LeaseElector(
        coordination_api(api_client),
        namespace=settings.lease_namespace or ownership_namespace(settings).name,
        name=settings.lease_name,
        identity=settings.lease_identity or default_identity(),
        lease_duration=settings.lease_duration,
        renew_deadline=settings.lease_renew_deadline,
        retry_period=settings.lease_retry_period,
        request_timeout=settings.upstream_timeout,
    )


def lease_holder(settings: Settings) -> str:
    """``<namespace>/<name>: <holder>`` of the writer Lease, read once (``status``)."""
    api_client = api_client_for(settings.kubeconfig)
    try:
        elector = lease_elector(settings, api_client)
        return f"{elector.namespace}/{elector.name}: {elector.read_holder()}"
    finally:
        api_client.close()  # type: ignore[no-untyped-call]


# -- the provider and what it is wired to ---------------------------------------------------------


def _refuse_unverified_tls(settings: Settings, *, kubernetes: bool, openstack: bool) -> None:
    """A configuration that turns TLS verification off stops start-up (exit 2) unless the operator said
    so: the credentials (a service account token, a password) would go to whoever answers."""
    if settings.allow_unsafe_tls or (kubernetes and openstack):
        return
    off = [
        *([] if kubernetes else ["of the Kubernetes API (insecure-skip-tls-verify in the kubeconfig)"]),
        *([] if openstack else ["of OpenStack (verify: false, insecure: true or OS_INSECURE)"]),
    ]
    raise SettingError(
        "allow_unsafe_tls",
        f"TLS verification {' and '.join(off)} is off: credentials would be sent to whoever answers. Remove "
        "that, with the CA bundle configured instead (LANDB_OS_CACERT; the kubeconfig's certificate-"
        "authority), or set this to true to run anyway",
    )


def build_adapters(
    settings: Settings, *, metrics: Metrics | None = None, clock: Callable[[], float] = time.time
) -> Adapters:
    """Wire the adapters. Makes no remote call: the node watch is not started and OpenStack
    authenticates on first use. ``clock`` (epoch seconds) is what node grace periods are measured with;
    ``metrics``, when given, count the OpenStack calls."""
    if settings.os_cacert is not None and not settings.os_cacert.is_file():
        raise SettingError("os_cacert", f"{settings.os_cacert} is not a readable file (a CA bundle, PEM)")
    if settings.os_cloud_conf is not None:
        try:  # a broken file stops start-up, not Records
            cloudconf.connection_options(settings.os_cloud_conf, cacert=settings.os_cacert)
        except cloudconf.CloudConfError as error:
            raise SettingError("os_cloud_conf", str(error)) from None
    try:
        api_client = api_client_for(settings.kubeconfig)
    except Exception as error:  # only local files and the environment are read here
        where = settings.kubeconfig or "in-cluster service account, then $KUBECONFIG"
        raise SettingError("kubeconfig", f"no usable Kubernetes configuration ({where}): {error}") from None
    if settings.os_cloud_conf is None and (problem := cloudconf.clouds_yaml_problem(settings.os_cloud)):
        raise SettingError("os_cloud", problem)
    nodes = node_source(settings, api_client, wall_clock=clock)
    session = openstack_session(settings, metrics=metrics)
    servers = OpenStackServerStore(session)
    register_secrets([*session.secret_values(), *kube_secret_values(api_client)])
    _refuse_unverified_tls(
        settings, kubernetes=kube_verifies_tls(api_client), openstack=session.verifies_tls()
    )
    ownership: OwnershipStore
    state: StateStore
    if settings.ownership_store == "configmap":
        ownership = ownership_store(settings, api_client)
        state = state_store(settings, api_client)
    else:
        ownership = InMemoryOwnershipStore()
        state = InMemoryStateStore()
    load_balancers = (
        OctaviaLoadBalancers(session, absent_hint=NO_LOAD_BALANCER_SERVICE)
        if settings.loadbalancers
        else None
    )
    names = dns_resolver(settings) if settings.dns_watch else None
    return Adapters(nodes, servers, ownership, state, load_balancers, names)


NO_LOAD_BALANCER_SERVICE = (
    f"set {ENV_PREFIX}LOADBALANCERS=false to say this cloud has none: nothing is asked of Octavia then, and "
    "this line is not said"
)


def load_balancer_service(settings: Settings, load_balancers: OctaviaLoadBalancers | None) -> str:
    """What the webhook does with load balancers, in words (``status``'s header)."""
    if load_balancers is None:
        return f"off ({ENV_PREFIX}LOADBALANCERS=false)"
    service, why = load_balancers.service()
    if service == ABSENT:
        return f"none: this cloud has no load-balancer service ({why}); {NO_LOAD_BALANCER_SERVICE}"
    return "on"


def provider_on(adapters: Adapters, settings: Settings, metrics: Metrics, **wired: Any) -> LandbProvider:
    """The provider on these adapters (their writer Lease included); ``wired``: LandbProvider's other
    arguments (clock, published, events)."""
    return LandbProvider(adapters.ports(), provider_options(settings), metrics, **wired)


def build_provider(
    settings: Settings, metrics: Metrics, *, clock: Callable[[], float] = time.time
) -> tuple[LandbProvider, Adapters]:
    """The provider on the configured adapters; the node watch starts in the background, so
    negotiation is answered at once."""
    adapters = build_adapters(settings, metrics=metrics, clock=clock)
    if not settings.external_dns_registry.has_owners:
        log.warning(
            "registry noop: every landb-alias on the cluster's nodes counts as managed",
            consequence="with external-dns --policy=sync, aliases set by hand on these nodes will be removed",
        )
    if not settings.dns_watch:
        log.warning(
            "DNS watch off: a name is written without asking DNS first whether another device publishes it",
            consequence="an Ingress asking for a name another device holds in LanDB joins its round robin "
            "at LanDB's next sync; nothing says so",
            hint=f"set {ENV_PREFIX}DNS_WATCH=true (and {ENV_PREFIX}DNS_RESOLVERS) to have new names checked",
        )
    elif settings.takeover_names:
        log.info("names taken over even where DNS answers them elsewhere", names=settings.takeover_names)
    lease = None
    if settings.leader_election:
        lease = lease_elector(settings, api_client_for(settings.kubeconfig))
        adapters.lease = lease
    if settings.events:
        adapters.events = event_emitter(settings, metrics)
    provider = provider_on(
        adapters, settings, metrics, clock=clock, published=adapters.published, events=adapters.events
    )
    metrics.watch(
        writer_lease_held=(lambda: True) if lease is None else lambda: lease.held(wait=0),
        node_cache_age=adapters.nodes.cache_age,
    )
    lbs = adapters.load_balancers
    metrics.watch_load_balancer_service(lambda: "off" if lbs is None else lbs.service()[0])
    adapters.nodes.start()
    if isinstance(adapters.ownership, ConfigMapOwnershipStore):
        adapters.ownership.start()  # the one-shot commands (connected_adapters) read the claims fresh instead
    if lease is not None:
        lease.start()
        log.info("leader election on", lease=f"{lease.namespace}/{lease.name}", identity=lease.identity)
    if adapters.events is not None:
        adapters.events.start()
    return provider, adapters


def event_emitter(settings: Settings, metrics: Metrics) -> EventEmitter:
    """The Kubernetes Events of the names' Ingresses and Services (provider.event_emitter); not started.
    The reporting instance is the pod's name (its hostname)."""
    sink = KubernetesEventSink(
        api_client_for(settings.kubeconfig),
        instance=socket.gethostname(),
        request_timeout=settings.upstream_timeout,
    )
    return EventEmitter(sink, metrics)


def start_dns_watch(settings: Settings, adapters: Adapters, metrics: Metrics) -> None:
    """``serve``'s DNS watcher, unless switched off; ``adapters.close()`` stops it."""
    if settings.dns_watch:
        adapters.dns_watch = dns_watch(settings, adapters.published, metrics, events=adapters.events)
        adapters.dns_watch.start()


def dns_resolver(settings: Settings) -> DnsResolver:
    return DnsResolver([parse_resolver(resolver) for resolver in settings.dns_resolvers])


def dns_watch(
    settings: Settings,
    published: PublicationLog,
    metrics: Metrics,
    *,
    clock: Callable[[], float] = time.time,
    events: EventEmitter | None = None,
) -> DnsWatch:
    """The DNS watcher over what the provider publishes; not started."""
    options = dns_watch_options(settings)
    return DnsWatch(published, dns_resolver(settings), options, metrics=metrics, clock=clock, events=events)


def dns_watch_options(settings: Settings) -> DnsWatchOptions:
    """How fast the DNS watcher asks, and when it calls an answer a conflict."""
    return DnsWatchOptions(
        queries_per_second=settings.dns_queries_per_second,
        recheck_period=settings.dns_recheck_period,
        sync_period=settings.landb_sync_period,
        takeover_names=frozenset(settings.takeover_names),
    )


def ask_openstack_once(adapters: Adapters) -> threading.Thread:
    """One cheap call (the metadata quota) in the background at start-up: /readyz says ready only once
    OpenStack has answered, and this gets that answer, or the reason, before external-dns' first loop.
    Then one list of the load balancers (unless off), so that a cloud without Octavia is said at start-up."""

    def ask() -> None:
        try:
            quota = adapters.servers.max_metadata_items()
        except UpstreamError as error:
            log.error(
                "OpenStack did not answer at start-up: not ready until a call succeeds",
                error=str(error),
                hint="check the credentials (LANDB_OS_CLOUD or LANDB_OS_CLOUD_CONF) and that Keystone and "
                "Nova are reachable from the pod",
            )
            return
        log.info("OpenStack answered", metadata_key_quota=quota)
        if adapters.load_balancers is not None:
            # A cloud without Octavia is said now (once, naming the setting), not at the first Records.
            try:
                adapters.load_balancers.load_balancers()
            except UpstreamError as error:
                log.warning(
                    "Octavia did not answer at start-up: Records answers 503 until it does", error=str(error)
                )

    thread = threading.Thread(target=ask, name="landb-openstack-first-call", daemon=True)
    thread.start()
    return thread


def _reach_kubernetes(settings: Settings) -> str:
    """The API server's URL, once it has answered a list of one node (:func:`list_one_node`)."""
    api_client = api_client_for(settings.kubeconfig)
    try:
        return list_one_node(api_client, timeout=settings.upstream_timeout)
    finally:
        api_client.close()  # type: ignore[no-untyped-call]


@contextmanager
def connected_adapters(settings: Settings, *, sync_timeout: float) -> Iterator[Adapters]:
    """The adapters for a one-shot command, with the node inventory listed once; stopped on exit.

    Raises UpstreamError when the node list does not arrive within ``sync_timeout`` seconds.
    """
    adapters = build_adapters(settings)
    try:
        host = _reach_kubernetes(settings)
        adapters.nodes.start()
        if not adapters.nodes.wait_synced(sync_timeout):
            raise UpstreamError(
                KUBERNETES, f"the node list from {host} did not arrive within {sync_timeout:g} s"
            )
        yield adapters
    finally:
        adapters.close()


def check_dns(
    settings: Settings, state: StateStore, status: ClusterStatus, *, clock: Callable[[], float] = time.time
) -> DnsCheck:
    """``status``'s DNS column: every name asked once, judged with the write times the webhook stored."""
    resolver = dns_resolver(settings)
    if not settings.dns_watch:
        return DnsCheck({}, {}, clock(), resolver.where, skipped=f"{ENV_PREFIX}DNS_WATCH=false")
    stored = PublicationLog()
    try:
        stored.merge_json(state.load().get(STATE_KEY, "{}"))
    except UpstreamError as error:
        log.warning("webhook state not read: DNS judged without the write times", reason=error.reason)
    published = published_in(status, stored)
    published = {
        name: replace(found, taking_over=name in settings.takeover_names) for name, found in published.items()
    }
    judgements = ask_once(published, resolver, now=clock(), sync_period=settings.landb_sync_period)
    return DnsCheck(judgements, published, clock(), resolver.where)
