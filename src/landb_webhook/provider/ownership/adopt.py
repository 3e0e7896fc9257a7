"""Adoption: hand aliases that already exist on the ingress nodes to external-dns, without a write to Nova.

An alias set by hand or by another tool has no TXT claim, so external-dns' txt registry treats it as
someone else's forever. Adopting it writes the claim external-dns itself would have written for the
owner id; every carrier keeps its N, and the next external-dns loop finds the name already its own.
A name is adopted only when that next loop would neither remove nor renumber any of its carriers: not
when a carrier is a non-ingress node, two carriers share an N, one server holds it twice, or a server
also holds it as a plain (CNAME) alias (:attr:`NameStatus.problems`); nor when it is only a plain alias;
nor when a carrier is an unhealthy ingress node (not Ready, being deleted, no Ready controller pod), which
the loop takes the alias off once the node's grace period ends: a human decides when.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from landb_webhook.backends import OwnershipStore
from landb_webhook.endpoint import Endpoint
from landb_webhook.provider.read.txt_registry import (
    claim_record,
    claimed_names,
    owned_name,
    validate_owner_id,
)
from landb_webhook.provider.status.values import ClusterStatus, Holding, NameStatus


@dataclass(frozen=True)
class Decision:
    """What adoption does with one name: claim it (``claim`` set) or leave it, and why."""

    label: str
    dns_name: str
    holdings: tuple[Holding, ...]
    claim: Endpoint | None
    reason: str
    """Why it is left; for a claim, what the next external-dns loop will still do (may be empty)."""


@dataclass(frozen=True)
class AdoptionPlan:
    owner_id: str
    claims: tuple[Decision, ...]
    left: tuple[Decision, ...]

    def records(self) -> list[Endpoint]:
        return [decision.claim for decision in self.claims if decision.claim is not None]


def plan_adoption(
    status: ClusterStatus,
    *,
    owner_id: str,
    labels: Collection[str] | None = None,
    txt_prefix: str = "",
    txt_suffix: str = "",
    domain: str,
    ingress_selector: str = "",
) -> AdoptionPlan:
    """Decide, for each name in ``labels`` (None: every name found), whether to claim it for ``owner_id``.
    ``ingress_selector`` is named when it matches no node: then every carrier looks like a non-ingress
    node, and the selector, not the carriers, is what to fix.

    Raises InvalidOwnerId for an owner id a claim cannot hold.
    """
    validate_owner_id(owner_id)
    wanted = sorted(labels) if labels is not None else [name.label for name in status.names]
    # The nodes the next loop places aliases on (those that are healthy, as far as adoption can tell).
    ingress_nodes = sorted(node.name for node in status.nodes if node.ingress and not node.problems)
    unmatched = None
    if status.nodes and not any(node.ingress for node in status.nodes):
        unmatched = (
            f"the ingress selector {ingress_selector} matches none of the {len(status.nodes)} nodes: fix "
            "LANDB_INGRESS_SELECTOR, then run adopt again"
        )
    claims: list[Decision] = []
    left: list[Decision] = []
    for label in wanted:
        name = status.name(label)
        if name is None:
            left.append(Decision(label, f"{label}.{domain}", (), None, "no node carries it"))
            continue
        reason = _reason_to_leave(name, owner_id)
        if reason is not None and unmatched is not None and not name.claimed:
            reason = unmatched
        if reason is not None:
            left.append(Decision(label, name.dns_name, name.holdings, None, reason))
            continue
        claim = claim_record(name.dns_name, owner_id, prefix=txt_prefix, suffix=txt_suffix)
        missing = [node for node in ingress_nodes if node not in {h.node for h in name.holdings}]
        note = f"the next loop adds it to {', '.join(missing)}" if missing else ""
        claims.append(Decision(label, name.dns_name, name.holdings, claim, note))
    return AdoptionPlan(owner_id, tuple(claims), tuple(left))


def adoptable(name: NameStatus) -> bool:
    """An unclaimed name that external-dns can take over as it is (LANDB_ADOPT_EXISTING asks this)."""
    return _reason_to_leave(name, owner_id=None) is None


def _reason_to_leave(name: NameStatus, owner_id: str | None) -> str | None:
    if name.claimed:
        if owner_id is not None and name.owners == (owner_id,):
            return "already claimed by this owner"
        whom = ", ".join(name.owners) or "an unreadable claim"
        return f"already claimed by {whom}"
    if name.problems:
        return "; ".join(name.problems) + ": fix it by hand first, or external-dns would rewrite it"
    if not name.holdings:
        return f"only a plain (CNAME) alias ({', '.join(name.plain_nodes)}): no A record to adopt"
    unhealthy = sorted({f"{h.node} ({', '.join(h.unhealthy)})" for h in name.holdings if h.unhealthy})
    if unhealthy:
        return (
            f"carried by an unhealthy node: {'; '.join(unhealthy)}; external-dns would take it off that node "
            "once its grace period ends: adopt it when the node is healthy, or take the alias off it first"
        )
    return None


def store_claims(ownership: OwnershipStore, plan: AdoptionPlan) -> list[Endpoint]:
    """Store the plan's claims, except for names someone claimed since the plan was read; returns
    the claims stored."""
    claimed_meanwhile = claimed_names(ownership.records())
    fresh = [claim for claim in plan.records() if owned_name(claim) not in claimed_meanwhile]
    if fresh:
        ownership.apply(fresh, [])
    return fresh
