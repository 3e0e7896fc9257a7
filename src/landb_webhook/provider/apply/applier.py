"""THE APPLY ORDERING: one ApplyChanges, top to bottom, in numbered steps (``Applier.apply_changes``).

1. writer lease: a replica that does not hold it refuses; the one that does gets the fence every write
   of this apply passes (provider.fence); then every read the plan needs, sent together (provider.together):
   the state ConfigMap, Nova's servers, the load balancers, the claims and the metadata quota;
2. ownership gate (provider.claims): what is not ours, and claims sent without their alias, are refused;
   then DNS first (provider.first_look): a name this cluster does not publish yet is asked once, and one
   DNS answers for another device is refused, one DNS is silent about held back (neither written);
3. per namespace (provider.read.tenants: a name's namespace): the removal guard (provider.removals) holds
   back a namespace's removals that would take too many of its aliases off the air (their tokens and claims
   kept, retried every loop); the name policy (landb.name_policy) and the cap of names per namespace
   (provider.namespace_cap) refuse creations; the rest goes on;
4. plan (landb.plan): alias -> the servers that must carry it, then per-server *make* (additions) and
   *break* (removals) writes, with the index and packing rules;
5. claims stored, before any alias is written;
6. make writes, on every server: first the *leave* writes (removals of aliases leaving DNS altogether,
   which free room), then every addition, packed on what they left;
7. break writes, once every make write has landed, but for those held back;
8. after the writes, together (one round trip): the claims dropped (those of the aliases whose removal
   landed, and the orphaned ones) and the state stored (the servers carrying our aliases, departed ones
   included, and the removal window);
9. bookkeeping: one summary line counting what landed, each name's transition told to the objects asking
   for it (provider.events), the answer.

Each case, and what the apply does (design invariants 3 and 4; the tests in
tests/property/test_apply_ordering.py and the integration tests named in docs/architecture.md):

| case                                           | what happens                                             |
|------------------------------------------------|----------------------------------------------------------|
| another replica holds the writer lease         | refused (NotTheWriter): nothing read or written          |
| another apply still runs in this process       | ApplyError: nothing read or written                      |
| an alias without a claim, or a claim beside no | that change refused and said; the rest goes on           |
| create                                         |                                                          |
| a new name DNS answers for another device (A,  | refused (dns_elsewhere): not written, no claim stored,   |
| CNAME), not in LANDB_TAKEOVER_NAMES            | said once; no error: the rest lands, the answer is 204   |
| a new name DNS does not answer about           | held back: not written, no claim, no error; asked again  |
|                                                | next loop                                                |
| the removal guard trips for a namespace        | its removals held back (tokens and claims kept, told to  |
|                                                | their objects); additions, moves and other namespaces'   |
|                                                | removals written; 503 naming what was held back          |
| a creation the name policy or the namespace's  | refused (no claim, no write), told to its objects; the   |
| cap refuses                                    | rest goes on; nothing published is taken away            |
| aliases to publish, no ingress node at all     | those additions refused; the removals go on              |
| an addition the plan cannot write (quota,      | refused; its alias loses no token anywhere, so its old   |
| value length, a plain alias of that name)      | carriers keep it                                         |
| storing the claims fails                       | UpstreamError: no metadata written                       |
| an alias carried before and wanted after       | never without a carrier: every make write lands before   |
|                                                | any break write starts                                   |
| a make write fails on a server                 | that server's break write is held back, and so is every  |
|                                                | break removing an alias it was adding                    |
| a break write fails                            | its alias keeps its claim; the next loop retries         |
| a name whose targets are a load balancer's VIP | a landb-alias tag on it (provider.loadbalancers): load   |
| or floating IP                                 | balancer makes before server makes, server breaks before |
|                                                | load balancer breaks; off the nodes in the break phase   |
| a tag write fails (409 past its retries)       | every removal of that name, from servers or load         |
|                                                | balancers, is held back                                  |
| the writer lease is lost mid-way               | requests in flight finish, nothing more is sent, no      |
|                                                | claim is dropped (WriterLeaseLost: 503)                  |
| a removal landed                               | its claim is dropped after the break writes              |
| a claim whose alias no server carries and no   | dropped after the break writes (orphaned)                |
| change wants                                   |                                                          |
| an alias leaves DNS altogether (withdrawn, not | its tokens go in the leave writes, before any addition:  |
| moving to a load balancer)                     | the room they free serves this apply's additions, as if  |
|                                                | the withdrawal had come in an apply of its own before    |
| a leave write fails on a server                | that server gets no make or break write (they were       |
|                                                | packed on what it would have left); removals of what it  |
|                                                | was adding are held back elsewhere                       |
| an addition fits only once an alias that stays | refused in this apply (make before break: the removal    |
| (moving to another node) is removed from that  | waits for the addition elsewhere); it lands in the next  |
| server                                         | apply, one apply later than with the changes split       |
| two additions want the same last room          | the first in sorted order lands in one apply; split, the |
|                                                | first sent lands: which one depends on batching          |
| a server already over its quota (the quota     | no addition (but what fits once its leave writes deleted |
| lowered)                                       | keys); a removal that rewrites a value fails (Nova       |
|                                                | refuses every POST past the quota), one that only        |
|                                                | deletes a key lands                                      |
| a withdrawn alias is also held in a form we    | our tokens go, the frozen holder keeps it, and its claim |
| never edit                                     | goes too; the removal guard does not count it (on air)   |
| dry run                                        | nothing written (claims, metadata, state); each write    |
|                                                | that would have been sent is logged                      |

A crash at any point leaves a claim without its alias (re-created or dropped later), never an alias
without its claim: claims are written before aliases and dropped after them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence, Set
from concurrent.futures import Future
from dataclasses import dataclass
from threading import Lock

import structlog

from landb_webhook.backends import Ports, Server, UpstreamError
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.first_look import FirstLook
from landb_webhook.landb.indices import LostIndices
from landb_webhook.landb.loadbalancers import plan_tags
from landb_webhook.landb.plan import Plan, Refusal, ServerPlan, ServerState, metadata_after, plan_changes
from landb_webhook.provider.apply.executor import PlanExecutor, WriteFailure
from landb_webhook.provider.apply.fence import UNFENCED, WriteFence, WriterLeaseLost
from landb_webhook.provider.apply.first_look import NOTHING_FOUND, DnsFirst
from landb_webhook.provider.apply.foreign import foreign_homes
from landb_webhook.provider.apply.kept_state import KeptState
from landb_webhook.provider.apply.loadbalancers import (
    NO_TAG_WRITES,
    LoadBalancerPath,
    LoadBalancers,
    TagOutcome,
    TagWrites,
    merged_carriers,
)
from landb_webhook.provider.apply.namespace_cap import over_cap, past_cap
from landb_webhook.provider.apply.refusals import report_refusals
from landb_webhook.provider.apply.removals import guard_removals
from landb_webhook.provider.context import ALIAS_RECORD_TYPES, Context, named, node_names
from landb_webhook.provider.interface import ApplyError, ApplyRefused
from landb_webhook.provider.ownership.claims import Claims, Gated
from landb_webhook.provider.read.departed import Remembered, holds_owned, owned_slot_labels, remembered_after
from landb_webhook.provider.read.health import Placement
from landb_webhook.provider.read.inventory import Inventory, InventoryReader
from landb_webhook.provider.read.tenants import namespaces
from landb_webhook.provider.read.txt_registry import claimed_names, is_ownership_record
from landb_webhook.provider.together import Together
from landb_webhook.provider.watch import publications
from landb_webhook.provider.watch.events import NameChange, NameEvents

log = structlog.get_logger(__name__)


_REFUSED_CREATIONS = {
    "namespace_cap": "change refused: namespace at its cap of published names",
    "name_policy": "change refused: the name policy does not allow this name",
}
"""The warning of each kind of creation refused in step 3, said once an hour per namespace (and name)."""


class NotTheWriter(ApplyRefused):
    """Another replica holds the writer lease; nothing was written."""


@dataclass(frozen=True)
class Landed:
    """The writes of an apply that landed, counted for its summary line."""

    servers: int
    """Servers on which at least one write (leave, make or break) fully landed."""
    tokens_added: int
    tokens_removed: int


@dataclass(frozen=True)
class Outcome:
    failures: tuple[WriteFailure, ...]
    held_back: tuple[ServerPlan, ...]
    """Break writes not attempted because an addition they depend on did not land."""
    abandoned: WriterLeaseLost | None = None
    """Why the rest of the plan was not sent: the writer lease was no longer certain."""
    tags: TagOutcome = NO_TAG_WRITES
    """How the load balancers' tag writes went (provider.loadbalancers)."""

    def landed(self, plans: Sequence[ServerPlan]) -> list[ServerPlan]:
        """The plans whose every write landed (in a dry run: would have)."""
        missed = {f.plan.server.server_id for f in self.failures}
        missed |= {p.server.server_id for p in self.held_back}
        return [p for p in plans if p.server.server_id not in missed]

    def landed_writes(self, plans: Sequence[ServerPlan]) -> Landed:
        """What of ``plans`` landed (in a dry run: would have), write by write: a server's leave write lands
        the tokens leaving DNS, its make write its added tokens, its break write its other removed ones. A
        write that failed, even in part (its POST landed, a DELETE did not), counts as failed and none of its
        tokens count; a held-back one as neither, and so do the writes of a server whose leave write failed
        (they were not sent)."""
        failed = {(f.plan.server.server_id, f.phase) for f in self.failures}
        held_back = {p.server.server_id for p in self.held_back}
        servers: set[str] = set()
        added = removed = 0
        for plan in plans:
            server_id = plan.server.server_id
            if plan.leave_write:
                if (server_id, "leave") in failed:
                    continue
                removed += len(plan.left)
                servers.add(server_id)
            if plan.make_write and (server_id, "make") not in failed:
                added += len(plan.added)
                servers.add(server_id)
            if plan.break_write and server_id not in held_back and (server_id, "break") not in failed:
                left = set(plan.left)
                removed += sum(1 for token in plan.removed if token not in left)
                servers.add(server_id)
        return Landed(servers=len(servers), tokens_added=added, tokens_removed=removed)

    def failed_labels(self) -> set[str]:
        """Labels whose change did not fully land: their TXT claims must stay."""
        labels = {t.label for f in self.failures for t in (*f.plan.added, *f.plan.removed)}
        labels.update(t.label for p in self.held_back for t in p.removed)
        return labels | self.tags.failed_labels()


