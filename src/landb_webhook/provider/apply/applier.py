"""THE APPLY ORDERING: one ApplyChanges, top to bottom, in numbered steps (``Applier.apply_changes``).

1. writer lease: a replica that does not hold it refuses; the one that does gets the fence every write
   of this apply passes (provider.apply.fence); then every read the plan needs, sent together
   (provider.together): the state ConfigMap, Nova's servers, the load balancers, the claims, the quota;

Steps 2 to 5 are decided before anything is written, in one ``ApplyDecision`` (provider.apply.decision):

2. ownership gate (provider.ownership.claims): what is not ours, and claims sent without their alias, are
   refused; the names aimed at a load balancer go to it; then DNS first (provider.apply.first_look): a name
   this cluster does not publish yet is asked once, and one DNS answers for another device is refused, one
   DNS is silent about held back (neither written);
3. per namespace (provider.ownership.tenancy: a name's namespace): the removal guard (provider.apply.removals)
   holds back a namespace's removals that would take too many of its aliases off the air (their tokens and
   claims kept, retried every loop); the name policy (landb.name_policy) and the cap of names per namespace
   (provider.apply.namespace_cap) refuse creations; the rest goes on;
4. plan (landb.plan): alias -> the servers that must carry it, then per-server *make* (additions) and
   *break* (removals) writes, with the index and packing rules; the load balancers' tag writes beside;
5. the claims to store, stored before any alias is written;
6. make writes (provider.apply.writes), on every server: first the *leave* writes (removals of aliases
   leaving DNS altogether, which free room), then every addition, packed on what they left;
7. break writes, once every make write has landed, but for those held back;
8. after the writes, together (one round trip): the claims dropped (those of the aliases whose removal
   landed, and the orphaned ones) and the state stored (the servers carrying our aliases, departed ones
   included, and the removal window);
9. bookkeeping: one summary line counting what landed, each name's transition told to the objects asking
   for it (provider.watch.events), every refusal of steps 2 to 7 settled (provider.refusals: the metric, the
   log, the events, the 503's text), the answer.

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
from collections.abc import Sequence, Set
from threading import Lock

import structlog

from landb_webhook.backends import Ports
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.indices import LostIndices
from landb_webhook.landb.plan import metadata_after
from landb_webhook.provider.apply.decision import ApplyDecision, Decider, Reads
from landb_webhook.provider.apply.executor import PlanExecutor
from landb_webhook.provider.apply.fence import UNFENCED, WriteFence, WriterLeaseLost
from landb_webhook.provider.apply.first_look import DnsFirst
from landb_webhook.provider.apply.kept_state import KeptState
from landb_webhook.provider.apply.loadbalancers import LoadBalancerPath, TagWrites
from landb_webhook.provider.apply.writes import (
    Outcome,
    log_summary,
    nodes_described,
    where_written,
    write_in_order,
)
from landb_webhook.provider.context import Context, named, node_names
from landb_webhook.provider.interface import ApplyError, ApplyRefused
from landb_webhook.provider.ownership.claims import Claims
from landb_webhook.provider.read.inventory import InventoryReader
from landb_webhook.provider.read.txt_registry import claimed_names
from landb_webhook.provider.refusals import Refusals, count
from landb_webhook.provider.together import Together
from landb_webhook.provider.watch import publications
from landb_webhook.provider.watch.events import NameChange, NameEvents

log = structlog.get_logger(__name__)

WRITE_FAILED = "a metadata write for it failed or was held back"


class NotTheWriter(ApplyRefused):
    """Another replica holds the writer lease; nothing was written."""


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
        self._decider = Decider(context, claims, lb_path, DnsFirst(context, ports.names, state.dns_refused))

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
            count(self._context.metrics, ["writer_lease_lost"])
            raise
        finally:
            self._claims.applying = False
            self._lock.release()

    def _apply(self, changes: Changes, fence: WriteFence) -> None:
        context = self._context
        started = time.monotonic()
        learn_who_asks(context.events, changes)
        # 1. ... then read everything the plan needs, the reads sent together (provider.together).
        reads = self._read_everything()
        refusals = Refusals()
        try:
            # 2. to 5. decided: where each alias goes, every write, the claims, what is refused.
            decision = self._decider.decide(
                changes, reads, refusals, window=self._state.window, preferred=self._lost_indices.preferred()
            )
            self._state.window = decision.window
            plan = decision.plan
            self._lost_indices.record(
                plan.added_indices(), plan.removed_indices(), withdrawn=decision.withdraw
            )
            outcome, changed = self._write(decision, reads, fence)
        except BaseException:
            refusals.settle(context)  # what was refused is told, however the rest went
            raise
        self._record(decision, reads, outcome=outcome, changed=changed, refusals=refusals, started=started)

    def _write(self, decision: ApplyDecision, reads: Reads, fence: WriteFence) -> tuple[Outcome, set[str]]:
        """Steps 5 to 8; the outcome, and the labels whose carriers changed (every write for them landed)."""
        context, options = self._context, self._context.options
        # 5. claims stored, before any alias is written.
        self._store_claims(upserts=decision.store, deletes=[], fence=fence)

        # 6. make writes, then 7. break writes (provider.apply.writes), on load balancers and servers.
        tags = TagWrites(self._lb_path, decision.tags, reads.load_balancers)
        outcome = write_in_order(self._executor, decision.plan.servers, fence, tags)
        changed_names = publications.changed_names(decision.plan, outcome, options)
        context.published.written(changed_names, context.clock())
        if outcome.abandoned is not None:
            raise outcome.abandoned

        # 8. after the writes, in one round trip: the claims dropped (the aliases whose removal landed, and
        # the orphaned ones) beside the state stored (the servers carrying our aliases, the window). A
        # frozen holder keeps the alias whatever we do: once our tokens are gone the name is someone
        # else's, so its claim goes too (else external-dns would ask to delete it every loop).
        kept = outcome.failed_labels() | decision.keep_claims
        gone, orphaned = self._claims_to_drop(
            [c for c in decision.drop if self._claims.claimed_label(c) not in kept],
            self._claims.orphaned(reads.claims, decision.carried_or_wanted),
        )
        owned_after = (decision.claimed_before | claimed_names(decision.store)) - claimed_names(
            [*gone, *orphaned]
        )
        if not options.dry_run:
            owned = self._claims.owned_test(set(owned_after))
            self._state.remember(reads.inventory, decision.plan, owned, self._servers.server)
        with Together("apply-after") as together:
            together.start(
                lambda: self._drop_claims(gone, orphaned, fence), upstream="kubernetes", what="claims dropped"
            )
            if not options.dry_run:
                self._state.save(fence)  # says its own failure: the apply goes on (provider.kept_state)
        return outcome, {found for name in changed_names if (found := context.label_or_none(name))}

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
        count(self._context.metrics, ["not_the_writer"])
        log.warning("apply refused: another replica holds the writer lease", holder=holder)
        raise NotTheWriter(f"not the writer: the writer lease is held by {holder}")

    # -- 1. the reads ------------------------------------------------------------------------

    def _read_everything(self) -> Reads:
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
        return Reads(self._inventory.fresh(listing), load_balancers_read.result(), claims, quota)

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

    def _record(
        self,
        decision: ApplyDecision,
        reads: Reads,
        *,
        outcome: Outcome,
        changed: Set[str],
        refusals: Refusals,
        started: float,
    ) -> None:
        """Step 9: one summary line counting what landed, what was written handed to the next read (it
        need not parse it again), each name's transition told, every refusal settled, the answer."""
        context, options = self._context, self._context.options
        unfinished = outcome.failed_labels() | decision.keep_claims
        carried_before = reads.carried()
        removed = (decision.withdraw & carried_before) - unfinished
        log_summary(
            decision.plan,
            len(reads.inventory.server_states()),
            outcome,
            len(refusals.names()),
            started,
            created=(decision.publish - carried_before) - unfinished,
            removed=removed,
            dry_run=options.dry_run,
        )
        if not options.dry_run:  # a dry run tells only the refusals
            wrote = outcome.fully_written(decision.plan.servers)
            self._inventory.wrote(reads.inventory, {p.server.server_id: metadata_after(p) for p in wrote})
            nodes = nodes_described(node_names(reads.inventory))
            for label in sorted((decision.publish - unfinished) & changed):
                where = where_written(label, decision.wanted, decision.homes, nodes)
                self._tell(label, "written", where + DnsFirst.taking_over_note(decision.first, label))
            for label in sorted(removed):
                self._tell(label, "removed", "every carrier")
        for label in sorted(outcome.failed_labels()):
            refusals.refuse(label, "write_failed", WRITE_FAILED)
        answer = refusals.settle(context)
        self._finish(outcome, answer + outcome.tags.problems(reads.load_balancers.named))

    def _tell(self, label: str, what: str, detail: str) -> None:
        self._context.events.tell(NameChange(self._context.dns_name(label), what, detail))

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


def learn_who_asks(events: NameEvents, changes: Changes) -> None:
    """The objects asking for the names changed, for their events: a creation's and an update's new side
    ask now; an update's old side names the object that asked when the record was written (its claim's: an
    Ingress a route has replaced, perhaps), so it is not learnt; a deletion's asked last."""
    events.learn(changes.delete)
    events.learn((*changes.create, *changes.update_new))
