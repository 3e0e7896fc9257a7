"""The provider: Records, AdjustEndpoints and ApplyChanges over the ports and the landb domain core.

One ApplyChanges, in order (docs/architecture.md, invariants 3 and 4):
1. read a fresh inventory and the ownership records;
2. turn the change set into "alias -> servers that must carry it", for the aliases it names only;
3. refuse what we do not own (registry ``txt``: no TXT claim stored before this apply, or created in it
   together with the alias itself) and what cannot be an alias;
4. refuse the whole change set if it would take too many aliases off the air at once (the removal guard);
5. plan (landb.plan), store new TXT claims, write every addition, then every removal;
6. drop the TXT claims of aliases whose removal landed, and those of aliases no server carried and none
   was wanted (a removal that landed though reported failed leaves one behind).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from threading import Lock

import structlog

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint
from landb_webhook.landb.names import InvalidName, dns_name_for, label_for
from landb_webhook.landb.plan import Plan, Refusal, ServerState, plan_changes
from landb_webhook.logs import RepeatLimitedLog
from landb_webhook.metrics import Metrics
from landb_webhook.ports import (
    NodeSource,
    OwnershipStore,
    Server,
    ServerStore,
    StateStore,
    UpstreamError,
    WriterLease,
)
from landb_webhook.provider import departed as departed_servers
from landb_webhook.provider.adopt import adoptable
from landb_webhook.provider.departed import Remembered, holds_owned, owned_slot_labels, remembered_after
from landb_webhook.provider.executor import Outcome, PlanExecutor
from landb_webhook.provider.fence import UNFENCED, WriteFence, WriterLeaseLost
from landb_webhook.provider.health import DepartedIndices, HealthPolicy, Placement, Verdict
from landb_webhook.provider.interface import ApplyError, ApplyRefused, Readiness
from landb_webhook.provider.inventory import Inventory, InventoryReader
from landb_webhook.provider.ownership import claimed_names, is_ownership_record, owned_name
from landb_webhook.provider.removals import DEFAULT_WINDOW_SECONDS, WINDOW_STATE_KEY, RemovalWindow
from landb_webhook.provider.status import ClusterStatus, analyse

log = structlog.get_logger(__name__)

ALIAS_RECORD_TYPES = frozenset({"A", "AAAA", "CNAME"})


@dataclass(frozen=True)
class RemovalGuard:
    """How many aliases may go off the air within one window before an apply is refused as a likely mistake.

    A source misconfigured or a namespace deleted shows up as external-dns deleting a large share of the
    names; LanDB would publish that within 15 minutes. An apply after which at least ``min_count``
    owned aliases, and more than ``max_share`` of those published at the window's start, were withdrawn
    within the last ``window_seconds`` is refused whole (nothing is written, additions included) unless
    ``allow`` is set. What counts is worked out by provider.removals.RemovalWindow.
    """

    max_share: float = 0.5
    min_count: int = 5
    allow: bool = False
    window_seconds: float = DEFAULT_WINDOW_SECONDS

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
    write_fence_margin: float = 5.0
    """Seconds the writer lease must surely last for a write to be sent: the upstream timeout."""


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
        state: StateStore | None = None,
    ) -> None:
        """``clock`` gives epoch seconds, compared with the API's timestamps for the grace period and
        stamping the removal window; ``writer_lease`` None: this is the only replica, it always writes;
        ``state`` None: what must survive a restart is kept in memory only."""
        self._nodes = nodes
        self._writer_lease = writer_lease
        self._servers = servers
        self._ownership = ownership
        self._options = options
        self._metrics = metrics
        self._clock = clock
        self._state = state
        self._stored: dict[str, str] | None = None
        """What the state store held when last read or written; None until it was read."""
        self._remembered: dict[str, Remembered] = {}
        """Server id -> the servers that held owned tokens when last seen (provider.departed)."""
        self._inventory = InventoryReader(
            nodes, servers, max_age=options.inventory_max_age, departed=self._servers_to_look_for
        )
        self._executor = PlanExecutor(
            servers, concurrency=options.write_concurrency, dry_run=options.dry_run, metrics=metrics
        )
        self._apply_lock = Lock()
        self._applying = False
        self._warnings = RepeatLimitedLog(log)
        self._departed = DepartedIndices()
        self._removals = RemovalWindow(options.removal_guard.window_seconds)
        """The applies of the last removal window, for the removal guard."""
        self._verdicts: dict[str, Verdict] = {}
        """The verdicts the last Records saw, so a change of health is logged once."""
        self._analysed: tuple[object, ClusterStatus] | None = None
        """The last status analysis and what it was made from (``_analysis``)."""

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
            return Readiness(False, f"OpenStack: {problem}")
        return Readiness(True, f"node cache synced ({len(nodes)} nodes), no recent OpenStack failure")

    # -- Records ----------------------------------------------------------------------------

    def records(self) -> list[Endpoint]:
        inventory = self._inventory.fresh()
        for node in inventory.unresolved_nodes():
            self._warn_once(node, "no Nova server found for this node; its aliases are not seen")
        found = inventory.carriers()
        self._report_health(inventory)
        claims = self._without_orphaned_claims(self._ownership.records(), found)
        hidden = self._offered_for_adoption(inventory, claims) | self._held_only_frozen_under_noop(inventory)
        aliases = [
            Endpoint(dns_name_for(label, self._options.dns_domain), "A", inventory.ips_of(ids))
            for label, ids in sorted(found.items())
            if label not in hidden
        ]
        unowned = self._unclaimed(found.keys(), claimed_names(claims))
        self._report_unowned(inventory, unowned - hidden)
        self._report_frozen_outside_ingress(inventory)
        self._metrics.ingress_nodes.set(len(inventory.ingress_server_ids()))
        self._report_aliases(inventory, claims, unowned=len(unowned))
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

    def _held_only_frozen_under_noop(self, inventory: Inventory) -> set[str]:
        """Registry noop: the aliases held only in a key or form we never edit, which are not reported.

        noop has no owners, so with ``sync`` external-dns would ask every loop to delete such an alias, and
        nothing we write removes it (as with plain aliases). An alias we also hold in a slot is reported
        with all its carriers, frozen ones included: deleting it removes our tokens, what is left is frozen
        only and drops out of Records, and the loop settles. AdjustEndpoints agrees (``adjust_endpoints``).
        """
        if self._options.registry == "txt":
            return set()
        frozen = inventory.frozen_carriers()
        if not frozen:
            return set()
        in_slots = {
            label
            for state in inventory.server_states()
            for _, label, _ in state.aliases.editable_load()
            if label in frozen
        }
        return frozen.keys() - in_slots

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
        only_frozen = self._held_only_frozen_under_noop(inventory)
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
            if label in only_frozen and placement.carriers_of(label) <= frozen[label]:
                # Records leaves it out, and no token of ours would be written (a frozen holder gets none).
                reason = (
                    f"{label} is held only in a key or form we never edit, on every node that would carry it"
                )
                self._drop(endpoint, reason, "frozen_alias")
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
        fence = self._require_writer_lease()
        if not self._apply_lock.acquire(blocking=False):
            raise ApplyError("another ApplyChanges is still running")
        try:
            self._applying = True
            self._apply(changes, fence)
        except WriterLeaseLost:
            # The claims stay as they are: a claim without its alias is re-created or dropped later.
            self._metrics.refused_changes_total.labels(reason="writer_lease_lost").inc()
            raise
        finally:
            self._applying = False
            self._apply_lock.release()

    def _apply(self, changes: Changes, fence: WriteFence) -> None:
        started = time.monotonic()
        self._load_state()
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

        # A claim makes its alias ours only when stored before this apply, or created in it together with
        # the alias itself: one smuggled beside an update or a deletion grants nothing.
        created = publish & self._created_labels(changes)
        claimed_with_alias = {
            dns_name_for(label, self._options.dns_domain)
            for claim in new_claims
            if (label := self._claimed_label(claim)) in created
        }
        not_owned = self._not_owned(inventory, publish | withdraw, claims_before | claimed_with_alias)
        taken = self._refused_takeovers(inventory, publish - not_owned, claim_records)
        not_owned |= taken
        publish -= not_owned
        withdraw -= not_owned
        refused = [f"{label}: no ownership record, the alias belongs to someone else" for label in not_owned]
        new_claims, gone_claims, refused_claims = self._claim_changes(
            new_claims, gone_claims, publish=publish, withdraw=withdraw, not_owned=not_owned
        )
        refused += refused_claims
        refused += self._refuse_plain_alias_changes(plain_changes)
        carried_or_wanted = inventory.carriers().keys() | publish

        placement = self._placement(inventory)
        self._guard_removals(withdraw, publish, placement.current)
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
        owned = claims_before | claimed_names(new_claims)
        wanted |= self._departed_moves(inventory, placement, wanted, self._owned_test(owned))
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
        stored = [c for c in new_claims if self._claimed_label(c) not in beside_plain]
        self._store_claims(upserts=stored, deletes=[], fence=fence)
        outcome = self._executor.execute(plan.servers, fence)
        if outcome.abandoned is not None:
            raise outcome.abandoned
        # A frozen holder keeps the alias whatever we do: once our tokens are gone the name is someone
        # else's, so its claim goes too (else external-dns would ask to delete it every loop).
        unfinished = outcome.failed_labels() | {r.label for r in plan.refusals if r.kind != "frozen"}
        dropped = self._drop_claims(
            [c for c in gone_claims if self._claimed_label(c) not in unfinished],
            self._orphaned_claims(claim_records, carried_or_wanted),
            fence,
        )
        carried_before = inventory.carriers().keys()
        self._log_summary(
            plan,
            len(inventory.server_states()),
            outcome,
            len(refused),
            started,
            created=(publish - carried_before) - unfinished,
            removed=(withdraw & carried_before) - unfinished,
        )
        owned_after = (claims_before | claimed_names(stored)) - claimed_names(dropped)
        self._remember_servers(inventory, plan, fence, owned_after)
        self._finish(outcome, refused)

    def _drop_claims(
        self, gone: list[Endpoint], orphaned: list[Endpoint], fence: WriteFence
    ) -> list[Endpoint]:
        """After the break writes: the claims of the aliases withdrawn, and those no server carried and
        no change wanted (a removal that landed although reported failed leaves one behind); returns
        the claims dropped."""
        gone_keys = {c.key for c in gone}
        orphaned = [c for c in orphaned if c.key not in gone_keys]
        self._store_claims(upserts=[], deletes=[*gone, *orphaned], fence=fence)
        if orphaned and not self._options.dry_run:
            log.warning(
                "ownership records dropped: no server carries their alias any more",
                records=_named(c.dns_name for c in orphaned),
            )
        return [*gone, *orphaned]

    # -- departed servers and the state that survives a restart -----------------------------

    def _servers_to_look_for(self) -> list[Remembered]:
        if self._stored is None:  # the first Records of this process; then each apply reads it
            self._load_state(window=False)
        return list(self._remembered.values())

    def _load_state(self, *, window: bool = True) -> None:
        """Read the state store and merge it into what is in memory: another replica may have written it
        since, and what this one knows may not have been stored (a failed write). Only an apply, which
        holds the apply lock, takes the removal window: the guard changes it under that lock."""
        try:
            stored = dict(self._state.load() if self._state is not None else self._stored or {})
        except UpstreamError as error:
            log.warning(
                "webhook state not read: departed servers and the removal window as in memory",
                reason=error.reason,
            )
            if self._stored is None:
                self._stored = {}  # Records does not ask again: the next apply does
            return
        self._stored = stored
        try:
            remembered = departed_servers.from_json(stored.get(departed_servers.STATE_KEY, "{}"))
            stored_window = RemovalWindow.from_json(
                stored.get(WINDOW_STATE_KEY, "[]"), self._removals.seconds
            )
        except ValueError as error:
            log.warning("webhook state unreadable: ignored", error=str(error))
            return
        self._remembered = remembered | self._remembered
        if window:
            self._removals = self._removals.merged(stored_window)

    def _owned_test(self, claimed: set[str]) -> Callable[[str], bool]:
        if self._options.registry != "txt":
            return lambda label: True
        return lambda label: dns_name_for(label, self._options.dns_domain) in claimed

    def _departed_moves(
        self,
        inventory: Inventory,
        placement: Placement,
        wanted: Mapping[str, frozenset[str]],
        owned: Callable[[str], bool],
    ) -> dict[str, frozenset[str]]:
        """The owned aliases a departed server holds, each to its carriers: the plan makes them there
        before it breaks them on the departed server. One with no carrier at all stays where it is."""
        moves: dict[str, frozenset[str]] = {}
        states = {state.server_id: state for state in inventory.server_states()}
        for gone, _ in inventory.departed:
            labels = sorted(owned_slot_labels(states[gone.server_id], owned))
            moving = {label: placement.carriers_of(label) for label in labels if label not in wanted}
            moves |= {label: carriers for label, carriers in moving.items() if carriers}
            if labels:
                log.warning(
                    "node left the cluster while its server runs: its aliases go to their carriers, "
                    "then off the server",
                    node=gone.node_name,
                    server_id=gone.server_id,
                    aliases=labels,
                )
        return moves

    def _remember_servers(
        self, inventory: Inventory, plan: Plan, fence: WriteFence, claimed: set[str]
    ) -> None:
        """After the writes: remember the servers holding owned tokens (``claimed``: the names claimed
        once the apply's claims were stored and dropped), forget the departed ones cleaned or deleted,
        and store that and the removal window when they changed (provider.departed)."""
        if self._options.dry_run:
            return
        owned = self._owned_test(claimed)
        given = {server_plan.server.server_id for server_plan in plan.servers if server_plan.added}
        written = {server_plan.server.server_id for server_plan in plan.servers}
        states = {state.server_id: state for state in inventory.server_states()}
        carrying = {
            server.id: Remembered(server.id, node.name, node.internal_ips)
            for node in inventory.nodes
            if (server := inventory.servers.get(node.name)) is not None
            and (server.id in given or holds_owned(states[server.id], owned))
        }
        departed_now: dict[str, ServerState | None] = dict.fromkeys(inventory.departed_gone)
        for gone, _ in inventory.departed:
            if gone.server_id not in written:
                departed_now[gone.server_id] = states[gone.server_id]
                continue
            try:  # what the writes left on it
                now = self._servers.server(gone.server_id)
            except UpstreamError:
                continue  # not known: remembered as it is
            departed_now[gone.server_id] = None if now is None else _state_of(gone, now)
        before = self._remembered
        self._remembered = remembered_after(before, carrying, departed_now, owned)
        for server_id in sorted(before.keys() - self._remembered.keys() - carrying.keys()):
            if server_id in departed_now:
                done = "deleted from Nova" if departed_now[server_id] is None else "cleaned of our aliases"
                log.info(
                    f"departed server {done}: forgotten",
                    node=before[server_id].node_name,
                    server_id=server_id,
                )
        self._store_state(fence)

    def _store_state(self, fence: WriteFence) -> None:
        """Write the state store when what it should hold changed; a failure is said and the apply goes
        on: memory keeps both until the next apply stores them (lost only if the process restarts).
        Fenced like every write: a replica no longer sure of the lease leaves it to the holder."""
        wanted = {
            departed_servers.STATE_KEY: departed_servers.to_json(self._remembered),
            WINDOW_STATE_KEY: self._removals.to_json(),
        }
        if wanted == self._stored:
            return
        try:
            fence.check("the webhook state was written")
            if self._state is not None:
                self._state.save(wanted)
        except WriterLeaseLost as lost:
            log.warning("webhook state not stored: kept in memory", reason=str(lost))
            return
        except UpstreamError as error:
            log.error(
                "webhook state not stored: departed servers and the removal window are kept in memory only",
                reason=error.reason,
                hint="check the RBAC for ConfigMaps in the webhook's namespace",
            )
            return
        self._stored = wanted

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

    def _require_writer_lease(self) -> WriteFence:
        """Single writer: a replica that does not hold the lease refuses to apply anything; one that
        does gets the fence every write of this apply passes (provider.fence)."""
        if self._writer_lease is None:
            return UNFENCED
        tenure = self._writer_lease.tenure()
        if tenure is not None:
            return WriteFence(self._writer_lease, tenure, self._options.write_fence_margin)
        holder = self._writer_lease.holder()
        self._metrics.refused_changes_total.labels(reason="not_the_writer").inc()
        log.warning("apply refused: another replica holds the writer lease", holder=holder)
        raise NotTheWriter(f"not the writer: the writer lease is held by {holder}")

    def _guard_removals(
        self, withdraw: set[str], publish: set[str], published: Mapping[str, Iterable[str]]
    ) -> None:
        """THE REMOVAL GUARD: refuse, before anything is written, an apply that withdraws too many aliases,
        on its own or with the applies before it in the window (provider.removals); remember it if it
        may go on."""
        guard = self._options.removal_guard
        now = self._clock()
        going = sorted(label for label in withdraw if any(published.get(label, ())))
        if guard.allow:
            if going:
                log.info("removal guard disabled: withdrawing", aliases=len(going), published=len(published))
            self._removals = self._removals.cleared()
            return
        count = self._removals.count(now, len(published), going)
        if guard.trips(len(going), len(published)):
            withdrawn, base, earlier, within = len(going), len(published), 0, None
        elif going and guard.trips(len(count.withdrawn), count.published_at_start):
            withdrawn, base, earlier = len(count.withdrawn), count.published_at_start, count.earlier
            within = _duration(guard.window_seconds)
        else:
            created = [label for label in publish if not any(published.get(label, ()))]
            if (going or created) and not self._options.dry_run:  # others leave every count as it is
                self._removals = self._removals.after(now, len(published), going, created)
            return
        self._metrics.refused_changes_total.labels(reason="removal_guard").inc()
        log.error(
            "apply refused: it would remove too many aliases at once",
            withdrawn=withdrawn,
            withdrawn_now=len(going),
            withdrawn_earlier=earlier,
            published=base,
            window=within,
            max_share=guard.max_share,
            min_count=guard.min_count,
            aliases=going[:20],
            hint="if intended, set LANDB_ALLOW_MASS_REMOVAL=true for one loop",
        )
        removal = f"the apply would remove {withdrawn} of {base} aliases published"
        if within is not None:
            removal = (
                f"within {within}, this apply and those before it ({earlier} by earlier applies) "
                f"would remove {withdrawn} of {base} aliases published at the window's start"
            )
        raise RemovalRefused(
            f"removal guard: {removal} (more than {guard.max_share:.0%}); nothing was written. "
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

    def _not_owned(self, inventory: Inventory, labels: set[str], claimed: set[str]) -> set[str]:
        """The changes to refuse: aliases that are someone else's are never touched."""
        refused = self._unclaimed(labels, claimed)
        for label in sorted(refused):
            self._refuse_not_owned(
                inventory,
                label,
                "change refused: alias held by someone else (no ownership record)",
                "external-dns only changes records it owns; if this one should be its, run "
                + self._adopt_command(label),
            )
        return refused

    def _refuse_not_owned(self, inventory: Inventory, label: str, message: str, hint: str) -> None:
        self._metrics.refused_changes_total.labels(reason="not_owned").inc()
        log.warning(
            message, alias=label, nodes=_nodes_holding(inventory, label, _node_names(inventory)), hint=hint
        )

    def _adopt_command(self, label: str) -> str:
        return (
            "'landb-webhook adopt --owner-id <external-dns --txt-owner-id> --names "
            f"{dns_name_for(label, self._options.dns_domain)}'"
        )

    def _created_labels(self, changes: Changes) -> set[str]:
        """The aliases the change set creates (not updates): a new claim grants ownership only beside one."""
        return {
            label
            for e in changes.create
            if e.record_type.upper() in ALIAS_RECORD_TYPES and (label := self._label_or_none(e.dns_name))
        }

    def _claim_changes(
        self,
        upserts: Sequence[Endpoint],
        deletes: Sequence[Endpoint],
        *,
        publish: set[str],
        withdraw: set[str],
        not_owned: set[str],
    ) -> tuple[list[Endpoint], list[Endpoint], list[str]]:
        """The claims to store and to delete, and what is refused: a claim is stored only beside the
        publication of its alias (a name that can never be an alias has none), and deleted only beside
        its withdrawal, as external-dns' txt registry does; anything else is refused and logged."""
        stored = [c for c in upserts if self._claimed_label(c) in publish]
        dropped = [c for c in deletes if (label := self._claimed_label(c)) is None or label in withdraw]
        kept = {id(c) for c in (*stored, *dropped)}
        refused: list[str] = []
        for claim, verb in (
            *((c, "stored") for c in upserts if id(c) not in kept),
            *((c, "deleted") for c in deletes if id(c) not in kept),
        ):
            if self._claimed_label(claim) in not_owned:
                continue  # its alias was refused, and said so
            self._metrics.refused_changes_total.labels(reason="not_owned").inc()
            log.warning(
                f"change refused: ownership record not {verb}",
                record=claim.dns_name,
                owned_record=owned_name(claim),
                reason=f"a claim is {verb} only together with its alias, which must be a valid alias name",
            )
            refused.append(f"{claim.dns_name}: ownership record not {verb} without its alias")
        return stored, dropped, refused

    def _offered_for_adoption(self, inventory: Inventory, claims: Sequence[Endpoint]) -> set[str]:
        """With LANDB_ADOPT_EXISTING, the unclaimed aliases Records leaves out: external-dns then sees
        their names as free, and a desired one comes back as a create with its claim (``_apply``)."""
        if not self._options.adopt_existing:
            return set()
        offered = {name.label for name in self._analysis(inventory, claims).names if adoptable(name)}
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
        status = self._analysis(inventory, claims_before)
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
                inventory,
                label,
                "change refused: alias held by someone else (it exists without ownership record)",
                "to hand it to external-dns, set LANDB_ADOPT_EXISTING=true or run "
                + self._adopt_command(label),
            )
        return refused

    def _without_orphaned_claims(
        self, claims: Sequence[Endpoint], found: Mapping[str, object]
    ) -> list[Endpoint]:
        """The claims but those of aliases no server carries, which the next apply drops (``_apply``).

        A removal that landed although it was reported failed (its reply lost, then no time left to
        retry) leaves its claim behind, and external-dns never deletes a claim whose record it no
        longer sees. While an apply runs, every claim is reported: it stores a claim just before it
        writes the alias.
        """
        if self._applying:
            return list(claims)
        orphaned = {c.key for c in self._orphaned_claims(claims, found.keys())}
        return [c for c in claims if c.key not in orphaned]

    def _orphaned_claims(self, claims: Iterable[Endpoint], carried_or_wanted: Set[str]) -> list[Endpoint]:
        """Claims of valid alias names that no server carries and no change wants: kept, one would make
        an alias of that name set later by hand look like ours."""
        return [
            c
            for c in claims
            if (label := self._claimed_label(c)) is not None and label not in carried_or_wanted
        ]

    def _claimed_label(self, claim: Endpoint) -> str | None:
        return self._label_or_none(owned_name(claim))

    def _label_or_none(self, dns_name: str) -> str | None:
        try:
            return label_for(dns_name, self._options.dns_domain)
        except InvalidName:
            return None

    def _analysis(self, inventory: Inventory, claims: Sequence[Endpoint]) -> ClusterStatus:
        """``status``' analysis, made again only when the nodes, servers or claims changed: it costs
        ~0.35 s of CPU at 150 nodes x 300 names, comparing the inputs ~1 ms."""
        inputs = (inventory.nodes, sorted(inventory.servers.items()), inventory.departed, list(claims))
        analysed = self._analysed
        if analysed is not None and analysed[0] == inputs:
            return analysed[1]
        status = analyse(inventory, claims, domain=self._options.dns_domain, health=self._options.health)
        self._analysed = (inputs, status)
        return status

    def _report_aliases(self, inventory: Inventory, claims: Sequence[Endpoint], *, unowned: int) -> None:
        """The alias gauges of one Records: owned and unowned, and what ``status`` would flag."""
        self._metrics.aliases_published.labels(ownership="owned").set(len(inventory.carriers()) - unowned)
        self._metrics.aliases_published.labels(ownership="unowned").set(unowned)
        self._metrics.nodes_without_server.set(len(inventory.unresolved_nodes()))
        flagged = sum(1 for name in self._analysis(inventory, claims).names if name.problems)
        self._metrics.names_needing_attention.set(flagged)

    def _report_unowned(self, inventory: Inventory, unowned: set[str]) -> None:
        names = _node_names(inventory) if unowned else {}
        for label in sorted(unowned):
            self._warn_once(
                label,
                "alias held by someone else (no ownership record): left untouched",
                nodes=_nodes_holding(inventory, label, names),
                hint="if external-dns should manage it, run " + self._adopt_command(label),
            )

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
        self,
        plan: Plan,
        nodes_seen: int,
        outcome: Outcome,
        refused: int,
        started: float,
        *,
        created: Set[str],
        removed: Set[str],
    ) -> None:
        """One info line per apply for the operator, counting names (an alias on three nodes is one):
        ``+1 -1 aliases (+3 -3 tokens) on 3 of 5 nodes, 0 failed, 412 ms, created app, removed old``."""
        tokens_added = sum(len(p.added) for p in plan.servers)
        tokens_removed = sum(len(p.removed) for p in plan.servers)
        failed = len({f.plan.server.server_id for f in outcome.failures})
        duration_ms = round((time.monotonic() - started) * 1000)
        parts = [
            f"+{len(created)} -{len(removed)} aliases (+{tokens_added} -{tokens_removed} tokens) "
            f"on {len(plan.servers)} of {nodes_seen} nodes",
            f"{failed} failed",
            f"{duration_ms} ms",
        ]
        parts += [
            f"{count} {what}"
            for count, what in ((len(outcome.held_back), "held back"), (refused, "refused"))
            if count
        ]
        parts += [
            f"{what} {_named(names)}" for what, names in (("created", created), ("removed", removed)) if names
        ]
        if self._options.dry_run:
            parts.append("dry run: nothing written")
        log.info(
            "apply finished",
            summary=", ".join(parts),
            aliases_added=len(created),
            aliases_removed=len(removed),
            tokens_added=tokens_added,
            tokens_removed=tokens_removed,
            nodes_written=len(plan.servers),
            nodes_seen=nodes_seen,
            nodes_failed=failed,
            held_back=len(outcome.held_back),
            refused=refused,
            duration_ms=duration_ms,
            dry_run=self._options.dry_run,
        )

    def _store_claims(
        self, *, upserts: Sequence[Endpoint], deletes: Sequence[Endpoint], fence: WriteFence
    ) -> None:
        if not upserts and not deletes:
            return
        named = {
            "stored": _named(e.dns_name for e in upserts),
            "deleted": _named(e.dns_name for e in deletes),
            "stored_count": len(upserts),
            "deleted_count": len(deletes),
        }
        if self._options.dry_run:
            log.info("dry run: ownership records not stored", **named)
            return
        try:
            fence.check("the ownership records were written")
        except WriterLeaseLost as lost:
            log.error("apply abandoned: writer lease no longer certain", reason=str(lost))
            raise
        self._ownership.apply(upserts, deletes)
        log.info("ownership records stored", **named)

    def _finish(self, outcome: Outcome, refused: list[str]) -> None:
        problems = [f.reason for f in outcome.failures] + refused
        problems += [f"{p.server.node_name}: removal held back" for p in outcome.held_back]
        if problems:
            raise ApplyError(f"{len(problems)} change(s) did not land: " + "; ".join(problems[:5]))
        self._metrics.last_apply_success_timestamp_seconds.set_to_current_time()
        self._metrics.last_successful_sync_timestamp_seconds.set_to_current_time()


def _state_of(gone: Remembered, server: Server) -> ServerState:
    return ServerState(server.id, server.name, gone.node_name, server.metadata)


def _duration(seconds: float) -> str:
    """``1h``, ``90m``, ``45s``: how the window is named in the refusal."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _problems(verdict: Verdict) -> str:
    return ", ".join(verdict.problems)


def _is_cname(endpoint: Endpoint) -> bool:
    return endpoint.record_type.upper() == "CNAME"


SOME_NAMES = 10
"""How many names one log line lists before it says how many more there are."""


def _named(names: Iterable[str]) -> str:
    """``a, b and 3 more``: names for a log line, bounded however many there are."""
    ordered = sorted(names)
    shown = ", ".join(ordered[:SOME_NAMES])
    more = len(ordered) - SOME_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _node_names(inventory: Inventory) -> dict[str, str]:
    return {s.server_id: s.node_name for s in inventory.server_states()}


def _nodes_holding(inventory: Inventory, label: str, names: Mapping[str, str]) -> list[str]:
    """The nodes whose servers carry ``label``; ``names``: server id -> node name (``_node_names``)."""
    return sorted(names[i] for i in inventory.carriers().get(label, ()) if i in names)
