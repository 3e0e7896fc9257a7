"""Steps 2 to 5 of an apply, decided before anything is written (the steps: provider.apply.applier).

``Decider.decide`` turns one change set and what step 1 read into one ``ApplyDecision``: which aliases go
on which servers and load balancers, the plan of every write, the claims stored before the writes and
those dropped after them, and everything refused, in ``refusals``. It writes nothing and says nothing: the
writes follow it (provider.apply.writes), and what it refused is counted, said and told once, at step 9
(provider.refusals). Its one call out is DNS first's lookups (provider.apply.first_look).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from concurrent.futures import Future
from dataclasses import dataclass

import structlog

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.first_look import FirstLook
from landb_webhook.landb.loadbalancers import TagPlan, plan_tags
from landb_webhook.landb.plan import Plan, plan_changes
from landb_webhook.provider.apply.first_look import DnsFirst
from landb_webhook.provider.apply.foreign import foreign_homes
from landb_webhook.provider.apply.loadbalancers import LoadBalancerPath, LoadBalancers, merged_carriers
from landb_webhook.provider.apply.namespace_cap import over_cap, past_cap
from landb_webhook.provider.apply.removals import HELD_BACK, RemovalWindow, guard_removals, held_fields
from landb_webhook.provider.context import ALIAS_RECORD_TYPES, Context
from landb_webhook.provider.ownership.claims import Claims, Gated
from landb_webhook.provider.ownership.tenancy import namespaces
from landb_webhook.provider.read.departed import owned_slot_labels
from landb_webhook.provider.read.health import Placement
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.read.txt_registry import claimed_names, is_ownership_record
from landb_webhook.provider.refusals import Refusals

log = structlog.get_logger(__name__)

REFUSED_CREATIONS = {
    "namespace_cap": "change refused: namespace at its cap of published names",
    "name_policy": "change refused: the name policy does not allow this name",
}
"""The warning of each kind of creation refused in step 3, said once an hour per namespace (and name)."""
NO_INGRESS = "no ingress node to carry it"
PLAIN_ALIAS = "LanDB holds the name as a plain (CNAME) alias: not tagged on a load balancer"


@dataclass(frozen=True)
class Reads:
    """What step 1 read, together."""

    inventory: Inventory
    load_balancers: LoadBalancers
    claims: Sequence[Endpoint]
    """The claims of this owner (another owner's grant nothing)."""
    quota: Future[int]
    """The metadata quota: only a plan that adds needs it, and a failure to read it fails only such a plan."""

    def carried(self) -> frozenset[str]:
        """The aliases on the air before the apply: on a server or a load balancer's tag."""
        return frozenset(self.inventory.carriers().keys() | self.load_balancers.carriers().keys())


@dataclass(frozen=True)
class ApplyDecision:
    """What one apply does, decided (module docstring); every set is of alias labels."""

    publish: frozenset[str]
    """To publish: the change set's creations and updates less every refusal."""
    withdraw: frozenset[str]
    """To take off every carrier, less the removals held back."""
    homes: Mapping[str, frozenset[str]]
    """The names going on load balancers' tags -> their ids (provider.apply.loadbalancers)."""
    wanted: Mapping[str, frozenset[str]]
    """The plan's input: alias -> the servers that must carry it (none: off every server)."""
    plan: Plan
    tags: TagPlan
    store: tuple[Endpoint, ...]
    """Claims stored at step 5, before any alias is written."""
    drop: tuple[Endpoint, ...]
    """Claims dropped at step 8 (with the orphaned ones) once their alias's removal landed."""
    keep_claims: frozenset[str]
    """Whatever the writes do, these keep their claims: refused by the plan, beside a plain alias, or
    their removal held back by the removal guard."""
    claimed_before: frozenset[str]
    """DNS names claimed before this apply."""
    carried_or_wanted: frozenset[str]
    """On the air before, or asked for: a claim of any other alias is orphaned (provider.ownership.claims)."""
    window: RemovalWindow
    """The removal window once the guard judged this apply."""
    first: FirstLook


class Decider:
    def __init__(
        self, context: Context, claims: Claims, lb_path: LoadBalancerPath, dns_first: DnsFirst
    ) -> None:
        self._context = context
        self._claims = claims
        self._lb_path = lb_path
        self._dns_first = dns_first

    def decide(
        self,
        changes: Changes,
        reads: Reads,
        refusals: Refusals,
        *,
        window: RemovalWindow,
        preferred: Mapping[str, Mapping[str, int]],
    ) -> ApplyDecision:
        """Steps 2 to 5, what they refuse added to ``refusals`` (``window``: the removal window before this
        apply; ``preferred``: the indices aliases lost lately, which they get back: landb.indices)."""
        context, options = self._context, self._context.options
        inventory, load_balancers = reads.inventory, reads.load_balancers
        claimed_before = claimed_names(reads.claims)

        # 2. the ownership gate: what is not ours is refused, and which claims go with the aliases; the
        # names whose targets are a load balancer's go to it, not to the ingress nodes, unless LanDB holds
        # them as a plain alias or the load balancer is another namespace's.
        gated = self._claims.gate(
            changes, inventory, reads.claims, refusals, tagged=load_balancers.carriers().keys()
        )
        carried_or_wanted = reads.carried() | gated.publish
        homes = self._lb_path.homes(
            (*changes.create, *changes.update_new), load_balancers, self._published(gated)
        )
        beside_plain = self._beside_plain_aliases(homes, inventory, refusals)
        foreign = foreign_homes(context, changes, homes, load_balancers, reads.claims, refusals=refusals)
        not_on_load_balancers = beside_plain | foreign
        gated.publish.difference_update(not_on_load_balancers)
        # ... then DNS first: a new name DNS answers for another device is refused, one it is silent about
        # held back; neither is written nor claimed, and neither fails the apply.
        first = self._dns_first.look(
            gated.publish,
            claimed=claimed_before,
            inventory=inventory,
            load_balancers=load_balancers,
            homes=homes,
            refusals=refusals,
        )
        gated.publish.difference_update(first.kept_back)
        homes = {
            label: ids for label, ids in homes.items() if label not in not_on_load_balancers | first.kept_back
        }

        # 3. per namespace: the removal guard holds back a namespace's removals that would take too many of
        # its aliases off the air (tokens and claims kept), the name policy and the cap of names refuse
        # creations; everything else goes on.
        placement = context.placement(inventory)
        published = merged_carriers(placement.current, load_balancers.carriers())
        whose = namespaces([*reads.claims, *gated.store], _endpoints(changes), context.label_or_none)
        held, window = self._guard_removals(
            gated, published, inventory=inventory, whose=whose, window=window, refusals=refusals
        )
        self._refuse_creations(gated, published, whose, homes, refusals)

        # 4. the plan: which servers must carry each alias, then the make and break writes of each server.
        publish = set(gated.publish)
        if publish - homes.keys() and not placement.ingress:
            self._no_ingress_nodes(publish - homes.keys(), inventory, refusals)
            publish = set(homes)
        wanted = {label: placement.carriers_of(label) for label in publish - homes.keys()} | {
            label: frozenset() for label in gated.withdraw | homes.keys()
        }
        owned = self._claims.owned_test(set(claimed_before | claimed_names(gated.store)))
        wanted |= self._departed_moves(inventory, placement, wanted, owned)
        plan = plan_changes(
            inventory.server_states(),
            wanted,
            floor=options.index_floor,
            max_length=options.max_value_length,
            quota=reads.quota.result() if wanted else 0,
            reserved=options.reserved_metadata_keys if wanted else 0,
            preferred=preferred,
            holders=inventory.holders(),
            leaving=gated.withdraw,
        )
        refusals.planned(plan.refusals)
        # ... and the load balancers' tag writes. A name the plan refused keeps its tags: a refused addition
        # blocks its removals everywhere.
        refused_by_plan = {r.label for r in plan.refusals if r.kind != "frozen"}
        tags = plan_tags(
            load_balancers.carried(),
            {label: homes.get(label, frozenset()) for label in (publish | gated.withdraw) - refused_by_plan},
            leaving=gated.withdraw,
        )

        # 5. the claims to store before any alias is written: none where no alias will be (beside a plain
        # alias, a name DNS first kept back).
        unwritten = (
            {r.label for r in plan.refusals if r.kind == "plain_alias"} | beside_plain | first.kept_back
        )
        return ApplyDecision(
            publish=frozenset(publish),
            withdraw=frozenset(gated.withdraw),
            homes=homes,
            wanted=wanted,
            plan=plan,
            tags=tags,
            store=tuple(c for c in gated.store if self._claims.claimed_label(c) not in unwritten),
            drop=tuple(gated.drop),
            keep_claims=frozenset(refused_by_plan | beside_plain | held),
            claimed_before=frozenset(claimed_before),
            carried_or_wanted=frozenset(carried_or_wanted),
            window=window,
            first=first,
        )

    # -- 2. the load balancers ----------------------------------------------------------------------

    def _published(self, gated: Gated) -> Callable[[Endpoint], str | None]:
        """The alias an endpoint publishes, if the gate lets it through."""
        context = self._context

        def published_label(endpoint: Endpoint) -> str | None:
            if is_ownership_record(endpoint) or endpoint.record_type.upper() not in ALIAS_RECORD_TYPES:
                return None
            label = context.label_or_none(endpoint.dns_name)
            return label if label in gated.publish else None

        return published_label

    def _beside_plain_aliases(
        self, homes: Mapping[str, frozenset[str]], inventory: Inventory, refusals: Refusals
    ) -> set[str]:
        """The names for load balancers that LanDB holds as a plain alias (one name cannot be a CNAME and A
        records): refused, no tag written."""
        plain = inventory.plain_aliases(self._context.options.dns_domain)
        blocked = {label for label in homes if label in plain}
        for label in sorted(blocked):
            refusals.refuse(label, "plain_alias", PLAIN_ALIAS)
            refusals.say(
                "change refused: a plain (CNAME) alias of this name exists, no load balancer tag is added",
                alias=label,
                hosts=sorted(plain[label]),
            )
        return blocked

    # -- 3. per namespace -----------------------------------------------------------------------------

    def _guard_removals(
        self,
        gated: Gated,
        published: Mapping[str, Set[str]],
        *,
        inventory: Inventory,
        whose: Mapping[str, str],
        window: RemovalWindow,
        refusals: Refusals,
    ) -> tuple[set[str], RemovalWindow]:
        """The removals the guard holds back, taken out of ``gated.withdraw`` and refused; and the window
        moved on."""
        options = self._context.options
        guarded = guard_removals(
            options.removal_guard,
            window,
            withdraw=gated.withdraw,
            publish=gated.publish,
            published=published,
            staying=inventory.frozen_carriers(),
            namespaces=whose,
            now=self._context.clock(),
            dry_run=options.dry_run,
        )
        for held in guarded.held:
            for label in held.labels:
                refusals.refuse(label, "removal_guard", held.reason)
            refusals.say(
                HELD_BACK,
                level="error",
                once=("removal_guard", held.namespace, held.labels),
                **held_fields(held, options.removal_guard),
            )
        gated.withdraw.difference_update(guarded.held_labels())
        return guarded.held_labels(), guarded.window

    def _refuse_creations(
        self,
        gated: Gated,
        published: Mapping[str, Set[str]],
        whose: Mapping[str, str],
        homes: dict[str, frozenset[str]],
        refusals: Refusals,
    ) -> None:
        """The creations the name policy and the cap of names per namespace refuse, taken out of ``gated``
        and ``homes``: no claim, no write."""
        options = self._context.options
        on_air = {label for label, carriers in published.items() if carriers}
        for label in sorted(gated.publish - on_air):  # the name policy: creations only
            namespace = whose.get(label, "")
            why = options.name_policy.refusal(label, namespace)
            if why is not None:
                self._refuse(gated, namespace, [label], why, homes, refusals=refusals, kind="name_policy")
        cap = options.max_published_per_namespace
        if cap is None:
            return
        refused = over_cap(cap, whose, published=on_air, withdraw=gated.withdraw, publish=gated.publish)
        for namespace, labels in refused.items():
            self._refuse(
                gated,
                namespace,
                labels,
                past_cap(namespace, cap),
                homes,
                refusals=refusals,
                kind="namespace_cap",
            )

    def _refuse(
        self,
        gated: Gated,
        namespace: str,
        labels: list[str],
        why: str,
        homes: dict[str, frozenset[str]],
        *,
        refusals: Refusals,
        kind: str,
    ) -> None:
        message = REFUSED_CREATIONS[kind]
        subject = f"{kind} {namespace} {labels[0] if kind == 'name_policy' else ''}"
        refusals.say(
            message,
            once=(subject, message),
            subject=subject,
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
            refusals.refuse(label, kind, why)

    # -- 4. the plan ------------------------------------------------------------------------------------

    def _no_ingress_nodes(self, labels: Set[str], inventory: Inventory, refusals: Refusals) -> None:
        """An empty ingress set is far likelier a wrong selector or a cluster in trouble than a wish to take
        every name off the air: the additions are refused, loudly, rather than every alias removed."""
        refusals.say(
            "no node matches the ingress selector: aliases are left where they are",
            level="error",
            ingress_selector=self._context.options.ingress_selector,
            aliases=sorted(labels),
            nodes_seen=len(inventory.nodes),
        )
        for label in sorted(labels):
            refusals.refuse(label, "no_ingress_nodes", NO_INGRESS)

    @staticmethod
    def _departed_moves(
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


def _endpoints(changes: Changes) -> tuple[Endpoint, ...]:
    return (*changes.create, *changes.update_new, *changes.delete, *changes.update_old)
