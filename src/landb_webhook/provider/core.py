"""The provider: Records, AdjustEndpoints and ApplyChanges over the ports and the landb domain core.

One ApplyChanges, in order (docs/architecture.md, invariants 3 and 4):
1. read a fresh inventory and the ownership records;
2. turn the change set into "alias -> servers that must carry it", for the aliases it names only;
3. refuse what we do not own (registry ``txt``: no TXT claim) and what cannot be an alias;
4. plan (landb.plan), store new TXT claims, write every addition, then every removal;
5. drop the TXT claims of aliases whose removal landed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from threading import Lock

import structlog

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint
from landb_webhook.landb.names import InvalidName, dns_name_for, label_for
from landb_webhook.landb.plan import Plan, Refusal, carriers, plan_changes
from landb_webhook.metrics import Metrics
from landb_webhook.ports import NodeSource, OwnershipStore, ServerStore
from landb_webhook.provider.executor import Outcome, PlanExecutor
from landb_webhook.provider.health import DepartedIndices, HealthPolicy, Placement, Verdict
from landb_webhook.provider.interface import ApplyError
from landb_webhook.provider.inventory import Inventory, InventoryReader
from landb_webhook.provider.ownership import claimed_names, is_ownership_record, owned_name

log = structlog.get_logger(__name__)

ALIAS_RECORD_TYPES = frozenset({"A", "AAAA", "CNAME"})


@dataclass(frozen=True)
class ProviderOptions:
    dns_domain: str = "cern.ch"
    domain_filter: tuple[str, ...] = ("cern.ch",)
    registry: str = "txt"
    index_floor: int = 0
    max_value_length: int = 254
    write_concurrency: int = 4
    inventory_max_age: float = 30.0
    dry_run: bool = False
    health: HealthPolicy = field(default_factory=HealthPolicy)


class LandbProvider:
    def __init__(
        self,
        nodes: NodeSource,
        servers: ServerStore,
        ownership: OwnershipStore,
        options: ProviderOptions,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` gives epoch seconds, compared with the API's timestamps for the grace period."""
        self._nodes = nodes
        self._servers = servers
        self._ownership = ownership
        self._options = options
        self._metrics = metrics
        self._clock = clock
        self._inventory = InventoryReader(nodes, servers, max_age=options.inventory_max_age)
        self._executor = PlanExecutor(
            servers, concurrency=options.write_concurrency, dry_run=options.dry_run, metrics=metrics
        )
        self._apply_lock = Lock()
        self._applies_started = 0
        self._warned: set[tuple[str, str]] = set()
        self._departed = DepartedIndices()
        self._verdicts: dict[str, Verdict] = {}
        """The verdicts the last Records saw, so a change of health is logged once."""

    # -- negotiation and health -------------------------------------------------------------

    def domain_filter(self) -> DomainFilter:
        return DomainFilter(include=self._options.domain_filter)

    def ready(self) -> bool:
        try:
            self._nodes.nodes()
        except Exception:  # not ready, whatever the reason
            return False
        return True

    # -- Records ----------------------------------------------------------------------------

    def records(self) -> list[Endpoint]:
        applies_before = self._applies_started
        inventory = self._inventory.fresh()
        for node in inventory.unresolved_nodes():
            self._warn_once(node, "no Nova server found for this node; its aliases are not seen")
        found = carriers(inventory.server_states())
        self._report_health(inventory)
        aliases = [
            Endpoint(dns_name_for(label, self._options.dns_domain), "A", inventory.ips_of(ids))
            for label, ids in sorted(found.items())
        ]
        claims = self._without_orphaned_claims(list(self._ownership.records()), found, applies_before)
        self._report_unowned(found, claims)
        self._metrics.ingress_nodes.set(len(inventory.ingress_server_ids()))
        self._metrics.aliases_managed.set(len(found))
        return [*aliases, *claims]

    # -- AdjustEndpoints --------------------------------------------------------------------

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        """Rewrite the desired endpoints into exactly what Records will report once they are applied."""
        inventory = self._inventory.recent()
        placement = self._placement(inventory)
        aliases: dict[str, Endpoint] = {}
        passed: list[Endpoint] = []
        for endpoint in endpoints:
            if is_ownership_record(endpoint):
                passed.append(endpoint)
                continue
            label = self._alias_label(endpoint)
            if label is None or label in aliases:
                continue
            aliases[label] = Endpoint(
                dns_name=dns_name_for(label, self._options.dns_domain),
                record_type="A",
                targets=inventory.ips_of(placement.carriers_of(label)),
                labels=endpoint.labels,
            )
        return [*(aliases[label] for label in sorted(aliases)), *passed]

    # -- ApplyChanges -----------------------------------------------------------------------

    def apply_changes(self, changes: Changes) -> None:
        if not self._apply_lock.acquire(blocking=False):
            raise ApplyError("another ApplyChanges is still running")
        try:
            self._applies_started += 1
            self._apply(changes)
        finally:
            self._apply_lock.release()

    def _apply(self, changes: Changes) -> None:
        inventory = self._inventory.fresh()
        claims_before = claimed_names(self._ownership.records())

        new_claims = [e for e in (*changes.create, *changes.update_new) if is_ownership_record(e)]
        kept_claim_keys = {e.key for e in new_claims}
        gone_claims = [
            e
            for e in (*changes.delete, *changes.update_old)
            if is_ownership_record(e) and e.key not in kept_claim_keys
        ]

        publish = self._labels(
            e for e in (*changes.create, *changes.update_new) if not is_ownership_record(e)
        )
        withdraw = (
            self._labels(e for e in (*changes.delete, *changes.update_old) if not is_ownership_record(e))
            - publish
        )

        not_owned = self._not_owned(publish | withdraw, claims_before | claimed_names(new_claims))
        publish -= not_owned
        withdraw -= not_owned
        refused = [f"{label}: no ownership record, the alias belongs to someone else" for label in not_owned]

        placement = self._placement(inventory)
        if publish and not placement.ingress:
            # An empty ingress set is far likelier a wrong selector or a cluster in trouble than a wish
            # to take every name off the air: refuse, loudly, rather than remove every alias.
            log.error(
                "no node matches the ingress selector: aliases are left where they are",
                aliases=sorted(publish),
                nodes_seen=len(inventory.nodes),
            )
            self._metrics.refused_changes_total.labels(reason="no_ingress_nodes").inc()
            refused += [f"{label}: no ingress node to carry it" for label in sorted(publish)]
            publish = set()
        wanted = {label: placement.carriers_of(label) for label in publish} | {
            label: frozenset() for label in withdraw
        }
        plan = plan_changes(
            inventory.server_states(),
            wanted,
            floor=self._options.index_floor,
            max_length=self._options.max_value_length,
            quota=self._servers.max_metadata_items() if wanted else 0,
            preferred=self._departed.preferred(),
        )
        self._departed.record(plan, withdrawn=withdraw)
        refused.extend(self._log_refusals(plan.refusals))
        self._log_plan(plan, len(inventory.server_states()))

        self._store_claims(upserts=new_claims, deletes=[])
        outcome = self._executor.execute(plan.servers)
        unfinished = outcome.failed_labels() | {r.label for r in plan.refusals}
        self._store_claims(
            upserts=[],
            deletes=[c for c in gone_claims if _label_of(owned_name(c)) not in unfinished],
        )
        self._finish(outcome, refused)

    # -- node health ------------------------------------------------------------------------

    def _placement(self, inventory: Inventory) -> Placement:
        verdicts = inventory.verdicts(self._options.health, self._clock())
        return Placement(
            ingress=inventory.ingress_server_ids(),
            eligible=inventory.eligible_server_ids(verdicts),
            current=carriers(inventory.server_states()),
        )

    def _report_health(self, inventory: Inventory) -> None:
        """Once per loop (Records opens it): metrics, and a log line whenever a node's verdict changes."""
        verdicts = inventory.verdicts(self._options.health, self._clock())
        out = [v for v in verdicts if not v.carries]
        kept = out if len(out) == len(verdicts) else []
        self._metrics.ingress_nodes_unhealthy.labels(state="grace").set(sum(v.in_grace for v in verdicts))
        self._metrics.ingress_nodes_unhealthy.labels(state="out").set(len(out))
        self._metrics.unhealthy_nodes_kept.set(len(kept))
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
                grace = self._options.health.grace_seconds
                log.warning(
                    "node unhealthy: it carries until its grace period ends",
                    node=node,
                    problems=_problems(verdict),
                    grace_seconds=grace,
                )
            else:
                log.warning("node unhealthy: it carries no alias", node=node, problems=_problems(verdict))
        self._verdicts = seen

    # -- helpers ----------------------------------------------------------------------------

    def _alias_label(self, endpoint: Endpoint) -> str | None:
        record_type = endpoint.record_type.upper()
        if record_type not in ALIAS_RECORD_TYPES:
            self._drop(endpoint, f"record type {record_type} cannot be a LanDB alias", "record_type")
            return None
        try:
            return label_for(endpoint.dns_name, self._options.dns_domain)
        except InvalidName as exc:
            self._drop(endpoint, str(exc), exc.kind)
            return None

    def _labels(self, endpoints: Iterable[Endpoint]) -> set[str]:
        return {label for e in endpoints if (label := self._alias_label(e)) is not None}

    def _drop(self, endpoint: Endpoint, reason: str, kind: str) -> None:
        self._metrics.dropped_endpoints_total.labels(reason=kind).inc()
        self._warn_once(f"{endpoint.dns_name} {endpoint.record_type}", f"endpoint dropped: {reason}")

    def _warn_once(self, subject: str, message: str) -> None:
        """Warn the first time; repeat at debug, so one bad Ingress does not flood every loop's log."""
        if (subject, message) in self._warned:
            log.debug(message, subject=subject)
        else:
            self._warned.add((subject, message))
            log.warning(message, subject=subject)

    def _unclaimed(self, labels: Iterable[str], claimed: set[str]) -> set[str]:
        """With the txt registry, aliases without a TXT claim are someone else's; with noop, none are."""
        if self._options.registry != "txt":
            return set()
        return {label for label in labels if dns_name_for(label, self._options.dns_domain) not in claimed}

    def _not_owned(self, labels: set[str], claimed: set[str]) -> set[str]:
        """The changes to refuse: aliases that are someone else's are never touched."""
        refused = self._unclaimed(labels, claimed)
        for label in sorted(refused):
            self._metrics.refused_changes_total.labels(reason="not_owned").inc()
            log.warning(
                "change refused: alias has no ownership record",
                alias=label,
                hint="external-dns only changes records it owns; this alias was set by someone else",
            )
        return refused

    def _without_orphaned_claims(
        self, claims: list[Endpoint], found: dict[str, set[str]], applies_before: int
    ) -> list[Endpoint]:
        """Drop the claims of aliases no server carries any more, and return the others.

        A removal that landed although it was reported failed (its reply lost, then no time left to
        retry) leaves its claim behind, and external-dns never deletes a claim whose record it no
        longer sees; kept, it would make an alias of that name set later by hand look like ours.
        Only when no apply ran since ``found`` was read: an apply stores a claim just before it
        writes the alias. A claim dropped while its name is still wanted is recreated by external-dns
        together with the alias.
        """
        orphaned = [c for c in claims if self._claimed_label(c) not in (None, *found)]
        if not orphaned or self._options.dry_run or not self._apply_lock.acquire(blocking=False):
            return claims
        try:
            if self._applies_started != applies_before:
                return claims
            self._ownership.apply([], orphaned)
        finally:
            self._apply_lock.release()
        log.warning(
            "ownership records dropped: no server carries their alias any more",
            records=sorted(c.dns_name for c in orphaned),
        )
        return [c for c in claims if c not in orphaned]

    def _claimed_label(self, claim: Endpoint) -> str | None:
        try:
            return label_for(owned_name(claim), self._options.dns_domain)
        except InvalidName:
            return None

    def _report_unowned(self, found: dict[str, set[str]], claims: Sequence[Endpoint]) -> None:
        for label in sorted(self._unclaimed(found, claimed_names(claims))):
            self._warn_once(label, "alias held by someone else (no ownership record): left untouched")

    def _log_refusals(self, refusals: Sequence[Refusal]) -> list[str]:
        for refusal in refusals:
            self._metrics.refused_changes_total.labels(reason="plan").inc()
            log.warning(
                "change refused",
                alias=refusal.label,
                node=refusal.server.node_name,
                server=refusal.server.server_name,
                reason=refusal.reason,
            )
        return [f"{r.label} on {r.server.node_name}: {r.reason}" for r in refusals]

    def _log_plan(self, plan: Plan, servers_seen: int) -> None:
        log.info(
            "apply planned",
            servers_seen=servers_seen,
            servers_to_write=len(plan.servers),
            servers_unchanged=servers_seen - len(plan.servers),
            dry_run=self._options.dry_run,
        )

    def _store_claims(self, *, upserts: Sequence[Endpoint], deletes: Sequence[Endpoint]) -> None:
        if not upserts and not deletes:
            return
        if self._options.dry_run:
            log.info(
                "dry run: ownership records not stored",
                stored=[e.dns_name for e in upserts],
                deleted=[e.dns_name for e in deletes],
            )
            return
        self._ownership.apply(upserts, deletes)
        log.info(
            "ownership records stored",
            stored=[e.dns_name for e in upserts],
            deleted=[e.dns_name for e in deletes],
        )

    def _finish(self, outcome: Outcome, refused: list[str]) -> None:
        problems = [f.reason for f in outcome.failures] + refused
        problems += [f"{p.server.node_name}: removal held back" for p in outcome.held_back]
        if problems:
            raise ApplyError(f"{len(problems)} change(s) did not land: " + "; ".join(problems[:5]))
        self._metrics.last_apply_success_timestamp_seconds.set_to_current_time()


def _problems(verdict: Verdict) -> str:
    return ", ".join(verdict.problems)


def _label_of(dns_name: str) -> str:
    return dns_name.split(".", 1)[0]
