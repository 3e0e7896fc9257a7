"""THE OWNERSHIP GATE (registry ``txt``): which aliases are ours to change, which claims are stored and
dropped, and the claims left without their alias.

A name is ours through a TXT claim stored before this apply, or one created in the same apply as the
alias itself (external-dns' txt registry writes a claim only beside a create); a claim smuggled beside
an update or a deletion, or sent alone, grants nothing and is not stored. A claim is stored only beside
the publication of its alias, and deleted only beside its withdrawal; a name that can never be an alias
gets none. A create over an alias that exists without a claim is a takeover: adopted with
LANDB_ADOPT_EXISTING when adoption is safe (provider.adopt), refused otherwise. With registry ``noop``
every alias is ours. With LANDB_TXT_OWNER_ID, a claim naming another owner id (or none readable) is not
ours: it is ignored for ownership, stored or sent (``ours``), and said once.

A removal that landed although it was reported failed leaves its claim behind (*orphaned*): Records
leaves such claims out and the next apply drops them, after its break writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

import structlog

from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.provider.context import ALIAS_RECORD_TYPES, Context, node_names, nodes_holding
from landb_webhook.provider.ownership.adopt import adoptable
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.read.txt_registry import claimed_names, is_ownership_record, owned_name, owner_of
from landb_webhook.provider.refusals import Refusals
from landb_webhook.provider.status.analysis import StatusAnalysis
from landb_webhook.provider.status.values import ClusterStatus

log = structlog.get_logger(__name__)

NOT_OWNED = "no ownership record: LanDB holds the name already, set by hand or by another owner"


@dataclass(frozen=True)
class Gated:
    """What the ownership gate lets through of one change set."""

    publish: set[str]
    """Aliases to publish on their carriers."""
    withdraw: set[str]
    """Aliases to take off every server."""
    store: list[Endpoint]
    """Claims to store before the writes."""
    drop: list[Endpoint]
    """Claims to drop once their alias is withdrawn."""


class Claims:
    def __init__(self, context: Context) -> None:
        self._context = context
        self.applying = False
        """Set while an apply runs: it stores a claim just before it writes the alias."""
        self._analysis: StatusAnalysis | None = None
        """``status``' analysis, kept from one Records to the next (``analysis``)."""

    # -- the gate: one change set -----------------------------------------------------------

    def gate(
        self,
        changes: Changes,
        inventory: Inventory,
        claim_records: Sequence[Endpoint],
        refusals: Refusals,
        *,
        tagged: Set[str] = frozenset(),
    ) -> Gated:
        """Turn the change set into aliases to publish and withdraw and claims to store and drop, refusing
        (in ``refusals``) what is not ours and what would overwrite a plain (CNAME) alias. ``tagged``: the
        names load balancer tags publish (provider.loadbalancers), which a create may not take over either."""
        context = self._context
        claims_before = claimed_names(claim_records)
        new_claims = [e for e in self.ours((*changes.create, *changes.update_new)) if is_ownership_record(e)]
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
        publish = context.labels(
            e
            for e in (*changes.create, *changes.update_new)
            if not is_ownership_record(e) and e not in plain_changes
        )
        withdraw = (
            context.labels(
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
            context.dns_name(label) for claim in new_claims if (label := self.claimed_label(claim)) in created
        }
        not_owned = self._not_owned(
            inventory, publish | withdraw, claims_before | claimed_with_alias, refusals
        )
        not_owned |= self._refused_takeovers(inventory, publish - not_owned, claim_records, tagged, refusals)
        publish -= not_owned
        withdraw -= not_owned
        store, drop = self._claim_changes(
            new_claims, gone_claims, refusals, publish=publish, withdraw=withdraw, not_owned=not_owned
        )
        _refuse_plain_alias_changes(plain_changes, refusals)
        return Gated(publish, withdraw, store, drop)

    def ours(self, records: Iterable[Endpoint]) -> list[Endpoint]:
        """``records`` but the claims of another owner id than LANDB_TXT_OWNER_ID (each said once): they
        grant nothing, are never stored and never dropped by us. Unset, every claim is kept."""
        owner_id = self._context.options.txt_owner_id
        kept: list[Endpoint] = []
        for record in records:
            if owner_id is None or not is_ownership_record(record) or owner_of(record) == owner_id:
                kept.append(record)
                continue
            self._context.warn_once(
                record.dns_name,
                "ownership record of another owner ignored: its name is not ours",
                record_owner=owner_of(record),
                owner_id=owner_id,
                owned_record=owned_name(record),
                hint="a claim external-dns with another --txt-owner-id wrote, or one written by hand; "
                "LANDB_TXT_OWNER_ID must be external-dns' --txt-owner-id",
            )
        return kept

    def owned_test(self, claimed: set[str]) -> Callable[[str], bool]:
        """Whether an alias is ours, given the names ``claimed``; with registry noop, every one is."""
        registry, dns_name = self._context.options.registry, self._context.dns_name
        return lambda label: registry.owns(dns_name(label), claimed)

    def unclaimed(self, labels: Iterable[str], claimed: set[str]) -> set[str]:
        """With the txt registry, aliases without a TXT claim are someone else's; with noop, none are."""
        registry, dns_name = self._context.options.registry, self._context.dns_name
        return {label for label in labels if not registry.owns(dns_name(label), claimed)}

    def claimed_label(self, claim: Endpoint) -> str | None:
        return self._context.label_or_none(owned_name(claim))

    def _not_owned(
        self, inventory: Inventory, labels: set[str], claimed: set[str], refusals: Refusals
    ) -> set[str]:
        """The changes to refuse: aliases that are someone else's are never touched."""
        refused = self.unclaimed(labels, claimed)
        for label in sorted(refused):
            self._refuse_not_owned(
                inventory,
                label,
                refusals,
                "change refused: alias held by someone else (no ownership record)",
                "external-dns only changes records it owns; if this one should be its, run "
                + self.adopt_command(label),
            )
        return refused

    def _refuse_not_owned(
        self, inventory: Inventory, label: str, refusals: Refusals, message: str, hint: str
    ) -> None:
        refusals.refuse(label, "not_owned", NOT_OWNED)
        nodes = nodes_holding(inventory, label, node_names(inventory))
        refusals.say(message, alias=label, nodes=nodes, hint=hint)

    def adopt_command(self, label: str) -> str:
        return (
            "'landb-webhook adopt --owner-id <external-dns --txt-owner-id> --names "
            f"{self._context.dns_name(label)}'"
        )

    def _created_labels(self, changes: Changes) -> set[str]:
        """The aliases the change set creates (not updates): a new claim grants ownership only beside one."""
        return {
            label
            for e in changes.create
            if e.record_type.upper() in ALIAS_RECORD_TYPES
            and (label := self._context.label_or_none(e.dns_name))
        }

    def _claim_changes(
        self,
        upserts: Sequence[Endpoint],
        deletes: Sequence[Endpoint],
        refusals: Refusals,
        *,
        publish: set[str],
        withdraw: set[str],
        not_owned: set[str],
    ) -> tuple[list[Endpoint], list[Endpoint]]:
        """The claims to store and to delete, and what is refused: a claim is stored only beside the
        publication of its alias (a name that can never be an alias has none), and deleted only beside
        its withdrawal, as external-dns' txt registry does; anything else is refused and logged."""
        stored = [c for c in upserts if self.claimed_label(c) in publish]
        dropped = [c for c in deletes if (label := self.claimed_label(c)) is None or label in withdraw]
        kept = {id(c) for c in (*stored, *dropped)}
        for claim, verb in (
            *((c, "stored") for c in upserts if id(c) not in kept),
            *((c, "deleted") for c in deletes if id(c) not in kept),
        ):
            if self.claimed_label(claim) in not_owned:
                continue  # its alias was refused, and said so
            refusals.refuse(claim.dns_name, "claim_alone", f"ownership record not {verb} without its alias")
            refusals.say(
                f"change refused: ownership record not {verb}",
                record=claim.dns_name,
                owned_record=owned_name(claim),
                reason=f"a claim is {verb} only together with its alias, which must be a valid alias name",
            )
        return stored, dropped

    def _refused_takeovers(
        self,
        inventory: Inventory,
        publish: set[str],
        claims_before: Sequence[Endpoint],
        tagged: Set[str],
        refusals: Refusals,
    ) -> set[str]:
        """Creates of aliases that already exist without a claim: adopted (their carriers keep their N)
        with LANDB_ADOPT_EXISTING when adoption is safe, refused otherwise (a name tagged on a load
        balancer by someone else is never adopted)."""
        carried = inventory.carriers().keys() | tagged
        existing = self.unclaimed(publish & carried, claimed_names(claims_before))
        if not existing:
            return set()
        status = self.analysis(inventory, claims_before)
        refused: set[str] = set()
        for label in sorted(existing):
            name = status.name(label)
            if self._context.options.adopt_existing and name is not None and adoptable(name):
                log.warning(
                    "existing alias adopted: external-dns claimed it, its carriers keep their N", alias=label
                )
                continue
            refused.add(label)
            self._refuse_not_owned(
                inventory,
                label,
                refusals,
                "change refused: alias held by someone else (it exists without ownership record)",
                "to hand it to external-dns, set LANDB_ADOPT_EXISTING=true or run "
                + self.adopt_command(label),
            )
        return refused

    # -- what Records shows of the claims ---------------------------------------------------

    def offered_for_adoption(self, inventory: Inventory, claims: Sequence[Endpoint]) -> set[str]:
        """With LANDB_ADOPT_EXISTING, the unclaimed aliases Records leaves out: external-dns then sees
        their names as free, and a desired one comes back as a create with its claim (``gate``)."""
        if not self._context.options.adopt_existing:
            return set()
        offered = {name.label for name in self.analysis(inventory, claims).names if adoptable(name)}
        for label in sorted(offered):
            self._context.warn_once(label, "alias without ownership record: external-dns may adopt it")
        return offered

    def without_orphaned(self, claims: Sequence[Endpoint], found: Mapping[str, object]) -> list[Endpoint]:
        """The claims but those of aliases no server carries, which the next apply drops.

        A removal that landed although it was reported failed (its reply lost, then no time left to
        retry) leaves its claim behind, and external-dns never deletes a claim whose record it no
        longer sees. While an apply runs, every claim is reported: it stores a claim just before it
        writes the alias.
        """
        if self.applying:
            return list(claims)
        orphaned = {c.key for c in self.orphaned(claims, found.keys())}
        return [c for c in claims if c.key not in orphaned]

    def orphaned(self, claims: Iterable[Endpoint], carried_or_wanted: Set[str]) -> list[Endpoint]:
        """Claims of valid alias names that no server carries and no change wants: kept, one would make
        an alias of that name set later by hand look like ours."""
        return [
            c
            for c in claims
            if (label := self.claimed_label(c)) is not None and label not in carried_or_wanted
        ]

    def analysis(self, inventory: Inventory, claims: Sequence[Endpoint]) -> ClusterStatus:
        """``status``' analysis, made again only for the slot values and names that changed since the last
        (``LANDB_ADOPT_EXISTING`` and takeovers ask it; the gauge is counted apart, from the holder index)."""
        options = self._context.options
        kept = self._analysis
        if kept is None or (kept.domain, kept.health) != (options.dns_domain, options.health):
            kept = self._analysis = StatusAnalysis(domain=options.dns_domain, health=options.health)
        return kept.analyse(inventory, claims)


def _refuse_plain_alias_changes(changes: Sequence[Endpoint], refusals: Refusals) -> None:
    for endpoint in changes:
        refusals.refuse(endpoint.dns_name, "cname_kept", "plain (CNAME) alias, never deleted or overwritten")
        refusals.say(
            "change refused: a plain (CNAME) alias is never deleted or overwritten",
            alias=endpoint.dns_name,
            hint="it was set by someone else; only they can remove it",
        )


def _is_cname(endpoint: Endpoint) -> bool:
    return endpoint.record_type.upper() == "CNAME"