def write_in_order(
    executor: PlanExecutor, plans: Sequence[ServerPlan], fence: WriteFence, tags: TagWrites | None = None
) -> Outcome:
    """Steps 6 and 7: the servers' leave writes, then every make write, on load balancers then servers,
    then the break writes whose additions landed, on servers then load balancers (``tags``: the load
    balancers' writes, if any)."""
    # 6. make writes. First the leave writes: the removals of aliases leaving DNS altogether, which have no
    # carrier to protect; each server's make write is packed on what its leave write left, so the room
    # they free serves this apply's additions. A server whose leave write failed gets no other write.
    leave_failures, abandoned = executor.run_phase(
        "leave", [p for p in plans if p.leave_write], lambda p: p.leave_write, fence
    )
    if abandoned is not None:
        return Outcome(failures=tuple(leave_failures), held_back=(), abandoned=abandoned)
    not_left = {f.plan.server.server_id for f in leave_failures}
    # Then every addition, on every load balancer and every server.
    tagged = tags.make_writes(fence) if tags is not None else NO_TAG_WRITES
    if tagged.abandoned is not None:
        return Outcome(failures=tuple(leave_failures), held_back=(), abandoned=tagged.abandoned, tags=tagged)
    make_failures, abandoned = executor.run_phase(
        "make",
        [p for p in plans if p.make_write and p.server.server_id not in not_left],
        lambda p: p.make_write,
        fence,
    )
    make_failures = [*leave_failures, *make_failures]
    if abandoned is not None:
        return Outcome(failures=tuple(make_failures), held_back=(), abandoned=abandoned, tags=tagged)

    # 7. break writes, but for a server whose make write failed, and for a removal of an alias whose new
    # carrier (a server or a load balancer) was not written: that alias would be left with no carrier.
    failed = {f.plan.server.server_id for f in make_failures}
    unlanded = {t.label for f in make_failures for t in f.plan.added} | tagged.unlanded()
    breaks, held_back = [], []
    for plan in plans:
        if not plan.break_write or plan.server.server_id in not_left:
            continue
        if plan.server.server_id in failed or unlanded & {t.label for t in plan.removed}:
            held_back.append(plan)
            log.warning(
                "removal held back until the new carriers are written",
                node=plan.server.node_name,
                server=plan.server.server_name,
                aliases_kept=[t.render() for t in plan.removed],
            )
            continue
        breaks.append(plan)
    break_failures, abandoned = executor.run_phase("break", breaks, lambda p: p.break_write, fence)
    if abandoned is None and tags is not None:
        tagged = tagged.then(tags.break_writes(unlanded, fence))
    return Outcome(
        failures=(*make_failures, *break_failures),
        held_back=tuple(held_back),
        abandoned=abandoned or tagged.abandoned,
        tags=tagged,
    )


