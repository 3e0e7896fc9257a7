"""The Prometheus metrics the service exposes on ``/metrics``, all prefixed ``landb_webhook_``.

One :class:`Metrics` object owns its own registry, so two instances (two tests, two apps in one
process) never collide. The HTTP layer fills the request metrics; the provider receives the same
object and fills the rest; a few gauges are read at scrape time from the component that knows
(:meth:`Metrics.watch`).

Every labelled counter whose labels are known in advance has its series at 0 from start-up, so that
``increase()`` sees the first event after a restart; counters have no ``_created`` twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

import landb_webhook

PREFIX = "landb_webhook"

# external-dns gives up on a reply after 15 s; the buckets cover that range.
REQUEST_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0)

# One Nova call takes well under a second; a slow one is cut at the upstream timeout (5 s by default).
DNS_PUBLICATION_BUCKETS = (60.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0)
"""Seconds from a write to DNS answering it: LanDB publishes every 15 minutes, so most land by 1800."""
OPENSTACK_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

WRITE_OPERATIONS = ("post", "delete")
WRITE_RESULTS = ("ok", "error", "dry_run")
OPENSTACK_OPERATIONS = (
    "list_servers",
    "get_server",
    "set_metadata",
    "delete_metadata",
    "get_limits",
    "list_load_balancers",
    "list_floating_ips",
    "set_load_balancer_tags",
)
UPSTREAMS = ("nova", "keystone", "kubernetes", "octavia", "neutron")
OPENSTACK_RESULTS = ("ok", "error", "keystone_unreachable", "auth_refused")
"""``error``: the service called (Nova, Octavia, Neutron) failed or did not answer; the call was not made
because Keystone gave no token: ``keystone_unreachable`` (no answer, a 5xx or a timeout) or ``auth_refused``
(it answered and refused the credentials)."""
REJECTION_REASONS = (
    "not_json",
    "wrong_shape",
    "too_large",
    "too_many_endpoints",
    "wrong_host",
    "wrong_media_type",
)
REFUSAL_REASONS = (
    "not_owned",
    "plain_alias",
    "frozen",
    "plan",
    "removal_guard",
    "namespace_cap",
    "name_policy",
    "no_ingress_nodes",
    "not_the_writer",
    "writer_lease_lost",
    "dns_elsewhere",
    "foreign_load_balancer",
)
"""``refused_changes_total`` reasons: the provider's own, plus landb.plan's Refusal kinds (``capacity`` is
counted as ``plan``). tests/unit/test_webhook_metrics.py checks the code uses no other."""
HOLD_BACK_REASONS = ("carrier_not_written", "removal_guard")
"""``removals_held_back_total`` reasons."""
DROP_REASONS = (
    "record_type",
    "plain_alias",
    "empty",
    "too_long",
    "invalid_characters",
    "other_zone",
    "wildcard",
    "multi_label",
    "load_marker",
    "frozen_alias",
    "owned_elsewhere",
    "foreign_load_balancer",
    "resource_cap",
    "namespace_cap",
    "request_cap",
    "outside_domain_filter",
)
"""``dropped_endpoints_total`` reasons: the provider's own, plus landb.names' InvalidName kinds."""
ALIAS_OWNERSHIP = ("owned", "unowned")
DNS_STATES = ("pending", "published", "stale", "conflict", "unknown", "shared")
"""``dns_names`` states: landb.propagation.WATCHED_STATES (tests/unit/test_webhook_metrics.py checks)."""
DNS_QUERY_RESULTS = ("answered", "no_answer")
LOAD_BALANCER_SERVICE_STATES = ("off", "unknown", "present", "absent")
EVENT_RESULTS = (
    "created",
    "updated",
    "superseded",
    "dropped",
    "forbidden",
    "object_gone",
    "event_gone",
    "unavailable",
    "invalid",
)
"""``events_total`` results: written (``created``, ``updated``: a series), not sent (``superseded`` by a newer
state of the same name, ``dropped`` past the queue's cap) and the EventWriteFailed kinds."""


@dataclass(frozen=True)
class Metrics:
    registry: CollectorRegistry

    # Filled by the HTTP layer.
    requests_total: Counter
    """Webhook and health requests answered, by ``route`` (negotiate, records, adjust_endpoints,
    apply_changes, healthz, readyz, metrics, unmatched) and HTTP ``code``."""
    request_duration_seconds: Histogram
    """Time to answer, by ``route``."""

    # Filled by the provider.
    upstream_errors_total: Counter
    """Webhook calls (reads and applies) and metadata writes that failed because a remote API did, by
    ``upstream`` (nova, keystone, kubernetes)."""
    openstack_api_calls_total: Counter
    """Calls to OpenStack, each attempt counted, by ``operation`` and ``result`` (OPENSTACK_RESULTS)."""
    openstack_api_call_duration_seconds: Histogram
    """Time one OpenStack call took, by ``operation`` and ``result``."""
    metadata_writes_total: Counter
    """Nova metadata writes, by ``operation`` (post|delete) and ``result`` (ok|error|dry_run)."""
    refused_changes_total: Counter
    """Changes refused as invalid or impossible, by ``reason``."""
    rejected_requests_total: Counter
    """Webhook requests refused before reaching the provider, by ``reason`` (not_json, wrong_shape,
    too_large, too_many_endpoints, wrong_host, wrong_media_type)."""
    dropped_endpoints_total: Counter
    """Desired endpoints AdjustEndpoints dropped because LanDB cannot represent them, by ``reason``."""
    aliases_published: Gauge
    """Aliases published by this cluster's ingress nodes at the last inventory, by ``ownership``:
    ``owned`` (a TXT claim, or registry noop) or ``unowned`` (set by someone else, never touched)."""
    load_balancer_tag_writes_total: Counter
    """Octavia load balancer tag writes (a GET and a PUT each), by ``result`` (ok|error|dry_run)."""
    load_balancer_aliases: Gauge
    """Names published by ``landb-alias=`` tags on the project's load balancers at the last Records, by
    ``ownership`` (owned|unowned)."""
    names_needing_attention: Gauge
    """Names ``landb-webhook status`` flags (a non-ingress carrier, one N on two nodes, a name twice on
    one node, an A and a CNAME alias for one name): each needs a human."""
    nodes_without_server: Gauge
    """Nodes whose Nova server was not found: their aliases are not seen."""
    writer_lease_held: Gauge
    """1 while this replica may write: it holds the writer Lease (or leader election is off)."""
    load_balancer_service: Gauge
    """1 for the ``state`` of the load-balancer service (LOAD_BALANCER_SERVICE_STATES), 0 for the others."""
    node_cache_age_seconds: Gauge
    """Seconds since the node watch last listed or ended a watch well (+Inf before the first list); a
    quiet cluster resets it once per watch (60 s); nodes() refuses to answer past LANDB_NODE_CACHE_MAX_AGE."""
    ingress_nodes: Gauge
    """Nodes currently selected to carry aliases."""
    ingress_nodes_unhealthy: Gauge
    """Ingress nodes that are not healthy, by ``state``: ``grace`` (still carrying) or ``out``."""
    unhealthy_nodes_kept: Gauge
    """Unhealthy ingress nodes kept carrying because no healthy one is left (alert when above 0)."""
    last_apply_success_timestamp_seconds: Gauge
    """Unix time of the last ApplyChanges that fully succeeded (still on a settled cluster: external-dns
    only applies when something changes, so do not alert on its age)."""
    last_successful_sync_timestamp_seconds: Gauge
    """Unix time of the last Records or ApplyChanges that fully succeeded: advances every external-dns loop
    while the webhook can do its job."""
    # Filled by the DNS watcher (provider/watch/dns_watch.py).
    dns_names: Gauge
    """Names by what DNS answers (``state``: pending, published, stale, conflict, unknown, shared)."""
    dns_oldest_pending_seconds: Gauge
    """Seconds the longest-pending name has waited for DNS since its write (0 when none waits)."""
    dns_publication_seconds: Histogram
    """Seconds from a name's write to DNS first answering it as written (pending -> published)."""
    removals_held_back_total: Counter
    """Aliases whose removal an apply held back, by ``reason``: ``carrier_not_written`` (the addition
    elsewhere did not land) or ``removal_guard`` (a namespace's mass removal, until the operator decides)."""
    dns_queries_total: Counter
    """Questions the DNS watcher asked, by ``result``: ``answered`` or ``no_answer`` (resolver failed)."""
    events_total: Counter
    """Kubernetes Events for the objects behind the names, by ``result`` (EVENT_RESULTS)."""
    events_queued: Gauge
    """Events waiting for the emitter's rate limit (at most LANDB's queue cap)."""

    provider_calls_in_flight: Gauge
    """Webhook calls handed to a provider thread and not returned yet, those past their reply deadline
    included: above 0 for minutes while nothing returns is the stall /healthz fails on."""

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None, *, process_metrics: bool = True) -> Metrics:
        """Build every instrument in ``registry`` (a fresh one by default).

        ``process_metrics`` adds the usual process_*, python_gc_* and python_info series, as the
        default prometheus_client registry would.
        """
        disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide in prometheus_client; ours is the only exposition
        registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        if process_metrics:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
        Info(f"{PREFIX}_build", "Version of landb-webhook.", registry=registry).info(
            {"version": landb_webhook.__version__}
        )
        metrics = cls(
            registry=registry,
            requests_total=Counter(
                f"{PREFIX}_requests_total",
                "Webhook and health requests answered, by route and HTTP status code.",
                ["route", "code"],
                registry=registry,
            ),
            request_duration_seconds=Histogram(
                f"{PREFIX}_request_duration_seconds",
                "Time to answer a request, by route.",
                ["route"],
                buckets=REQUEST_DURATION_BUCKETS,
                registry=registry,
            ),
            upstream_errors_total=Counter(
                f"{PREFIX}_upstream_errors_total",
                "Webhook calls and metadata writes that failed because a remote API did, by upstream.",
                ["upstream"],
                registry=registry,
            ),
            openstack_api_calls_total=Counter(
                f"{PREFIX}_openstack_api_calls_total",
                "Calls to OpenStack (each retry counted), by operation and result "
                "(ok|error|keystone_unreachable|auth_refused).",
                ["operation", "result"],
                registry=registry,
            ),
            openstack_api_call_duration_seconds=Histogram(
                f"{PREFIX}_openstack_api_call_duration_seconds",
                "Time one OpenStack call took, by operation and result.",
                ["operation", "result"],
                buckets=OPENSTACK_CALL_BUCKETS,
                registry=registry,
            ),
            metadata_writes_total=Counter(
                f"{PREFIX}_metadata_writes_total",
                "Nova server metadata writes, by operation (post|delete) and result (ok|error|dry_run).",
                ["operation", "result"],
                registry=registry,
            ),
            refused_changes_total=Counter(
                f"{PREFIX}_refused_changes_total",
                "Changes refused because they are invalid or cannot be applied, by reason.",
                ["reason"],
                registry=registry,
            ),
            rejected_requests_total=Counter(
                f"{PREFIX}_rejected_requests_total",
                "Webhook requests refused before reaching the provider, by reason "
                "(not_json, wrong_shape, too_large, too_many_endpoints, wrong_host, wrong_media_type).",
                ["reason"],
                registry=registry,
            ),
            dropped_endpoints_total=Counter(
                f"{PREFIX}_dropped_endpoints_total",
                "Desired endpoints AdjustEndpoints dropped because LanDB cannot represent them, by reason.",
                ["reason"],
                registry=registry,
            ),
            aliases_published=Gauge(
                f"{PREFIX}_aliases_published",
                "Aliases published by the cluster's ingress nodes at the last inventory, by ownership "
                "(owned: a TXT claim or registry noop; unowned: set by someone else, never touched).",
                ["ownership"],
                registry=registry,
            ),
            load_balancer_tag_writes_total=Counter(
                f"{PREFIX}_load_balancer_tag_writes_total",
                "Octavia load balancer tag writes, by result (ok|error|dry_run).",
                ["result"],
                registry=registry,
            ),
            load_balancer_aliases=Gauge(
                f"{PREFIX}_load_balancer_aliases",
                "Names published by landb-alias tags on the project's load balancers at the last Records, "
                "by ownership (owned|unowned).",
                ["ownership"],
                registry=registry,
            ),
            names_needing_attention=Gauge(
                f"{PREFIX}_names_needing_attention",
                "Names landb-webhook status flags as needing a human, at the last inventory.",
                registry=registry,
            ),
            nodes_without_server=Gauge(
                f"{PREFIX}_nodes_without_server",
                "Nodes whose Nova server was not found at the last inventory: their aliases are not seen.",
                registry=registry,
            ),
            writer_lease_held=Gauge(
                f"{PREFIX}_writer_lease_held",
                "1 while this replica may write: it holds the writer Lease, or leader election is off.",
                registry=registry,
            ),
            load_balancer_service=Gauge(
                f"{PREFIX}_load_balancer_service",
                "1 for what the webhook knows of the load-balancer service: off (LANDB_LOADBALANCERS=false), "
                "unknown (not asked yet), present, absent (this cloud has none: no load balancers).",
                ["state"],
                registry=registry,
            ),
            node_cache_age_seconds=Gauge(
                f"{PREFIX}_node_cache_age_seconds",
                "Seconds since the node watch last listed or ended a watch well.",
                registry=registry,
            ),
            ingress_nodes=Gauge(
                f"{PREFIX}_ingress_nodes",
                "Nodes currently selected to carry aliases.",
                registry=registry,
            ),
            ingress_nodes_unhealthy=Gauge(
                f"{PREFIX}_ingress_nodes_unhealthy",
                "Ingress nodes that are not healthy, by state: grace (still carrying) or out.",
                ["state"],
                registry=registry,
            ),
            unhealthy_nodes_kept=Gauge(
                f"{PREFIX}_unhealthy_nodes_kept",
                "Unhealthy ingress nodes kept carrying aliases because no healthy ingress node is left.",
                registry=registry,
            ),
            last_apply_success_timestamp_seconds=Gauge(
                f"{PREFIX}_last_apply_success_timestamp_seconds",
                "Unix time of the last ApplyChanges that fully succeeded.",
                registry=registry,
            ),
            last_successful_sync_timestamp_seconds=Gauge(
                f"{PREFIX}_last_successful_sync_timestamp_seconds",
                "Unix time of the last Records or ApplyChanges that fully succeeded.",
                registry=registry,
            ),
            provider_calls_in_flight=Gauge(
                f"{PREFIX}_provider_calls_in_flight",
                "Webhook calls running in a provider thread, those past their reply deadline included.",
                registry=registry,
            ),
            dns_names=Gauge(
                f"{PREFIX}_dns_names",
                "Published names by what DNS answers: pending, published, stale, conflict, unknown, shared.",
                ["state"],
                registry=registry,
            ),
            dns_oldest_pending_seconds=Gauge(
                f"{PREFIX}_dns_oldest_pending_seconds",
                "Seconds the longest-pending name has waited for DNS since its write (0: none waits).",
                registry=registry,
            ),
            dns_publication_seconds=Histogram(
                f"{PREFIX}_dns_publication_seconds",
                "Seconds from a name's write to DNS first answering it as written.",
                buckets=DNS_PUBLICATION_BUCKETS,
                registry=registry,
            ),
            removals_held_back_total=Counter(
                f"{PREFIX}_removals_held_back_total",
                "Aliases whose removal an apply held back, by reason (carrier_not_written|removal_guard).",
                ["reason"],
                registry=registry,
            ),
            dns_queries_total=Counter(
                f"{PREFIX}_dns_queries_total",
                "DNS questions the watcher asked, by result (answered|no_answer).",
                ["result"],
                registry=registry,
            ),
            events_total=Counter(
                f"{PREFIX}_events_total",
                "Kubernetes Events about the names' Ingresses and Services, by result.",
                ["result"],
                registry=registry,
            ),
            events_queued=Gauge(
                f"{PREFIX}_events_queued",
                "Kubernetes Events waiting for the emitter's rate limit.",
                registry=registry,
            ),
        )
        # Series with a known, small label set exist from the start, so rate() works from the first write.
        for operation in WRITE_OPERATIONS:
            for result in WRITE_RESULTS:
                metrics.metadata_writes_total.labels(operation=operation, result=result)
        for state in ("grace", "out"):
            metrics.ingress_nodes_unhealthy.labels(state=state)
        for operation in OPENSTACK_OPERATIONS:
            for result in OPENSTACK_RESULTS:
                metrics.openstack_api_calls_total.labels(operation=operation, result=result)
        for upstream in UPSTREAMS:
            metrics.upstream_errors_total.labels(upstream=upstream)
        for reason in REJECTION_REASONS:
            metrics.rejected_requests_total.labels(reason=reason)
        for reason in REFUSAL_REASONS:
            metrics.refused_changes_total.labels(reason=reason)
        for reason in DROP_REASONS:
            metrics.dropped_endpoints_total.labels(reason=reason)
        for reason in HOLD_BACK_REASONS:
            metrics.removals_held_back_total.labels(reason=reason)
        for ownership in ALIAS_OWNERSHIP:
            metrics.aliases_published.labels(ownership=ownership)
            metrics.load_balancer_aliases.labels(ownership=ownership)
        for result in WRITE_RESULTS:
            metrics.load_balancer_tag_writes_total.labels(result=result)
        for state in DNS_STATES:
            metrics.dns_names.labels(state=state)
        for result in DNS_QUERY_RESULTS:
            metrics.dns_queries_total.labels(result=result)
        for result in EVENT_RESULTS:
            metrics.events_total.labels(result=result)
        return metrics

    def watch_load_balancer_service(self, state: Callable[[], str]) -> None:
        """``load_balancer_service{state}`` read at scrape time: 1 for ``state()``, 0 for the others."""
        for name in LOAD_BALANCER_SERVICE_STATES:
            self.load_balancer_service.labels(state=name).set_function(
                lambda name=name: float(state() == name)  # type: ignore[misc]
            )

    def watch(self, *, writer_lease_held: Callable[[], bool], node_cache_age: Callable[[], float]) -> None:
        """Gauges read at scrape time from the component that knows, so they are never stale."""
        self.writer_lease_held.set_function(lambda: float(writer_lease_held()))
        self.node_cache_age_seconds.set_function(node_cache_age)
