"""The provider: Records, AdjustEndpoints and ApplyChanges over the ports and the landb domain core.

One ApplyChanges, in order (docs/architecture.md, invariants 3 and 4):
1. read a fresh inventory and the ownership records;
2. turn the change set into "alias -> servers that must carry it", for the aliases it names only;
3. refuse what we do not own (registry ``txt``: no TXT claim) and what cannot be an alias;
4. refuse the whole change set if it would take too many aliases off the air at once (the removal guard);
5. plan (landb.plan), store new TXT claims, write every addition, then every removal;
6. drop the TXT claims of aliases whose removal landed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from threading import Lock

import structlog

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint
from landb_webhook.landb.names import InvalidName, dns_name_for, label_for
from landb_webhook.landb.plan import Plan, Refusal, plan_changes
from landb_webhook.logs import RepeatLimitedLog
from landb_webhook.metrics import Metrics
from landb_webhook.ports import NodeSource, OwnershipStore, ServerStore, UpstreamError, WriterLease
from landb_webhook.provider.adopt import adoptable
from landb_webhook.provider.background import BackgroundWork
from landb_webhook.provider.executor import Outcome, PlanExecutor
from landb_webhook.provider.health import DepartedIndices, HealthPolicy, Placement, Verdict
from landb_webhook.provider.interface import ApplyError, ApplyRefused, Readiness
from landb_webhook.provider.inventory import Inventory, InventoryReader
from landb_webhook.provider.ownership import claimed_names, is_ownership_record, owned_name
from landb_webhook.provider.status import analyse

log = structlog.get_logger(__name__)

ALIAS_RECORD_TYPES = frozenset({"A", "AAAA", "CNAME"})


@dataclass(frozen=True)
class RemovalGuard:
    """How many aliases one apply may take off the air before it is refused as a likely mistake.

    A source misconfigured or a namespace deleted shows up as external-dns deleting a large share of the
    names at once; LanDB would publish that within 15 minutes. An apply withdrawing at least
    ``min_count`` aliases and more than ``max_share`` of those currently published is refused whole
    (nothing is written, additions included) unless ``allow`` is set.
    """

    max_share: float = 0.5
    min_count: int = 5
    allow: bool = False

    def trips(self, withdrawn: int, published: int) -> bool:
        return not self.allow and withdrawn >= self.min_count and withdrawn > self.max_share * published


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
    adopt_existing: bool = False
    removal_guard: RemovalGuard = field(default_factory=RemovalGuard)


class RemovalRefused(ApplyRefused):
    """The removal guard refused an apply; nothing was written."""


class NotTheWriter(ApplyRefused):
    """Another replica holds the writer lease; nothing was written."""


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
        writer_lease: WriterLease | None = None,
    ) -> None:
        """``clock`` gives epoch seconds, compared with the API's timestamps for the grace period;
        ``writer_lease`` None: this is the only replica, it always writes."""
        self._nodes = nodes
        self._writer_lease = writer_lease
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
        self._applying = False  # the apply lock is held by an apply, not by a drop of orphaned claims
        self._orphan_drops = BackgroundWork("landb-orphaned-claims")
        self._warnings = RepeatLimitedLog(log)
        self._departed = DepartedIndices()
        self._verdicts: dict[str, Verdict] = {}
        """The verdicts the last Records saw, so a change of health is logged once."""

    # -- negotiation and health -------------------------------------------------------------

    def domain_filter(self) -> DomainFilter:
        return DomainFilter(include=self._options.domain_filter)

    def readiness(self) -> Readiness:
        try:
            nodes = self._nodes.nodes()
        except UpstreamError as error:
            return Readiness(False, str(error))
        except Exception as error:  # not ready, whatever the reason
            return Readiness(False, f"node inventory unusable: {type(error).__name__}")
        problem = self._servers.unavailable()
        if problem is not None:
            return Readiness(False, f"the last OpenStack call failed: {problem}")
        return Readiness(True, f"node cache synced ({len(nodes)} nodes), no recent OpenStack failure")

    # -- Records ----------------------------------------------------------------------------

    def records(self) -> list[Endpoint]:
        applies_before = self._applies_started
        inventory = self._inventory.fresh()
        for node in inventory.unresolved_nodes():
            self._warn_once(node, "no Nova server found for this node; its aliases are not seen")
        found = inventory.carriers()
        self._report_health(inventory)
        claims = self._without_orphaned_claims(list(self._ownership.records()), found, applies_before)
        hidden = self._offered_for_adoption(inventory, claims)
        aliases = [
            Endpoint(dns_name_for(label, self._options.dns_domain), "A", inventory.ips_of(ids))
            for label, ids in sorted(found.items())
            if label not in hidden
        ]
        self._report_unowned(found.keys() - hidden, claims)
        self._report_frozen_outside_ingress(inventory)
        self._metrics.ingress_nodes.set(len(inventory.ingress_server_ids()))
        self._metrics.aliases_managed.set(len(found))
        self._metrics.last_successful_sync_timestamp_seconds.set_to_current_time()
        return [*aliases, *self._plain_alias_records(inventory), *claims]

    def _plain_alias_records(self, inventory: Inventory) -> list[Endpoint]:
        """Plain (CNAME) aliases, reported so that external-dns sees their names as taken.

        As CNAME records to the hosts LanDB points them at, with no owner: the txt registry then never
        updates or deletes them, and creates nothing beside them (it creates only where every record of
        a name is its own). The noop registry has no owners, so with ``sync`` it would ask to delete them
        every loop: they are not reported then, and AdjustEndpoints keeps their names out of the plan.
        """
        found = inventory.plain_aliases(self._options.dns_domain)
        for label, hosts in sorted(found.items()):
            self._warn_once(
                label, "plain (CNAME) alias set by someone else: never written", hosts=sorted(hosts)
            )
        if self._options.registry != "txt":
            return []
        return [
            Endpoint(dns_name_for(label, self._options.dns_domain), "CNAME", tuple(sorted(hosts)))
            for label, hosts in sorted(found.items())
        ]

    def _report_frozen_outside_ingress(self, inventory: Inventory) -> None:
        """An alias in a key or form we never edit on a node that must not carry it stays published there:
        nothing we write changes that, so it is said once, and AdjustEndpoints counts it as a carrier."""
        ingress = inventory.ingress_server_ids()
        names = {s.server_id: s.node_name for s in inventory.server_states()}
        for label, ids in sorted(inventory.frozen_carriers().items()):
            if outside := sorted(names[i] for i in ids - ingress):
                self._warn_once(
                    label,
                    "alias held in a key or form we never edit on a non-ingress node: it stays published "
                    "there until removed by hand",
                    nodes=outside,
                )

    # -- AdjustEndpoints --------------------------------------------------------------------

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        """Rewrite the desired endpoints into exactly what Records will report once they are applied."""
        inventory = self._inventory.recent()
        placement = self._placement(inventory)
        found, frozen = inventory.carriers(), inventory.frozen_carriers()
        plain = inventory.plain_aliases(self._options.dns_domain)
        aliases: dict[str, Endpoint] = {}
        passed: list[Endpoint] = []
        for endpoint in endpoints:
            if is_ownership_record(endpoint):
                passed.append(endpoint)
                continue
            label = self._alias_label(endpoint)
            if label is None or label in aliases:
                continue
            if label in plain and label not in found:
                reason = (
                    f"{label} is a plain (CNAME) alias set by someone else; remove it to publish the name"
                )
                self._drop(endpoint, reason, "plain_alias")
                continue
            # What Records will report once applied: the carriers placed, plus whoever holds the alias in a
            # form we never edit; beside a plain alias nothing is added, so what carries it now.
            carried = (
                found[label] if label in plain else placement.carriers_of(label) | frozen.get(label, set())
            )
            aliases[label] = Endpoint(
                dns_name=dns_name_for(label, self._options.dns_domain),
                record_type="A",
                targets=inventory.ips_of(carried),
                labels=endpoint.labels,
            )
        return [*(aliases[label] for label in sorted(aliases)), *passed]

    # -- ApplyChanges -----------------------------------------------------------------------

    def apply_changes(self, changes: Changes) -> None:
        self._require_writer_lease()
        # A drop of orphaned claims the last Records started holds the apply lock only briefly: let it
        # finish rather than answer 503, so the apply plans from the claims as they are after it.
        self._orphan_drops.wait()
        if not self._apply_lock.acquire(blocking=False):
            raise ApplyError("another ApplyChanges is still running")
        try:
            self._applies_started += 1
            self._applying = True
            self._apply(changes)
        finally:
            self._applying = False
            self._apply_lock.release()

    def _apply(self, changes: Changes) -> None:
        started = time.monotonic()
        inventory = self._inventory.fresh()
        claim_records = self._ownership.records()
        claims_before = claimed_names(claim_records)

        new_claims = [e for e in (*changes.create, *changes.update_new) if is_ownership_record(e)]
        kept_claim_keys = {e.key for e in new_claims}
        gone_claims = [
            e
            for e in (*changes.delete, *changes.update_old)
            if is_ownership_record(e) and e.key not in kept_claim_keys
        ]

        # Records reports nothing as a CNAME but plain aliases (AdjustEndpoints turns every desired CNAME
        # into an A record): a change of a CNAME would overwrite or delete one.
        plain_changes = [
            e for e in (*changes.update_old, *changes.update_new, *changes.delete) if _is_cname(e)
        ]
        publish = self._labels(
            e
            for e in (*changes.create, *changes.update_new)
            if not is_ownership_record(e) and e not in plain_changes
        )
        withdraw = (
            self._labels(
                e
                for e in (*changes.delete, *changes.update_old)
                if not is_ownership_record(e) and not _is_cname(e)
            )
            - publish
        )

        not_owned = self._not_owned(publish | withdraw, claims_before | claimed_names(new_claims))
        taken = self._refused_takeovers(inventory, publish - not_owned, claim_records)
        new_claims = [c for c in new_claims if _label_of(owned_name(c)) not in taken]
        not_owned |= taken
        publish -= not_owned
        withdraw -= not_owned
        refused = [f"{label}: no ownership record, the alias belongs to someone else" for label in not_owned]
        refused += self._refuse_plain_alias_changes(plain_changes)

        placement = self._placement(inventory)
        self._guard_removals(withdraw, placement.current)
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

        beside_plain = {r.label for r in plan.refusals if r.kind == "plain_alias"}
        self._store_claims(
            upserts=[c for c in new_claims if _label_of(owned_name(c)) not in beside_plain], deletes=[]
        )
        outcome = self._executor.execute(plan.servers)
        # A frozen holder keeps the alias whatever we do: once our tokens are gone the name is someone
        # else's, so its claim goes too (else external-dns would ask to delete it every loop).
        unfinished = outcome.failed_labels() | {r.label for r in plan.refusals if r.kind != "frozen"}
        self._store_claims(
            upserts=[],
            deletes=[c for c in gone_claims if _label_of(owned_name(c)) not in unfinished],
        )
        self._log_summary(plan, len(inventory.server_states()), outcome, len(refused), started)
        self._finish(outcome, refused)

    # -- node health ------------------------------------------------------------------------

    def _placement(self, inventory: Inventory) -> Placement:
        verdicts = inventory.verdicts(self._options.health, self._clock())
        return Placement(
            ingress=inventory.ingress_server_ids(),
            eligible=inventory.eligible_server_ids(verdicts),
            current=inventory.carriers(),
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

    def _require_writer_lease(self) -> None:
        """Single writer: a replica that does not hold the lease refuses to apply anything."""
        if self._writer_lease is None or self._writer_lease.held():
            return
        holder = self._writer_lease.holder()
        self._metrics.refused_changes_total.labels(reason="not_the_writer").inc()
        log.warning("apply refused: another replica holds the writer lease", holder=holder)
        raise NotTheWriter(f"not the writer: the writer lease is held by {holder}")

    def _guard_removals(self, withdraw: set[str], published: Mapping[str, Iterable[str]]) -> None:
        """THE REMOVAL GUARD: refuse, before anything is written, an apply that withdraws too many aliases."""
        guard = self._options.removal_guard
        going = sorted(label for label in withdraw if any(published.get(label, ())))
        if not guard.trips(len(going), len(published)):
            if going and guard.allow:
                log.info("removal guard disabled: withdrawing", aliases=len(going), published=len(published))
            return
        self._metrics.refused_changes_total.labels(reason="removal_guard").inc()
        log.error(
            "apply refused: it would remove too many aliases at once",
            withdrawn=len(going),
            published=len(published),
            max_share=guard.max_share,
            min_count=guard.min_count,
            aliases=going[:20],
            hint="if intended, set LANDB_ALLOW_MASS_REMOVAL=true for one loop",
        )
        raise RemovalRefused(
            f"removal guard: the apply would remove {len(going)} of {len(published)} aliases "
            f"(more than {guard.max_share:.0%}); nothing was written. "
            "Set LANDB_ALLOW_MASS_REMOVAL=true if this is intended"
        )

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
        resource = endpoint.label("resource")  # the Ingress or Service asking: ingress/<namespace>/<name>
        self._warn_once(
            f"{endpoint.dns_name} {endpoint.record_type}",
            f"endpoint dropped: {reason}",
            **({"resource": resource} if resource else {}),
        )

    def _warn_once(self, subject: str, message: str, **fields: object) -> None:
        """Warn once per period (logs.REPEAT_PERIOD_SECONDS), with how many repeats were skipped: one bad
        Ingress does not flood every loop's log, and the memory of what was said stays bounded."""
        self._warnings.warning((subject, message), message, subject=subject, **fields)

    def _unclaimed(self, labels: Iterable[str], claimed: set[str]) -> set[str]:
        """With the txt registry, aliases without a TXT claim are someone else's; with noop, none are."""
        if self._options.registry != "txt":
            return set()
        return {label for label in labels if dns_name_for(label, self._options.dns_domain) not in claimed}

    def _not_owned(self, labels: set[str], claimed: set[str]) -> set[str]:
        """The changes to refuse: aliases that are someone else's are never touched."""
        refused = self._unclaimed(labels, claimed)
        for label in sorted(refused):
            self._refuse_not_owned(
                label,
                "change refused: alias has no ownership record",
                "external-dns only changes records it owns; this alias was set by someone else",
            )
        return refused

    def _refuse_not_owned(self, label: str, message: str, hint: str) -> None:
        self._metrics.refused_changes_total.labels(reason="not_owned").inc()
        log.warning(message, alias=label, hint=hint)

    def _offered_for_adoption(self, inventory: Inventory, claims: Sequence[Endpoint]) -> set[str]:
        """With LANDB_ADOPT_EXISTING, the unclaimed aliases Records leaves out: external-dns then sees
        their names as free, and a desired one comes back as a create with its claim (``_apply``)."""
        if not self._options.adopt_existing:
            return set()
        status = analyse(inventory, claims, domain=self._options.dns_domain)
        offered = {name.label for name in status.names if adoptable(name)}
        for label in sorted(offered):
            self._warn_once(label, "alias without ownership record: external-dns may adopt it")
        return offered

    def _refused_takeovers(
        self, inventory: Inventory, publish: set[str], claims_before: Sequence[Endpoint]
    ) -> set[str]:
        """Creates of aliases that already exist without a claim: adopted (their carriers keep their N)
        with LANDB_ADOPT_EXISTING when adoption is safe, refused otherwise."""
        existing = self._unclaimed(publish & inventory.carriers().keys(), claimed_names(claims_before))
        if not existing:
            return set()
        status = analyse(inventory, claims_before, domain=self._options.dns_domain)
        refused: set[str] = set()
        for label in sorted(existing):
            name = status.name(label)
            if self._options.adopt_existing and name is not None and adoptable(name):
                log.warning(
                    "existing alias adopted: external-dns claimed it, its carriers keep their N", alias=label
                )
                continue
            refused.add(label)
            self._refuse_not_owned(
                label,
                "change refused: the alias exists without ownership record",
                "set LANDB_ADOPT_EXISTING=true or run 'landb-webhook adopt' to hand it to external-dns",
            )
        return refused

    def _without_orphaned_claims(
        self, claims: list[Endpoint], found: dict[str, set[str]], applies_before: int
    ) -> list[Endpoint]:
        """The claims but those of aliases no server carries any more, which are dropped in the background.

        A removal that landed although it was reported failed (its reply lost, then no time left to
        retry) leaves its claim behind, and external-dns never deletes a claim whose record it no
        longer sees; kept, it would make an alias of that name set later by hand look like ours.
        Only when no apply runs or ran since ``found`` was read: an apply stores a claim just before
        it writes the alias. A claim dropped while its name is still wanted is recreated by external-dns
        together with the alias. Records itself writes nothing: the drop runs off the request path,
        under the apply lock, and only if still no apply has started (_drop_orphaned_claims).
        """
        orphaned = [c for c in claims if self._claimed_label(c) not in (None, *found)]
        # A running drop holds the apply lock too, but it only removes what is left out here.
        busy = self._applying or self._applies_started != applies_before
        if not orphaned or self._options.dry_run or busy:
            return claims
        self._orphan_drops.offer(self._drop_orphaned_claims, orphaned, applies_before)
        return [c for c in claims if c not in orphaned]

    def _drop_orphaned_claims(self, orphaned: list[Endpoint], applies_before: int) -> None:
        """In the background: drop what Records found orphaned, unless an apply started since (it may
        have stored one of these claims again); then the next Records decides afresh."""
        if not self._apply_lock.acquire(blocking=False):
            return
        try:
            if self._applies_started != applies_before:
                return
            self._ownership.apply([], orphaned)
        finally:
            self._apply_lock.release()
        log.warning(
            "ownership records dropped: no server carries their alias any more",
            records=sorted(c.dns_name for c in orphaned),
        )

    def close(self, timeout: float | None = None) -> bool:
        """Stop the background work (at shutdown); False if a drop still runs after ``timeout`` s."""
        return self._orphan_drops.close(timeout)

    def _claimed_label(self, claim: Endpoint) -> str | None:
        try:
            return label_for(owned_name(claim), self._options.dns_domain)
        except InvalidName:
            return None

    def _report_unowned(self, found: Iterable[str], claims: Sequence[Endpoint]) -> None:
        for label in sorted(self._unclaimed(found, claimed_names(claims))):
            self._warn_once(label, "alias held by someone else (no ownership record): left untouched")

    def _log_refusals(self, refusals: Sequence[Refusal]) -> list[str]:
        """Log and count each refusal; return those a later loop may land (the others are said once)."""
        problems: list[str] = []
        for refusal in refusals:
            self._metrics.refused_changes_total.labels(
                reason="plan" if refusal.kind == "capacity" else refusal.kind
            ).inc()
            if refusal.kind == "frozen":
                # No retry changes it, and Records and AdjustEndpoints count the holder as a carrier.
                self._warn_once(
                    refusal.label,
                    "alias held in a key or form we never edit: left in place",
                    node=refusal.server.node_name,
                )
                continue
            log.warning(
                "change refused",
                alias=refusal.label,
                node=refusal.server.node_name,
                server=refusal.server.server_name,
                reason=refusal.reason,
            )
            problems.append(f"{refusal.label} on {refusal.server.node_name}: {refusal.reason}")
        return problems

    def _refuse_plain_alias_changes(self, changes: Sequence[Endpoint]) -> list[str]:
        for endpoint in changes:
            self._metrics.refused_changes_total.labels(reason="plain_alias").inc()
            log.warning(
                "change refused: a plain (CNAME) alias is never deleted or overwritten",
                alias=endpoint.dns_name,
                hint="it was set by someone else; only they can remove it",
            )
        return [f"{e.dns_name}: plain (CNAME) alias, never deleted or overwritten" for e in changes]

    def _log_summary(
        self, plan: Plan, nodes_seen: int, outcome: Outcome, refused: int, started: float
    ) -> None:
        """One info line per apply for the operator: ``+3 -1 aliases on 2 of 5 nodes, 0 failed, 412 ms``."""
        added = sum(len(p.added) for p in plan.servers)
        removed = sum(len(p.removed) for p in plan.servers)
        failed = len({f.plan.server.server_id for f in outcome.failures})
        duration_ms = round((time.monotonic() - started) * 1000)
        parts = [
            f"+{added} -{removed} aliases on {len(plan.servers)} of {nodes_seen} nodes",
            f"{failed} failed",
            f"{duration_ms} ms",
        ]
        parts += [
            f"{count} {what}"
            for count, what in ((len(outcome.held_back), "held back"), (refused, "refused"))
            if count
        ]
        if self._options.dry_run:
            parts.append("dry run: nothing written")
        log.info(
            "apply finished",
            summary=", ".join(parts),
            aliases_added=added,
            aliases_removed=removed,
            nodes_written=len(plan.servers),
            nodes_seen=nodes_seen,
            nodes_failed=failed,
            held_back=len(outcome.held_back),
            refused=refused,
            duration_ms=duration_ms,
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
        self._metrics.last_successful_sync_timestamp_seconds.set_to_current_time()


def _problems(verdict: Verdict) -> str:
    return ", ".join(verdict.problems)


def _is_cname(endpoint: Endpoint) -> bool:
    return endpoint.record_type.upper() == "CNAME"


def _label_of(dns_name: str) -> str:
    return dns_name.split(".", 1)[0]
