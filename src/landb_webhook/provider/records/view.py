"""Records and AdjustEndpoints: what is published, and what will be once the desired endpoints are applied.

What AdjustEndpoints promises: each desired endpoint it keeps comes back exactly as Records will report it
once applied (one A record per alias, the addresses of its carriers under the carrier rule, plus whoever
holds it in a form we never edit), so a loop after an apply finds nothing to change (zero churn at rest).
It drops, with one warning each, what can never be an alias, a name held as a plain (CNAME) alias by
someone else, and under registry noop a name held only in forms we never edit; TXT claims pass through.
Before all that, what the namespaces ask for is screened (provider.records.screening): one asker per
name, its owner first; the caps per resource and per namespace; no other namespace's load balancer.

Records never writes: claims left without their alias are left out (provider.claims), and the next apply
drops them.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

import structlog

from landb_webhook.backends import Ports
from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.apply.loadbalancers import LoadBalancerPath
from landb_webhook.provider.context import Context, node_names, nodes_holding
from landb_webhook.provider.ownership.claims import NOT_OWNED, Claims
from landb_webhook.provider.read.health import Verdict
from landb_webhook.provider.read.inventory import Inventory, InventoryReader
from landb_webhook.provider.read.txt_registry import claimed_names, is_ownership_record, owner_resources
from landb_webhook.provider.records.screening import foreign_targets, screen
from landb_webhook.provider.status.problems import count_needing_attention
from landb_webhook.provider.together import Together
from landb_webhook.provider.watch.events import NameChange

log = structlog.get_logger(__name__)


class RecordsView:
    def __init__(
        self,
        context: Context,
        ports: Ports,
        *,
        inventory: InventoryReader,
        claims: Claims,
        lb_path: LoadBalancerPath,
    ) -> None:
        """``ports``: the backends (it reads the claims); ``lb_path``: the names on load balancers
        (provider.loadbalancers)."""
        self._context = context
        self._lb_path = lb_path
        self._inventory = inventory
        self._ownership = ports.ownership
        self._claims = claims
        self._verdicts: dict[str, Verdict] = {}
        """The verdicts the last Records saw, so a change of health is logged once."""
        self._unmatched = False
        """No node matched the ingress selector at the last Records."""
        self._unmatched_episodes = 0
        """How many times that began: the key of its warning, so each beginning is said at once."""

    # -- Records ----------------------------------------------------------------------------

    def records(self) -> list[Endpoint]:
        context, metrics = self._context, self._context.metrics
        # The reads, sent together (provider.together): one round trip, not three one after the other.
        with Together("records") as reads:
            load_balancers_read = reads.start(self._lb_path.fresh, upstream="octavia", what="load balancers")
            claims_read = reads.start(self._ownership.records, upstream="kubernetes", what="claims")
            listing = self._inventory.listing()  # the large one, here (provider.together: why)
        inventory = self._inventory.fresh(listing)
        load_balancers = load_balancers_read.result()
        for node in inventory.unresolved_nodes():
            context.warn_once(node, "no Nova server found for this node; its aliases are not seen")
        found = inventory.carriers()
        carried = {context.dns_name(label): inventory.ips_of(ids) for label, ids in found.items()}
        context.published.reported(
            self._lb_path.carried(carried, load_balancers),
            context.clock(),
            self._lb_path.tagged(load_balancers),
        )
        self._report_health(inventory)
        self._report_ingress_selector(inventory)
        claims = self._claims.without_orphaned(claims_read.result(), {**load_balancers.carriers(), **found})
        hidden = self._claims.offered_for_adoption(inventory, claims) | context.unreported_frozen_only(
            inventory
        )
        aliases = [
            Endpoint(context.dns_name(label), "A", inventory.ips_of(ids))
            for label, ids in sorted(found.items())
            if label not in hidden
        ]
        tagged_unowned = self._claims.unclaimed(load_balancers.carriers().keys(), claimed_names(claims))
        aliases = self._lb_path.records(aliases, load_balancers, unowned=tagged_unowned, hidden=hidden)
        unowned = self._claims.unclaimed(found.keys(), claimed_names(claims))
        self._report_unowned(inventory, unowned - hidden)
        self._report_frozen_outside_ingress(inventory)
        metrics.ingress_nodes.set(len(inventory.ingress_server_ids()))
        self._report_aliases(inventory, unowned=len(unowned))
        self._report_body_room(inventory, names=len(aliases))
        metrics.last_successful_sync_timestamp_seconds.set_to_current_time()
        return [*aliases, *self._plain_alias_records(inventory), *claims]

    def _plain_alias_records(self, inventory: Inventory) -> list[Endpoint]:
        """Plain (CNAME) aliases, reported so that external-dns sees their names as taken.

        As CNAME records to the hosts LanDB points them at, with no owner: the txt registry then never
        updates or deletes them, and creates nothing beside them (it creates only where every record of
        a name is its own). The noop registry has no owners, so with ``sync`` it would ask to delete them
        every loop: they are not reported then, and AdjustEndpoints keeps their names out of the plan.
        """
        context = self._context
        found = inventory.plain_aliases(context.options.dns_domain)
        for label, hosts in sorted(found.items()):
            context.warn_once(
                label, "plain (CNAME) alias set by someone else: never written", hosts=sorted(hosts)
            )
        if not context.options.registry.spares_ownerless:
            return []
        return [
            Endpoint(context.dns_name(label), "CNAME", tuple(sorted(hosts)))
            for label, hosts in sorted(found.items())
        ]

    def _report_ingress_selector(self, inventory: Inventory) -> None:
        """A selector that matches none of the cluster's nodes (a typo, labels removed) is said at the
        first Records, again every hour while it lasts (the repeat period of every warning) and at once
        each time it starts again; its end is one info line. A cluster without nodes says nothing here:
        the selector is not what is wrong."""
        selector = self._context.options.ingress_selector
        ingress = sum(node.is_ingress for node in inventory.nodes)
        if ingress or not inventory.nodes:
            if self._unmatched and ingress:
                log.info(
                    "the ingress selector matches nodes again",
                    ingress_selector=selector,
                    ingress_nodes=ingress,
                )
            self._unmatched = False
            return
        if not self._unmatched:
            self._unmatched, self._unmatched_episodes = True, self._unmatched_episodes + 1
        self._context.warnings.warning(
            ("no ingress node", self._unmatched_episodes),
            "no node matches the ingress selector: no alias can be placed",
            ingress_selector=selector,
            nodes_seen=len(inventory.nodes),
            hint="check LANDB_INGRESS_SELECTOR against the nodes' labels (kubectl get nodes --show-labels)",
        )

    def _report_frozen_outside_ingress(self, inventory: Inventory) -> None:
        """An alias in a key or form we never edit on a node that must not carry it stays published there:
        nothing we write changes that, so it is said once, and AdjustEndpoints counts it as a carrier."""
        ingress = inventory.ingress_server_ids()
        names = node_names(inventory)
        for label, ids in sorted(inventory.frozen_carriers().items()):
            if outside := sorted(names[i] for i in ids - ingress):
                self._context.warn_once(
                    label,
                    "alias held in a key or form we never edit on a non-ingress node: it stays published "
                    "there until removed by hand",
                    nodes=outside,
                )

    def _report_aliases(self, inventory: Inventory, *, unowned: int) -> None:
        """The alias gauges of one Records: owned and unowned, and what ``status`` would flag."""
        metrics = self._context.metrics
        metrics.aliases_published.labels(ownership="owned").set(len(inventory.carriers()) - unowned)
        metrics.aliases_published.labels(ownership="unowned").set(unowned)
        metrics.nodes_without_server.set(len(inventory.unresolved_nodes()))
        options = self._context.options
        metrics.names_needing_attention.set(count_needing_attention(inventory, domain=options.dns_domain))

    def _report_body_room(self, inventory: Inventory, *, names: int) -> None:
        """Say when the ApplyChanges of a node joining or leaving would be refused as too large: it moves
        every name's carriers, and external-dns sends each name's addresses twice (before and after). The
        default (16 MiB) holds every cluster of the chart's memory envelope; past it every such loop would
        get a 503 until the limit is raised, and the node would never carry its names."""
        limit = self._context.options.max_request_body
        if limit is None or not names:
            return
        addresses = inventory.ips_of(inventory.ingress_server_ids())
        needed = apply_body_estimate(names, addresses)
        if needed > limit:
            self._context.warn_once(
                "LANDB_MAX_REQUEST_BODY",
                "request body limit too small for this cluster: external-dns' ApplyChanges after a node "
                "joins or leaves would be refused (503) until it is raised",
                names=names,
                ingress_addresses=len(addresses),
                estimated_bytes=needed,
                limit_bytes=limit,
                hint=f"set LANDB_MAX_REQUEST_BODY to at least {_next_mib(needed)} bytes; a cluster this "
                "large may need more pod memory too (docs/operations.md)",
            )

    def _report_unowned(self, inventory: Inventory, unowned: set[str]) -> None:
        names = node_names(inventory) if unowned else {}
        for label in sorted(unowned):
            self._context.warn_once(
                label,
                "alias held by someone else (no ownership record): left untouched",
                nodes=nodes_holding(inventory, label, names),
                hint="if external-dns should manage it, run " + self._claims.adopt_command(label),
            )

    def _report_health(self, inventory: Inventory) -> None:
        """Once per loop (Records opens it): metrics, and a log line whenever a node's verdict changes."""
        context, metrics = self._context, self._context.metrics
        verdicts = inventory.verdicts(context.options.health, context.clock())
        out = [v for v in verdicts if not v.carries]
        kept = out if len(out) == len(verdicts) else []
        metrics.ingress_nodes_unhealthy.labels(state="grace").set(sum(v.in_grace for v in verdicts))
        metrics.ingress_nodes_unhealthy.labels(state="out").set(len(out))
        metrics.unhealthy_nodes_kept.set(len(kept))
        if kept:
            # Taking every name off the air is never the cure for sick nodes: keep them, and shout.
            log.error(
                "no ingress node is healthy: aliases stay on the unhealthy nodes that carry them",
                nodes={v.node: _problems(v) for v in kept},
            )
        seen = {v.node: v for v in verdicts}
        for node, verdict in sorted(seen.items()):
            before = self._verdicts.get(node)
            if before == verdict or (before is None and verdict.healthy):
                continue
            if verdict.healthy:
                log.info("node healthy again: it carries aliases", node=node)
            elif verdict.carries:
                log.warning(
                    "node unhealthy: it carries until its grace period ends",
                    node=node,
                    problems=_problems(verdict),
                    grace_seconds=context.options.health.grace_seconds,
                )
            else:
                log.warning("node unhealthy: it carries no alias", node=node, problems=_problems(verdict))
        self._verdicts = seen

    # -- AdjustEndpoints --------------------------------------------------------------------

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        """Rewrite the desired endpoints into exactly what Records will report once they are applied."""
        context = self._context
        inventory = self._inventory.recent()
        load_balancers = self._lb_path.recent()
        placement = context.placement(inventory)
        found, frozen = inventory.carriers(), inventory.frozen_carriers()
        plain = inventory.plain_aliases(context.options.dns_domain)
        only_frozen = context.unreported_frozen_only(inventory)
        # One asker per name (its owner first), the caps per resource and namespace (records.screening).
        screened = screen(context, endpoints, owner_resources(self._ownership.records()))
        aliases: dict[str, Endpoint] = {}
        passed: list[Endpoint] = []
        for asked in screened.endpoints:
            if is_ownership_record(asked):
                passed.append(asked)
                continue
            label = context.alias_label(asked)
            if label is None or label in aliases:
                continue
            # A load balancer of another namespace than the owner's (or the asker's) is no home for it.
            endpoint = foreign_targets(context, asked, screened, label, load_balancers)
            if not endpoint.targets:
                continue
            if label in plain and label not in found:
                reason = (
                    f"{label} is a plain (CNAME) alias set by someone else; remove it to publish the name"
                )
                context.drop(endpoint, reason, "plain_alias")
                continue
            on_load_balancers = self._lb_path.adjusted(
                endpoint, load_balancers, inventory.ips_of(frozen.get(label, set()))
            )
            if on_load_balancers is not None:
                aliases[label] = on_load_balancers
                continue
            if label in only_frozen and placement.carriers_of(label) <= frozen[label]:
                # Records leaves it out, and no token of ours would be written (a frozen holder gets none).
                reason = (
                    f"{label} is held only in a key or form we never edit, on every node that would carry it"
                )
                context.drop(endpoint, reason, "frozen_alias")
                continue
            # What Records will report once applied: the carriers placed, plus whoever holds the alias in a
            # form we never edit; beside a plain alias nothing is added, so what carries it now.
            carried = (
                found[label] if label in plain else placement.carriers_of(label) | frozen.get(label, set())
            )
            aliases[label] = Endpoint(
                dns_name=context.dns_name(label),
                record_type="A",
                targets=inventory.ips_of(carried),
                labels=endpoint.labels,
            )
        self._tell_held_by_others(screened.endpoints, aliases.keys() & found.keys())
        return [*(aliases[label] for label in sorted(aliases)), *passed]

    def _tell_held_by_others(self, endpoints: Sequence[Endpoint], carried: Set[str]) -> None:
        """The objects behind the desired endpoints are learnt (for the events of their names), and those
        asking for a name someone else holds (no ownership record) are told: external-dns' txt registry
        plans nothing for it, so no ApplyChanges would ever say why the name does not move."""
        events = self._context.events
        events.learn(endpoints)
        claimed = claimed_names(self._ownership.records())
        for label in sorted(self._claims.unclaimed(carried, claimed)):
            events.tell(NameChange(self._context.dns_name(label), "refused", NOT_OWNED, "not_owned"))


NAME_OVERHEAD_BYTES = 600
"""Per name and side of an update, besides its addresses: DNS name, type, TTL, labels, and the TXT claim
external-dns may send beside it."""


def apply_body_estimate(names: int, addresses: Sequence[str]) -> int:
    """The body of an ApplyChanges that gives every name one carrier more: each name before (these
    addresses) and after (one more), as external-dns encodes them (``"10.0.0.7",``)."""
    listed = sum(len(address) + 3 for address in addresses)
    widest = max((len(address) for address in addresses), default=15) + 3
    return names * (2 * listed + widest + 2 * NAME_OVERHEAD_BYTES)


def _next_mib(size: int) -> int:
    """``size`` rounded up to a whole MiB, in bytes."""
    return -(-size // 2**20) * 2**20


def _problems(verdict: Verdict) -> str:
    return ", ".join(verdict.problems)