class Applier:
    def __init__(
        self,
        context: Context,
        ports: Ports,
        *,
        inventory: InventoryReader,
        claims: Claims,
        state: KeptState,
        lb_path: LoadBalancerPath,
    ) -> None:
        """``ports``: the backends, whose writer lease None means this is the only replica, it always
        writes; ``lb_path``: the names on load balancers (provider.loadbalancers)."""
        self._context = context
        self._lb_path = lb_path
        self._servers = ports.servers
        self._ownership = ports.ownership
        self._inventory = inventory
        self._claims = claims
        self._state = state
        self._writer_lease = ports.writer_lease
        options = context.options
        self._executor = PlanExecutor(
            ports.servers,
            concurrency=options.write_concurrency,
            dry_run=options.dry_run,
            metrics=context.metrics,
        )
        self._lock = Lock()
        self._lost_indices = LostIndices()
        self._dns_first = DnsFirst(context, ports.names, state.dns_refused)

    def apply_changes(self, changes: Changes) -> None:
        # 1. writer lease: refuse unless this replica holds it; the fence guards every write below.
        fence = self._require_writer_lease()
        if not self._lock.acquire(blocking=False):
            raise ApplyError("another ApplyChanges is still running")
        try:
            self._claims.applying = True
            self._apply(changes, fence)
        except WriterLeaseLost:
            # The claims stay as they are: a claim without its alias is re-created or dropped later.
            self._context.metrics.refused_changes_total.labels(reason="writer_lease_lost").inc()
            raise
        finally:
            self._claims.applying = False
            self._lock.release()

    def _apply(self, changes: Changes, fence: WriteFence) -> None:
        context, options = self._context, self._context.options
        started = time.monotonic()
        learn_who_asks(context.events, changes)
        # 1. ... then read everything the plan needs, the reads sent together (provider.together).
        inventory, load_balancers, claim_records, quota = self._read_everything()
        claims_before = claimed_names(claim_records)

        # 2. ownership gate: what is not ours is refused, and which claims go with the aliases; the names
        # whose targets are a load balancer's go to it (provider.loadbalancers), not to the ingress nodes.
        gated = self._claims.gate(changes, inventory, claim_records, tagged=load_balancers.carriers().keys())
        publish, withdraw, refused = gated.publish, gated.withdraw, gated.refused
        carried_or_wanted = inventory.carriers().keys() | load_balancers.carriers().keys() | publish
        homes, beside_plain_homes, foreign = self._routed_to_load_balancers(
            changes, publish, inventory, load_balancers, refused, claims=claim_records
        )

        # 2. ... then DNS first: a new name DNS answers for another device is refused, one it is silent
        # about held back; neither is written nor claimed, and neither fails the apply (external-dns asks
        # again next loop).
        first, homes = self._ask_dns_first(
            gated.publish,
            homes,
            not_published=beside_plain_homes | foreign.keys(),
            claimed=claims_before,
            inventory=inventory,
            load_balancers=load_balancers,
        )

        # 3. per namespace: the removal guard holds back a namespace's removals that would take too many of
        # its aliases off the air (tokens and claims kept: external-dns sends them again), and the cap of
        # names per namespace refuses the creations past it; everything else goes on.
        placement = context.placement(inventory)
        held = self._per_namespace(
            gated,
            merged_carriers(placement.current, load_balancers.carriers()),
            staying=inventory.frozen_carriers(),
            whose=namespaces([*claim_records, *gated.store], _endpoints(changes), context.label_or_none),
            homes=homes,
        )

        # 4. plan: which servers must carry each alias, then the make and break writes of each server.
        if publish - homes.keys() and not placement.ingress:
            # An empty ingress set is far likelier a wrong selector or a cluster in trouble than a wish
            # to take every name off the air: refuse, loudly, rather than remove every alias.
            log.error(
                "no node matches the ingress selector: aliases are left where they are",
                ingress_selector=options.ingress_selector,
                aliases=sorted(publish),
                nodes_seen=len(inventory.nodes),
            )
            context.metrics.refused_changes_total.labels(reason="no_ingress_nodes").inc()
            refused += [f"{label}: no ingress node to carry it" for label in sorted(publish - homes.keys())]
            for label in publish - homes.keys():
                self._tell(label, "refused", "no ingress node to carry it", "no_ingress_nodes")
            publish = set(homes)
        wanted = {label: placement.carriers_of(label) for label in publish - homes.keys()} | {
            label: frozenset() for label in withdraw | homes.keys()
        }
        owned = self._claims.owned_test(claims_before | claimed_names(gated.store))
        wanted |= self._departed_moves(inventory, placement, wanted, owned)
        plan = plan_changes(
            inventory.server_states(),
            wanted,
            floor=options.index_floor,
            max_length=options.max_value_length,
            quota=quota.result() if wanted else 0,
            reserved=options.reserved_metadata_keys if wanted else 0,
            preferred=self._lost_indices.preferred(),
            holders=inventory.holders(),
            leaving=withdraw,
        )
        self._lost_indices.record(plan.added_indices(), plan.removed_indices(), withdrawn=withdraw)
        refused.extend(self._log_refusals(plan.refusals))

        # ... and the load balancers' tag writes (landb.loadbalancers). A name the plan refused keeps its
        # load balancer tags: a refused addition blocks its removals everywhere.
        kept = {r.label for r in plan.refusals if r.kind != "frozen"}
        tags = plan_tags(
            load_balancers.carried(),
            {label: homes.get(label, frozenset()) for label in (publish | withdraw) - kept},
            leaving=withdraw,
        )

        # 5. claims stored, before any alias is written (but beside a plain alias, where none will be, and
        # for a name DNS first kept back).
        unwritten = (
            {r.label for r in plan.refusals if r.kind == "plain_alias"} | beside_plain_homes | first.kept_back
        )
        stored = [c for c in gated.store if self._claims.claimed_label(c) not in unwritten]
        self._store_claims(upserts=stored, deletes=[], fence=fence)

        # 6. make writes, then 7. break writes (write_in_order), on load balancers and servers.
        outcome = write_in_order(
            self._executor, plan.servers, fence, TagWrites(self._lb_path, tags, load_balancers)
        )
        landed_names = publications.landed(plan, outcome, context.options)
        context.published.written(landed_names, context.clock())
        landed_labels = {found for name in landed_names if (found := context.label_or_none(name))}
        if outcome.abandoned is not None:
            raise outcome.abandoned

        # 8. after the writes, in one round trip: the claims dropped (the aliases whose removal landed, and
        # the orphaned ones) beside the state stored (the servers carrying our aliases, the window). A
        # frozen holder keeps the alias whatever we do: once our tokens are gone the name is someone
        # else's, so its claim goes too (else external-dns would ask to delete it every loop).
        unfinished = outcome.failed_labels() | kept | beside_plain_homes | held
        gone, orphaned = self._claims_to_drop(
            [c for c in gated.drop if self._claims.claimed_label(c) not in unfinished],
            self._claims.orphaned(claim_records, carried_or_wanted),
        )
        owned_after = (claims_before | claimed_names(stored)) - claimed_names([*gone, *orphaned])
        self._remember_servers(inventory, plan, self._claims.owned_test(owned_after))
        with Together("apply-after") as together:
            together.start(
                lambda: self._drop_claims(gone, orphaned, fence), upstream="kubernetes", what="claims dropped"
            )
            if not options.dry_run:
                self._state.save(fence)  # says its own failure: the apply goes on (provider.kept_state)

        # 9. bookkeeping: one summary line, what was written handed to the next read (it need not parse
        # it again), each name's transition told, the answer.
        carried_before = inventory.carriers().keys() | load_balancers.carriers().keys()
        self._log_summary(
            plan,
            len(inventory.server_states()),
            outcome,
            len(refused) + len(first.refused),
            started,
            created=(publish - carried_before) - unfinished,
            removed=(withdraw & carried_before) - unfinished,
        )
        if not options.dry_run:
            landed = outcome.landed(plan.servers)
            self._inventory.wrote(inventory, {p.server.server_id: metadata_after(p) for p in landed})
        self._tell_outcome(
            inventory,
            wanted,
            homes,
            written=(publish - unfinished) & landed_labels,
            removed=(withdraw & carried_before) - unfinished,
            refused=self._refused_by_label(gated.not_owned, beside_plain_homes, plan, outcome.failed_labels())
            | {label: ("foreign_load_balancer", why) for label, why in foreign.items()},
            first=first,
        )
        self._finish(outcome, refused + outcome.tags.problems(load_balancers.named))

    # -- 1. the writer lease ----------------------------------------------------------------

    def _require_writer_lease(self) -> WriteFence:
        """Single writer: a replica that does not hold the lease refuses to apply anything; one that
        does gets the fence every write of this apply passes (provider.fence)."""
        if self._writer_lease is None:
            return UNFENCED
        tenure = self._writer_lease.tenure()
        if tenure is not None:
            return WriteFence(self._writer_lease, tenure, self._context.options.write_fence_margin)
        holder = self._writer_lease.holder()
        self._context.metrics.refused_changes_total.labels(reason="not_the_writer").inc()
        log.warning("apply refused: another replica holds the writer lease", holder=holder)
        raise NotTheWriter(f"not the writer: the writer lease is held by {holder}")

    # -- 1. the reads ------------------------------------------------------------------------

    def _read_everything(self) -> tuple[Inventory, LoadBalancers, Sequence[Endpoint], Future[int]]:
        """The state, the inventory, the load balancers, the claims and the metadata quota (a Future: only
        a plan that adds needs it, and a failure to read it fails only such a plan), the reads sent together:
        one round trip, not five one after the other. The departed servers the listing does not show are
        looked up after, once the state store has said which they are (none, most loops)."""
        with Together("apply") as reads:
            state_read = reads.start(self._state.load, upstream="kubernetes", what="webhook state")
            load_balancers_read = reads.start(self._lb_path.fresh, upstream="octavia", what="load balancers")
            claims_read = reads.start(self._ownership.records, upstream="kubernetes", what="claims")
            quota = reads.start(
                self._servers.max_metadata_items, upstream="nova", what="metadata quota", optional=True
            )
            listing = self._inventory.listing()  # the large one, here (provider.together: why)
        state_read.result()
        claims = self._claims.ours(claims_read.result())  # another owner's claims grant nothing
        return self._inventory.fresh(listing), load_balancers_read.result(), claims, quota

    def _ask_dns_first(
        self,
        publish: set[str],
        homes: dict[str, frozenset[str]],
        *,
        not_published: Set[str],
        claimed: Set[str],
        inventory: Inventory,
        load_balancers: LoadBalancers,
    ) -> tuple[FirstLook, dict[str, frozenset[str]]]:
        """What DNS decided for the new names (provider.first_look), taken out of ``publish`` (the names to
        publish, one set the later steps take their refusals out of too) with ``not_published`` (refused on
        their load balancer), and the load balancers of those left."""
        publish.difference_update(not_published)
        first = self._dns_first.look(
            publish, claimed=claimed, inventory=inventory, load_balancers=load_balancers, homes=homes
        )
        publish.difference_update(first.kept_back)
        return first, {label: ids for label, ids in homes.items() if label not in first.kept_back}

    # -- 3. per namespace: the removal guard, the cap of names -----------------------------

    def _per_namespace(
        self,
        gated: Gated,
        published: Mapping[str, Set[str]],
        *,
        staying: Mapping[str, Set[str]],
        whose: Mapping[str, str],
        homes: dict[str, frozenset[str]],
    ) -> set[str]:
        """Step 3: the removal guard (the removals it holds back returned), then the cap of names per
        namespace (the creations past it taken out of ``gated`` and ``homes``)."""
        held = self._guard_removals(gated, published, staying=staying, whose=whose)
        options = self._context.options
        on_air = {label for label, carriers in published.items() if carriers}
        for label in sorted(gated.publish - on_air):  # the name policy: creations only
            namespace = whose.get(label, "")
            why = options.name_policy.refusal(label, namespace)
            if why is not None:
                self._refuse_creations(gated, namespace, [label], why, homes, kind="name_policy")
        cap = options.max_published_per_namespace
        if cap is None:
            return held
        refused = over_cap(cap, whose, published=on_air, withdraw=gated.withdraw, publish=gated.publish)
        for namespace, labels in refused.items():
            self._refuse_creations(
                gated, namespace, labels, past_cap(namespace, cap), homes, kind="namespace_cap"
            )
        return held

    def _refuse_creations(
        self,
        gated: Gated,
        namespace: str,
        labels: list[str],
        why: str,
        homes: dict[str, frozenset[str]],
        *,
        kind: str,
    ) -> None:
        """Creations refused by the name policy or the cap: no claim, no write; a metric, a warning said
        once, and a Refused event on their objects."""
        context = self._context
        context.metrics.refused_changes_total.labels(reason=kind).inc(len(labels))
        context.warn_once(
            f"{kind} {namespace} {labels[0] if kind == 'name_policy' else ''}",
            _REFUSED_CREATIONS[kind],
            namespace=namespace or None,
            aliases=len(labels),
            alias_names=labels[:10],
            reason=why,
        )
        gone = set(labels)
        gated.publish.difference_update(gone)
        gated.store[:] = [c for c in gated.store if self._claims.claimed_label(c) not in gone]
        for label in labels:
            homes.pop(label, None)
            gated.refused.append(f"{label}: {why}")
            self._tell(label, "refused", why, kind)

    def _guard_removals(
        self,
        gated: Gated,
        published: Mapping[str, Set[str]],
        *,
        staying: Mapping[str, Set[str]],
        whose: Mapping[str, str],
    ) -> set[str]:
        """The window moved on; the removals held back taken out of ``gated.withdraw`` and returned, said
        in ``gated.refused`` and told to the objects of every name held back (``whose``: each alias's
        namespace)."""
        context = self._context
        guarded = guard_removals(
            context.options.removal_guard,
            self._state.window,
            withdraw=gated.withdraw,
            publish=gated.publish,
            published=published,
            staying=staying,
            namespaces=whose,
            now=context.clock(),
            dry_run=context.options.dry_run,
            metrics=context.metrics,
            said=context.warnings,
        )
        self._state.window = guarded.window
        gated.withdraw.difference_update(guarded.held_labels())
        self._context.metrics.removals_held_back_total.labels(reason="removal_guard").inc(
            len(guarded.held_labels())
        )
        for held in guarded.held:
            gated.refused.append(held.reason)
            for label in held.labels:
                self._tell(label, "refused", held.reason, "removal_guard")
        return guarded.held_labels()

    # -- 4. the plan ------------------------------------------------------------------------

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

    def _log_refusals(self, refusals: Sequence[Refusal]) -> list[str]:
        """Log and count the refusals; return those a later loop may land (the others are said once)."""
        return report_refusals(refusals, self._context.metrics, self._context.warnings)

    def _routed_to_load_balancers(
        self,
        changes: Changes,
        publish: Set[str],
        inventory: Inventory,
        load_balancers: LoadBalancers,
        refused: list[str],
        *,
        claims: Sequence[Endpoint],
    ) -> tuple[dict[str, frozenset[str]], set[str], dict[str, str]]:
        """The names to publish on load balancers (name -> their ids), those refused because LanDB
        holds them as a plain alias (one name cannot be a CNAME and A records), and those refused (-> why)
        because a load balancer is another namespace's (provider.apply.foreign); both appended to
        ``refused``."""
        context = self._context

        def published_label(endpoint: Endpoint) -> str | None:
            if is_ownership_record(endpoint) or endpoint.record_type.upper() not in ALIAS_RECORD_TYPES:
                return None
            label = context.label_or_none(endpoint.dns_name)
            return label if label in publish else None

        homes = self._lb_path.homes((*changes.create, *changes.update_new), load_balancers, published_label)
        plain = inventory.plain_aliases(context.options.dns_domain)
        blocked = {label for label in homes if label in plain}
        for label in sorted(blocked):
            context.metrics.refused_changes_total.labels(reason="plain_alias").inc()
            log.warning(
                "change refused: a plain (CNAME) alias of this name exists, no load balancer tag is added",
                alias=label,
                hosts=sorted(plain[label]),
            )
            refused.append(f"{label}: plain (CNAME) alias exists, not tagged on a load balancer")
        foreign = foreign_homes(context, changes, homes, load_balancers, claims)
        refused += [f"{label}: {why}" for label, why in sorted(foreign.items())]
        kept = {label: ids for label, ids in homes.items() if label not in blocked and label not in foreign}
        return kept, blocked, foreign

    # -- 5. and 8. the claims ---------------------------------------------------------------

    def _store_claims(
        self, *, upserts: Sequence[Endpoint], deletes: Sequence[Endpoint], fence: WriteFence
    ) -> None:
        if not upserts and not deletes:
            return
        names = {
            "stored": named(e.dns_name for e in upserts),
            "deleted": named(e.dns_name for e in deletes),
            "stored_count": len(upserts),
            "deleted_count": len(deletes),
        }
        if self._context.options.dry_run:
            log.info("dry run: ownership records not stored", **names)
            return
        try:
            fence.check("the ownership records were written")
        except WriterLeaseLost as lost:
            log.error("apply abandoned: writer lease no longer certain", reason=str(lost))
            raise
        self._ownership.apply(upserts, deletes)
        log.info("ownership records stored", **names)

    @staticmethod
    def _claims_to_drop(
        gone: list[Endpoint], orphaned: list[Endpoint]
    ) -> tuple[list[Endpoint], list[Endpoint]]:
        """After the break writes: the claims of the aliases withdrawn, and those no server carried and
        no change wanted (a removal that landed although reported failed leaves one behind)."""
        gone_keys = {c.key for c in gone}
        return gone, [c for c in orphaned if c.key not in gone_keys]

    def _drop_claims(self, gone: list[Endpoint], orphaned: list[Endpoint], fence: WriteFence) -> None:
        self._store_claims(upserts=[], deletes=[*gone, *orphaned], fence=fence)
        if orphaned and not self._context.options.dry_run:
            log.warning(
                "ownership records dropped: no server carries their alias any more",
                records=named(c.dns_name for c in orphaned),
            )

    # -- 9. bookkeeping ---------------------------------------------------------------------

    def _tell(self, label: str, what: str, detail: str, kind: str = "") -> None:
        self._context.events.tell(NameChange(self._context.dns_name(label), what, detail, kind))

    def _refused_by_label(
        self, not_owned: Set[str], beside_plain: Set[str], plan: Plan, failed: Set[str]
    ) -> dict[str, tuple[str, str]]:
        """Each alias refused in this apply -> (kind, reason), the first reason found for it."""
        refused: dict[str, tuple[str, str]] = {}
        for label in not_owned:
            refused[label] = ("not_owned", "LanDB holds the name already, set by hand or by another owner")
        for label in beside_plain:
            refused[label] = ("plain_alias", "LanDB holds the name as a plain (CNAME) alias")
        for r in plan.refusals:
            if r.kind != "frozen":
                refused.setdefault(r.label, (r.kind, r.reason))
        for label in failed:
            refused.setdefault(label, ("write_failed", "a metadata write for it failed or was held back"))
        return refused

    def _tell_outcome(
        self,
        inventory: Inventory,
        wanted: Mapping[str, frozenset[str]],
        homes: Mapping[str, frozenset[str]],
        *,
        written: Set[str],
        removed: Set[str],
        refused: Mapping[str, tuple[str, str]],
        first: FirstLook = NOTHING_FOUND,
    ) -> None:
        """Each name's transition, for the Kubernetes Events of the objects asking for it: written (where,
        and what it takes over), removed, refused (kind and reason). A dry run writes nothing, so it tells
        only the refusals."""
        if not self._context.options.dry_run:
            names = node_names(inventory)
            for label in sorted(written):
                where = _carriers(label, wanted, homes, names) + DnsFirst.taking_over_note(first, label)
                self._tell(label, "written", where)
            for label in sorted(removed):
                self._tell(label, "removed", "every carrier")
        for label, (kind, reason) in sorted(refused.items()):
            self._tell(label, "refused", reason, kind)

    def _remember_servers(self, inventory: Inventory, plan: Plan, owned: Callable[[str], bool]) -> None:
        """After the writes: remember the servers holding owned tokens (``owned``: the names claimed once
        the apply's claims are stored and dropped) and forget the departed ones cleaned or deleted
        (provider.departed); step 8 stores that, with the removal window, when they changed."""
        if self._context.options.dry_run:
            return
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
        before = self._state.remembered
        self._state.remembered = remembered_after(before, carrying, departed_now, owned)
        for server_id in sorted(before.keys() - self._state.remembered.keys() - carrying.keys()):
            if server_id in departed_now:
                done = "deleted from Nova" if departed_now[server_id] is None else "cleaned of our aliases"
                log.info(
                    f"departed server {done}: forgotten",
                    node=before[server_id].node_name,
                    server_id=server_id,
                )

    def _log_summary(
        self,
        plan: Plan,
        nodes_seen: int,
        outcome: Outcome,
        refused: int,
        started: float,
        *,
        created: set[str],
        removed: set[str],
    ) -> None:
        """One info line per apply for the operator, counting names (an alias on three nodes is one):
        ``+1 -1 aliases (+3 -3 tokens) on 3 of 5 nodes, 0 failed, 412 ms, created app, removed old``; with
        load balancer tags written, ``... on 0 of 5 nodes and 1 load balancer, ...``.

        Every count is what landed, never what was planned: tokens and nodes those of the writes that
        landed (``Outcome.landed_writes``), aliases those whose whole change landed; the nodes and load
        balancers a write failed on are counted apart (``failed``), and so are held-back removals."""
        dry_run = self._context.options.dry_run
        landed = outcome.landed_writes(plan.servers)
        tokens_added, tokens_removed = landed.tokens_added, landed.tokens_removed
        tags = outcome.tags
        load_balancers = len(set(tags.written))
        failed = len({f.plan.server.server_id for f in outcome.failures}) + len(tags.failures)
        held_back = len(outcome.held_back) + len(tags.held_back)
        duration_ms = round((time.monotonic() - started) * 1000)
        on_load_balancers = f" and {load_balancers} load balancer{'s' * (load_balancers != 1)}"
        parts = [
            f"+{len(created)} -{len(removed)} aliases (+{tokens_added} -{tokens_removed} tokens) "
            f"on {landed.servers} of {nodes_seen} nodes{on_load_balancers if load_balancers else ''}",
            f"{failed} failed",
            f"{duration_ms} ms",
        ]
        parts += [
            f"{count} {what}" for count, what in ((held_back, "held back"), (refused, "refused")) if count
        ]
        parts += [
            f"{what} {named(names)}" for what, names in (("created", created), ("removed", removed)) if names
        ]
        if dry_run:
            parts.append("dry run: nothing written")
        log.info(
            "apply finished",
            summary=", ".join(parts),
            aliases_added=len(created),
            aliases_removed=len(removed),
            tokens_added=tokens_added,
            tokens_removed=tokens_removed,
            nodes_written=landed.servers,
            nodes_seen=nodes_seen,
            nodes_failed=failed,
            load_balancers_written=load_balancers,
            held_back=held_back,
            refused=refused,
            duration_ms=duration_ms,
            dry_run=dry_run,
        )

    def _finish(self, outcome: Outcome, refused: list[str]) -> None:
        held = {t.label for p in outcome.held_back for t in p.removed}
        held.update(label for write in outcome.tags.held_back for label in write.remove)
        self._context.metrics.removals_held_back_total.labels(reason="carrier_not_written").inc(len(held))
        problems = [f.reason for f in outcome.failures] + refused
        problems += [f"{p.server.node_name}: removal held back" for p in outcome.held_back]
        if problems:
            raise ApplyError(f"{len(problems)} change(s) did not land: " + "; ".join(problems[:5]))
        self._context.metrics.last_apply_success_timestamp_seconds.set_to_current_time()
        self._context.metrics.last_successful_sync_timestamp_seconds.set_to_current_time()


