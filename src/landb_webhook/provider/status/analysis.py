"""What a human should know about the cluster's aliases, analysed purely from an inventory and the claims.

``landb-webhook status`` prints it (and exits non-zero when :meth:`ClusterStatus.attention` is not
empty); ``adopt`` and ``LANDB_ADOPT_EXISTING`` claim only names whose :attr:`NameStatus.problems` is
empty. What counts as a problem is ``provider/status/problems.py``; here it is worded. The values are
``provider/status/values.py``; reading the cluster for them is ``provider/status/reader.py``; one server's
holdings, kept slot value by slot value, ``provider/status/holdings.py``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import groupby

from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.landb.names import dns_name_for
from landb_webhook.provider.read.health import HealthPolicy
from landb_webhook.provider.read.inventory import Inventory
from landb_webhook.provider.read.txt_registry import is_ownership_record, owned_name, owner_of, resource_of
from landb_webhook.provider.status.holdings import ServerHoldings, health_problems
from landb_webhook.provider.status.problems import problems
from landb_webhook.provider.status.values import (
    ClusterStatus,
    DepartedServer,
    DuplicateIndex,
    Holding,
    KeyQuotaUse,
    NameStatus,
    NodeStatus,
)

QUOTA_WARNING_RATIO = 0.8
"""A server holding more than this share of its metadata key quota is reported."""


def analyse(
    inventory: Inventory,
    claims: Iterable[Endpoint],
    *,
    domain: str,
    quota: int | None = None,
    health: HealthPolicy,
) -> ClusterStatus:
    """The status of every alias LanDB publishes for the cluster's nodes, and what needs a human."""
    return StatusAnalysis(domain=domain, health=health).analyse(inventory, claims, quota=quota)


class StatusAnalysis:
    """``analyse``, kept from one call to the next: a call analyses again only the slot values that changed
    (every value of a server whose node changed) and the names they hold or held; a change of claims
    changes only the claimed names' owners. With LANDB_ADOPT_EXISTING, Records asks it after each write,
    and one Holding per token of 500 servers cost seconds of CPU for one server's change."""

    def __init__(self, *, domain: str, health: HealthPolicy) -> None:
        self.domain = domain
        self.health = health
        self._servers: dict[str, ServerHoldings] = {}
        """node name -> its server's holdings."""
        self._holdings: dict[str, dict[str, tuple[Holding, ...]]] = defaultdict(dict)
        """label -> node name -> its holdings there."""
        self._plain: dict[str, set[str]] = defaultdict(set)
        """label -> the nodes holding it as a plain alias."""
        self._names: dict[str, tuple[NameStatus, tuple[DuplicateIndex, ...]]] = {}
        self._claims: list[Endpoint] | None = None
        self._owners: dict[str, set[str | None]] = {}
        self._resources: dict[str, set[str]] = {}
        self._values_analysed_before = 0
        """By servers that left."""
        self.names_analysed = 0
        """Names whose holdings were analysed so far (the work, counted)."""

    @property
    def values_analysed(self) -> int:
        """Slot values made into holdings so far (the work, counted)."""
        return self._values_analysed_before + sum(s.values_analysed for s in self._servers.values())

    def analyse(
        self, inventory: Inventory, claims: Iterable[Endpoint], *, quota: int | None = None
    ) -> ClusterStatus:
        changed = self._take_servers(inventory)
        claimed = self._take_claims(list(claims))
        for label in changed:
            self._analyse_name(label)
        for label in claimed - changed:
            self._name_claims_changed(label)
        labels = sorted(self._names)
        by_node = sorted(inventory.nodes, key=lambda n: n.name)
        per_server = [holdings for node in by_node if (holdings := self._servers.get(node.name)) is not None]
        return ClusterStatus(
            nodes=tuple(
                NodeStatus(
                    node.name,
                    server.id if (server := inventory.servers.get(node.name)) else None,
                    server.name if server else None,
                    node.is_ingress,
                    node.ready,
                    node.deleting,
                    node.unschedulable,
                    node.internal_ips,
                    health_problems(node, self.health),
                )
                for node in by_node
            ),
            names=tuple(self._names[label][0] for label in labels),
            quota=quota,
            servers_near_quota=_near_quota(inventory, quota),
            nodes_without_server=tuple(inventory.unresolved_nodes()),
            non_ingress_holdings=tuple(
                sorted(
                    (
                        h
                        for holdings in per_server
                        if not holdings.node.is_ingress
                        for hs in holdings.by_label.values()
                        for h in hs
                    ),
                    key=lambda h: (h.label, h.node, h.index, h.key),
                )
            ),
            duplicate_indices=tuple(d for label in labels for d in self._names[label][1]),
            frozen_forms=tuple(form for holdings in per_server for form in holdings.frozen_forms),
            departed_servers=tuple(
                DepartedServer(
                    gone.node_name,
                    server.id,
                    server.name,
                    tuple(text for _, text, _ in read_aliases(server.metadata).editable_tokens()),
                )
                for gone, server in inventory.departed
            ),
        )

    def _take_servers(self, inventory: Inventory) -> set[str]:
        """Bring the servers' holdings up to date; the labels whose holdings may have changed."""
        aliases = {(state.node_name, state.server_id): state.aliases for state in inventory.server_states()}
        changed: set[str] = set()
        seen: set[str] = set()
        for node in inventory.nodes:
            if (server := inventory.servers.get(node.name)) is None:
                continue
            seen.add(node.name)
            holdings = self._servers.get(node.name)
            if holdings is None or not holdings.same_node(node, server.id):
                if holdings is not None:
                    changed |= self._forget(holdings)
                holdings = self._servers[node.name] = ServerHoldings(node, server.id, self.health)
            found = holdings.take(aliases[node.name, server.id])
            for label in found:
                if (held := holdings.by_label.get(label)) is not None:
                    self._holdings[label][node.name] = held
                else:
                    self._holdings[label].pop(node.name, None)
                if label in holdings.plain:
                    self._plain[label].add(node.name)
                else:
                    self._plain[label].discard(node.name)
            changed |= found
        for name in self._servers.keys() - seen:
            changed |= self._forget(self._servers.pop(name))
        return changed

    def _forget(self, holdings: ServerHoldings) -> set[str]:
        self._values_analysed_before += holdings.values_analysed
        for label in holdings.by_label:
            del self._holdings[label][holdings.node.name]
        for label in holdings.plain:
            self._plain[label].discard(holdings.node.name)
        return holdings.labels()

    def _take_claims(self, claims: list[Endpoint]) -> set[str]:
        """Take the claims; the labels analysed whose owners or resources they change."""
        if claims == self._claims:
            return set()
        self._claims = claims
        owners, resources = _owners_by_name(claims), _resources_by_name(claims)
        changed = {
            name
            for before, now in ((self._owners, owners), (self._resources, resources))
            for name in before.keys() | now.keys()
            if before.get(name) != now.get(name)
        }
        self._owners, self._resources = owners, resources
        return {label for label, (status, _) in self._names.items() if status.dns_name in changed}

    def _name_claims_changed(self, label: str) -> None:
        status, duplicates = self._names[label]
        named = self._owners.get(status.dns_name, set())
        self._names[label] = (
            replace(
                status,
                claimed=bool(named),
                owners=tuple(sorted(owner for owner in named if owner is not None)),
                resources=tuple(sorted(self._resources.get(status.dns_name, ()))),
            ),
            duplicates,
        )

    def _analyse_name(self, label: str) -> None:
        by_node = self._holdings.get(label, {})
        holdings = [h for node in sorted(by_node) for h in by_node[node]]
        plain = sorted(self._plain.get(label, ()))
        if not holdings and not plain:
            self._names.pop(label, None)
            self._holdings.pop(label, None)
            self._plain.pop(label, None)
            return
        self.names_analysed += 1
        self._names[label] = _name_status(
            label, holdings, plain, owners=self._owners, resources=self._resources, domain=self.domain
        )


