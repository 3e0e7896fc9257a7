"""LandbProvider: the WebhookProvider the HTTP layer calls. It holds what the calls share and hands each
call to its module: Records and AdjustEndpoints to provider.records, ApplyChanges to provider.apply."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from landb_webhook.backends import Ports, UpstreamError
from landb_webhook.endpoint import Changes, DomainFilter, Endpoint
from landb_webhook.metrics import Metrics
from landb_webhook.provider.apply.applier import Applier
from landb_webhook.provider.apply.kept_state import KeptState
from landb_webhook.provider.apply.loadbalancers import LoadBalancerPath
from landb_webhook.provider.context import Context
from landb_webhook.provider.interface import Readiness
from landb_webhook.provider.options import ProviderOptions
from landb_webhook.provider.ownership.claims import Claims
from landb_webhook.provider.read.inventory import InventoryReader
from landb_webhook.provider.records.view import RecordsView
from landb_webhook.provider.watch.events import NameEvents, NoEvents
from landb_webhook.provider.watch.publications import PublicationLog


class LandbProvider:
    def __init__(
        self,
        ports: Ports,
        options: ProviderOptions,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        published: PublicationLog | None = None,
        events: NameEvents | None = None,
    ) -> None:
        """``ports``: the backends (backends.Ports); ``clock`` gives epoch seconds, compared with the API's
        timestamps for the grace period and stamping the removal window; ``published``: where what is
        published and when it was written is told (the DNS watcher reads it); ``events``: where each
        name's transitions are told (provider.event_emitter), None: nowhere."""
        self._ports = ports
        self._options = options
        context = Context(
            options, metrics, clock, published=published or PublicationLog(), events=events or NoEvents()
        )
        kept = KeptState(ports.state, options.removal_guard.window_seconds, context.published)
        inventory = InventoryReader(
            ports.nodes, ports.servers, max_age=options.inventory_max_age, departed=kept.servers_to_look_for
        )
        claims = Claims(context)
        lb_path = LoadBalancerPath(
            ports.load_balancers,
            metrics,
            dns_domain=options.dns_domain,
            dry_run=options.dry_run,
            concurrency=options.write_concurrency,
            max_age=options.inventory_max_age,
        )
        self._records = RecordsView(context, ports, inventory=inventory, claims=claims, lb_path=lb_path)
        self._applier = Applier(
            context, ports, inventory=inventory, claims=claims, state=kept, lb_path=lb_path
        )

    def domain_filter(self) -> DomainFilter:
        return DomainFilter(include=self._options.domain_filter)

    def readiness(self) -> Readiness:
        try:
            nodes = self._ports.nodes.nodes()
        except UpstreamError as error:
            return Readiness(False, str(error))
        except Exception as error:  # not ready, whatever the reason
            return Readiness(False, f"node inventory unusable: {type(error).__name__}")
        problem = self._ports.servers.unavailable()
        if problem is not None:
            return Readiness(False, f"OpenStack: {problem}")
        # Ready even when no node matches the ingress selector: unready, the webhook would leave its
        # Service and external-dns would fail every loop, for a fault the selector's warning and the
        # LandbWebhookNoIngressNode alert name (docs/operations.md, "Alerts"). The body says it.
        unmatched = ""
        if nodes and not any(node.is_ingress for node in nodes):
            unmatched = f", none matching the ingress selector {self._options.ingress_selector}"
        return Readiness(
            True, f"node cache synced ({len(nodes)} nodes{unmatched}), no recent OpenStack failure"
        )

    def records(self) -> list[Endpoint]:
        return self._records.records()

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        return self._records.adjust_endpoints(endpoints)

    def apply_changes(self, changes: Changes) -> None:
        self._applier.apply_changes(changes)