def _carriers(
    label: str,
    wanted: Mapping[str, frozenset[str]],
    homes: Mapping[str, frozenset[str]],
    names: Mapping[str, str],
) -> str:
    """``its load balancer``, ``3 ingress nodes (a, b, c)``: where a name was written."""
    if label in homes:
        count = len(homes[label])
        return "its load balancer" if count == 1 else f"{count} load balancers"
    nodes = sorted(names.get(server_id, server_id) for server_id in wanted.get(label, ()))
    noun = "ingress node" if len(nodes) == 1 else "ingress nodes"
    return f"{len(nodes)} {noun} ({named(nodes)})"


def _endpoints(changes: Changes) -> tuple[Endpoint, ...]:
    return (*changes.create, *changes.update_new, *changes.delete, *changes.update_old)


def _state_of(gone: Remembered, server: Server) -> ServerState:
    return ServerState(server.id, server.name, gone.node_name, server.metadata)


def learn_who_asks(events: NameEvents, changes: Changes) -> None:
    """The objects asking for the names changed, for their events: a creation's and an update's new side
    ask now; an update's old side names the object that asked when the record was written (its claim's: an
    Ingress a route has replaced, perhaps), so it is not learnt; a deletion's asked last."""
    events.learn(changes.delete)
    events.learn((*changes.create, *changes.update_new))