# -- the parts ---------------------------------------------------------------------------------------


def _owners_by_name(claims: Iterable[Endpoint]) -> dict[str, set[str | None]]:
    owners: dict[str, set[str | None]] = defaultdict(set)
    for claim in claims:
        if is_ownership_record(claim):
            owners[owned_name(claim)].add(owner_of(claim))
    return owners


def _resources_by_name(claims: Iterable[Endpoint]) -> dict[str, set[str]]:
    resources: dict[str, set[str]] = defaultdict(set)
    for claim in claims:
        if is_ownership_record(claim) and (resource := resource_of(claim)) is not None:
            resources[owned_name(claim)].add(resource)
    return resources


def _name_status(
    label: str,
    holdings: Sequence[Holding],
    plain_nodes: Sequence[str],
    *,
    owners: Mapping[str, set[str | None]],
    resources: Mapping[str, set[str]],
    domain: str,
) -> tuple[NameStatus, tuple[DuplicateIndex, ...]]:
    """The name's status, its problems worded in the order of the rules (``provider/status/problems.py``), and
    the Ns two of its holders hold."""
    by_node = {node: list(held) for node, held in groupby(holdings, key=lambda h: h.node)}
    found = list(
        problems(
            ((node, [h.index for h in held], held[0].ingress) for node, held in by_node.items()),
            plain_nodes,
        )
    )
    nodes_by_index: dict[int, set[str]] = defaultdict(set)
    for problem in found:
        if problem.rule == 2:
            nodes_by_index[problem.indices[0]].update(problem.nodes)
    duplicates = tuple(
        DuplicateIndex(label, index, tuple(sorted(nodes))) for index, nodes in sorted(nodes_by_index.items())
    )
    worded = [  # rule 1, a sentence per token
        f"carried by {h.node}, which is not an ingress node (N={h.index} in {h.key})"
        for problem in found
        if problem.rule == 1
        for h in by_node[problem.nodes[0]]
    ]
    worded += [  # rule 2, a sentence per N
        f"N={d.index} is held by {len(d.nodes)} nodes ({', '.join(d.nodes)}): LanDB needs one N per carrier"
        for d in duplicates
    ]
    worded += [
        f"node {p.nodes[0]} holds it {len(p.indices)} times (N={', '.join(map(str, p.indices))})"
        for p in found
        if p.rule == 3
    ]
    worded += [
        f"also held as a plain (CNAME) alias by {', '.join(p.nodes)}: LanDB would publish a CNAME "
        "and A records for one name"
        for p in found
        if p.rule == 4
    ]
    dns_name = dns_name_for(label, domain)
    named = owners.get(dns_name, set())
    status = NameStatus(
        label=label,
        dns_name=dns_name,
        holdings=tuple(holdings),
        claimed=bool(named),
        owners=tuple(sorted(owner for owner in named if owner is not None)),
        resources=tuple(sorted(resources.get(dns_name, ()))),
        problems=tuple(worded),
        plain_nodes=tuple(plain_nodes),
    )
    return status, duplicates


def _near_quota(inventory: Inventory, quota: int | None) -> tuple[KeyQuotaUse, ...]:
    if quota is None:
        return ()
    return tuple(
        KeyQuotaUse(node.name, server.id, server.name, len(server.metadata), quota)
        for node in sorted(inventory.nodes, key=lambda n: n.name)
        if (server := inventory.servers.get(node.name)) is not None
        and len(server.metadata) > QUOTA_WARNING_RATIO * quota
    )
