"""What a human should know about the cluster's aliases, in one pure analysis.

``landb-webhook status`` prints it (and exits non-zero when :meth:`ClusterStatus.attention` is not
empty); ``adopt`` and ``LANDB_ADOPT_EXISTING`` claim only names whose :attr:`NameStatus.problems` is
empty. Reading is separate (:func:`read_status`) and read-only: nodes, servers, the metadata quota and
the ownership records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from landb_webhook.backends import (
    LoadBalancerStore,
    Node,
    NodeSource,
    OwnershipStore,
    ServerStore,
    StateStore,
)
from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.metadata import ServerAliases, read_aliases, slot_key
from landb_webhook.landb.names import dns_name_for
from landb_webhook.provider import departed
from landb_webhook.provider.health import NO_CONTROLLER, HealthPolicy, judge
from landb_webhook.provider.inventory import Inventory, InventoryReader
from landb_webhook.provider.loadbalancers import TaggedLoadBalancer, tagged_load_balancers
from landb_webhook.provider.txt_registry import (
    claimed_names,
    is_ownership_record,
    owned_name,
    owner_of,
    resource_of,
)

QUOTA_WARNING_RATIO = 0.8
"""A server holding more than this share of its metadata key quota is reported."""
DEFAULT_HEALTH = HealthPolicy()


@dataclass(frozen=True)
class NodeStatus:
    name: str
    server_id: str | None
    """None: no Nova server was found for the node."""
    server_name: str | None
    ingress: bool
    ready: bool
    deleting: bool
    unschedulable: bool
    internal_ips: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    """Why the node is unhealthy as the carrier rule sees it (``provider/health.py``); empty when healthy."""

    @property
    def health(self) -> str:
        """``Ready`` or ``NotReady``, then ``deleting``, ``cordoned``, ``no-Ready-controller-pod``."""
        words = ["Ready" if self.ready else "NotReady"]
        words += [
            w
            for w, applies in (
                ("deleting", self.deleting),
                ("cordoned", self.unschedulable),
                ("no-Ready-controller-pod", NO_CONTROLLER in self.problems),
            )
            if applies
        ]
        return ",".join(words)


class Holding(NamedTuple):
    """One ``<label>--load-<N>-`` that LanDB publishes for one server, and where it is written.

    A tuple, not a frozen dataclass (a third of the cost to make): a 500-node cluster holds half a
    million of them."""

    label: str
    index: int  # type: ignore[assignment]  # the N, named as everywhere else; it hides tuple.index
    node: str
    server_id: str
    key: str
    frozen: bool
    """Held in a key or form the webhook never edits."""
    ingress: bool
    ready: bool
    """Its node is Ready and not being deleted, so it answers LanDB's share of the name's requests."""
    unhealthy: tuple[str, ...] = ()
    """Why its node is unhealthy (not Ready, being deleted, no Ready controller pod): external-dns'
    loop takes the alias off such a node once its grace period ends."""


@dataclass(frozen=True)
class NameStatus:
    label: str
    dns_name: str
    holdings: tuple[Holding, ...]
    """Sorted by node name, then N."""
    claimed: bool
    owners: tuple[str, ...]
    """The owner ids of its claims; empty when unclaimed, or when no claim is readable."""
    problems: tuple[str, ...]
    """What makes it unsafe to hand to external-dns as it is: each needs a human."""
    resources: tuple[str, ...] = ()
    """What its claims say it was published for (``ingress/<namespace>/<name>``), when they say."""
    plain_nodes: tuple[str, ...] = ()
    """Nodes whose server holds it as a plain (CNAME) alias, which the webhook never writes."""


@dataclass(frozen=True)
class KeyQuotaUse:
    node: str
    server_id: str
    server_name: str
    keys: int
    quota: int


@dataclass(frozen=True)
class DuplicateIndex:
    label: str
    index: int
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class FrozenForm:
    node: str
    server_id: str
    key: str
    value: str


@dataclass(frozen=True)
class DepartedServer:
    """The server of a node that left the cluster, still holding tokens in our slots (provider.departed):
    the webhook moves its owned aliases to their carriers and takes them off it at its next apply."""

    node: str
    """The name its node had."""
    server_id: str
    server_name: str
    tokens: tuple[str, ...]
    """``<label>--load-<N>-`` in our slots, owned or not."""


@dataclass(frozen=True)
class ClusterStatus:
    nodes: tuple[NodeStatus, ...]
    names: tuple[NameStatus, ...]
    quota: int | None
    """Metadata keys a server may hold; None when not read."""
    servers_near_quota: tuple[KeyQuotaUse, ...]
    nodes_without_server: tuple[str, ...]
    non_ingress_holdings: tuple[Holding, ...]
    duplicate_indices: tuple[DuplicateIndex, ...]
    frozen_forms: tuple[FrozenForm, ...]
    departed_servers: tuple[DepartedServer, ...] = ()
    load_balancers: tuple[TaggedLoadBalancer, ...] = ()
    """The project's load balancers whose tags publish names (provider.loadbalancers)."""

    def name(self, label: str) -> NameStatus | None:
        return next((found for found in self.names if found.label == label), None)

    def attention(self) -> list[str]:
        """What needs a human, one sentence each; empty when nothing does."""
        found: list[str] = []
        if not any(node.ingress for node in self.nodes):
            found.append("no node matches the ingress selector: no alias can be placed")
        found += [
            f"server {use.server_name} (node {use.node}) holds {use.keys} of its {use.quota} metadata keys"
            for use in self.servers_near_quota
        ]
        found += [
            f"node {node} has no Nova server: its aliases are not seen" for node in self.nodes_without_server
        ]
        for node in self.nodes:
            carried = sorted({h.label for name in self.names for h in name.holdings if h.node == node.name})
            if carried and (not node.ready or node.deleting):
                found.append(
                    f"node {node.name} is {node.health} and still carries {', '.join(carried)}: "
                    "LanDB sends it a share of their requests"
                )
        for name in self.names:
            found += [f"{name.dns_name}: {problem}" for problem in name.problems]
        return found


def analyse(
    inventory: Inventory,
    claims: Iterable[Endpoint],
    *,
    domain: str,
    quota: int | None = None,
    health: HealthPolicy = DEFAULT_HEALTH,
) -> ClusterStatus:
    """The status of every alias LanDB publishes for the cluster's nodes, and what needs a human."""
    return StatusAnalysis(domain=domain, health=health).analyse(inventory, claims, quota=quota)


class _ServerHoldings:
    """One server's holdings by label, kept slot value by slot value.

    A write changes a few of a server's values and leaves the others the very objects read before
    (``metadata.read_slot_value``): only the changed values' holdings are made again, and only the names
    they hold are reported changed. The -1 alias event writes one value on each of 500 servers; rebuilding
    each server's thousand holdings cost ~8 s of CPU in one analysis."""

    def __init__(self, node: Node, server_id: str, health: HealthPolicy) -> None:
        self.node = node
        self.server_id = server_id
        self._health = health
        self.aliases = ServerAliases()
        self.by_label: dict[str, tuple[Holding, ...]] = {}
        """label -> its holdings on this server, by N then key."""
        self.plain: frozenset[str] = frozenset()
        self.frozen_forms: tuple[FrozenForm, ...] = ()
        self._by_slot: dict[int, dict[str, list[Holding]]] = {}
        """slot number -> label -> the holdings its value makes, in order."""
        self._frozen: dict[str, list[Holding]] = {}
        self._slots_of: dict[str, set[int]] = defaultdict(set)
        self.values_analysed = 0
        """Slot values made into holdings (a frozen key or form counts as one)."""

    def same_node(self, node: Node, server_id: str) -> bool:
        return self.node == node and self.server_id == server_id

    def labels(self) -> set[str]:
        return self.by_label.keys() | self.plain

    def take(self, aliases: ServerAliases) -> set[str]:
        """Bring the holdings up to ``aliases``; the labels whose holdings or plain alias changed."""
        before = self.aliases
        if aliases is before:
            return set()
        self.aliases = aliases
        touched: set[str] = set()
        for number in before.values.keys() | aliases.values.keys():
            value = aliases.values.get(number)
            if value is not None and value is before.values.get(number):
                continue
            made = self._by_slot.pop(number, {})
            for label in made:
                self._slots_of[label].discard(number)
            touched |= made.keys()
            if value is not None:
                self.values_analysed += 1
                key = slot_key(number)
                made = self._by_slot[number] = self._holdings_of(
                    ((key, label, index) for _, label, index in value.load), frozen=False
                )
                for label in made:
                    self._slots_of[label].add(number)
                touched |= made.keys()
        if aliases.frozen != before.frozen:
            touched |= self._frozen.keys()
            self.values_analysed += len(aliases.frozen)
            self._frozen = self._holdings_of(
                (key, token.label, token.index) for key, token in aliases.frozen_tokens_by_key()
            )
            touched |= self._frozen.keys()
            self.frozen_forms = tuple(
                FrozenForm(self.node.name, self.server_id, key, value)
                for key, value in sorted(aliases.frozen.items())
            )
        changed = {label for label in touched if self._merge(label)}
        plain = frozenset(label for label, _ in aliases.plain_aliases())
        changed |= plain ^ self.plain
        self.plain = plain
        return changed

    def _holdings_of(
        self, tokens: Iterable[tuple[str, str, int]], *, frozen: bool = True
    ) -> dict[str, list[Holding]]:
        """label -> a holding per (key, label, N) of ``tokens``, in order."""
        node, server_id = self.node, self.server_id
        serving = node.ready and not node.deleting
        unhealthy = _health_problems(node, self._health)
        made: dict[str, list[Holding]] = {}
        for key, label, index in tokens:
            holding = Holding(
                label, index, node.name, server_id, key, frozen, node.is_ingress, serving, unhealthy
            )
            if (held := made.get(label)) is None:
                made[label] = [holding]
            else:
                held.append(holding)
        return made

    def _merge(self, label: str) -> bool:
        """Make the label's holdings here again from its values; whether they changed."""
        parts = [self._by_slot[number][label] for number in self._slots_of.get(label, ())]
        if label in self._frozen:
            parts.append(self._frozen[label])
        if not parts:
            self._slots_of.pop(label, None)
            return self.by_label.pop(label, None) is not None
        held = parts[0] if len(parts) == 1 else [h for part in parts for h in part]
        merged = tuple(held) if len(held) == 1 else tuple(sorted(held, key=_by_index_then_key))
        if self.by_label.get(label) == merged:
            return False
        self.by_label[label] = merged
        return True


def _by_index_then_key(holding: Holding) -> tuple[int, str]:
    return holding.index, holding.key


class StatusAnalysis:
    """``analyse``, kept from one call to the next: a call analyses again only the slot values that changed
    (every value of a server whose node changed) and the names they hold or held; a change of claims
    changes only the claimed names' owners. With LANDB_ADOPT_EXISTING, Records asks it after each write,
    and one Holding per token of 500 servers cost seconds of CPU for one server's change."""

    def __init__(self, *, domain: str, health: HealthPolicy = DEFAULT_HEALTH) -> None:
        self.domain = domain
        self.health = health
        self._servers: dict[str, _ServerHoldings] = {}
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
        parts = [part for node in by_node if (part := self._servers.get(node.name)) is not None]
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
                    _health_problems(node, self.health),
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
                        for part in parts
                        if not part.node.is_ingress
                        for hs in part.by_label.values()
                        for h in hs
                    ),
                    key=lambda h: (h.label, h.node, h.index, h.key),
                )
            ),
            duplicate_indices=tuple(d for label in labels for d in self._names[label][1]),
            frozen_forms=tuple(form for part in parts for form in part.frozen_forms),
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
            part = self._servers.get(node.name)
            if part is None or not part.same_node(node, server.id):
                if part is not None:
                    changed |= self._forget(part)
                part = self._servers[node.name] = _ServerHoldings(node, server.id, self.health)
            found = part.take(aliases[node.name, server.id])
            for label in found:
                if (held := part.by_label.get(label)) is not None:
                    self._holdings[label][node.name] = held
                else:
                    self._holdings[label].pop(node.name, None)
                if label in part.plain:
                    self._plain[label].add(node.name)
                else:
                    self._plain[label].discard(node.name)
            changed |= found
        for name in self._servers.keys() - seen:
            changed |= self._forget(self._servers.pop(name))
        return changed

    def _forget(self, part: _ServerHoldings) -> set[str]:
        self._values_analysed_before += part.values_analysed
        for label in part.by_label:
            del self._holdings[label][part.node.name]
        for label in part.plain:
            self._plain[label].discard(part.node.name)
        return part.labels()

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
        duplicates = _duplicates(label, holdings)
        status = _name_status(
            label,
            holdings,
            plain,
            owners=self._owners,
            resources=self._resources,
            duplicates=duplicates,
            domain=self.domain,
        )
        self._names[label] = (status, tuple(duplicates))


def count_needing_attention(inventory: Inventory, *, domain: str) -> int:
    """How many names ``analyse`` finds a problem with, from the holder index planning keeps
    (``landb.holders``) rather than a Holding per token: Records counts them after every write, for the
    ``names_needing_attention`` gauge.

    A name certainly has none when every holder is an ingress node's own server, each holds it once with
    its own N, in our slots, and no server holds it as a plain alias: a few set operations per name. Any
    other name is judged by the same rules as ``_name_status``, from its holders' Ns (a node relabelled out
    makes every name it holds one of those)."""
    holders = inventory.holders()
    nodes_of: dict[str, list[Node]] = defaultdict(list)
    for node in inventory.nodes:
        if (server := inventory.servers.get(node.name)) is not None:
            nodes_of[server.id].append(node)
    shared = len(nodes_of) != len(inventory.servers)
    """Nodes sharing a server: each is a holder of its own."""
    ingress = inventory.ingress_server_ids()
    plain: dict[str, set[str]] = defaultdict(set)
    if inventory.plain_aliases(domain):
        for state in inventory.server_states():
            if state.server_id in nodes_of:
                for label, _ in state.aliases.plain_aliases():
                    plain[label].add(state.server_id)
    flagged = 0
    for label in holders.editable.keys() | holders.pinned.keys():
        editable, pinned = holders.editable.get(label, {}), holders.pinned.get(label, {})
        if (
            not shared
            and not pinned
            and label not in plain
            and editable.keys() <= ingress
            and holders.held_once(label) is not None
        ):
            continue
        held = (editable.keys() | pinned.keys()) & nodes_of.keys()
        flagged += bool(held) and (
            bool(plain.get(label))
            or (not shared and not held <= ingress)  # a node relabelled out: every name it holds
            or _holders_disagree(held, editable, pinned, nodes_of)
        )
    return flagged


def _holders_disagree(
    held: Iterable[str],
    editable: Mapping[str, Sequence[tuple[str, str, int]]],
    pinned: Mapping[str, list[int]],
    nodes_of: Mapping[str, list[Node]],
) -> bool:
    """``_name_status``' rules on the holders of one name: a holder that is not an ingress node, a node
    holding it more than once, an N held by two nodes."""
    nodes_by_index: dict[int, str] = {}
    for sid in held:
        indices = [index for _, _, index in editable.get(sid, ())] + list(pinned.get(sid, ()))
        for node in nodes_of[sid]:
            if (
                not node.is_ingress
                or len(indices) > 1
                or nodes_by_index.setdefault(indices[0], node.name) != node.name
            ):
                return True
    return False


def read_status(
    nodes: NodeSource,
    servers: ServerStore,
    ownership: OwnershipStore,
    *,
    domain: str,
    health: HealthPolicy = DEFAULT_HEALTH,
    state: StateStore | None = None,
    load_balancers: LoadBalancerStore | None = None,
    registry: str = "txt",
) -> ClusterStatus:
    """Read the cluster, the cloud, the claims, the servers of departed nodes the webhook remembers in
    ``state`` and the project's load balancers (never writing) and analyse them."""
    remembered = departed.from_state(state.load()) if state is not None else {}
    inventory = InventoryReader(nodes, servers, max_age=0, departed=remembered.values).fresh()
    claims = list(ownership.records())
    found = analyse(inventory, claims, domain=domain, quota=servers.max_metadata_items(), health=health)
    if load_balancers is None:
        return found
    tagged = tagged_load_balancers(
        load_balancers.load_balancers(), claimed_names(claims), domain=domain, registry=registry
    )
    return replace(found, load_balancers=tagged)


# -- the parts ---------------------------------------------------------------------------------------


def _health_problems(node: Node, health: HealthPolicy) -> tuple[str, ...]:
    """The carrier rule's reasons, whatever the grace period (the time does not change them)."""
    return judge(node, health, now=0.0).problems if node.is_ingress else ()


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


def _duplicates(label: str, holdings: Sequence[Holding]) -> list[DuplicateIndex]:
    nodes_by_index: dict[int, set[str]] = defaultdict(set)
    for holding in holdings:
        nodes_by_index[holding.index].add(holding.node)
    return [
        DuplicateIndex(label, index, tuple(sorted(nodes)))
        for index, nodes in sorted(nodes_by_index.items())
        if len(nodes) > 1
    ]


def _name_status(
    label: str,
    holdings: Sequence[Holding],
    plain_nodes: Sequence[str],
    *,
    owners: Mapping[str, set[str | None]],
    resources: Mapping[str, set[str]],
    duplicates: Sequence[DuplicateIndex],
    domain: str,
) -> NameStatus:
    dns_name = dns_name_for(label, domain)
    problems = [
        f"carried by {h.node}, which is not an ingress node (N={h.index} in {h.key})"
        for h in holdings
        if not h.ingress
    ]
    problems += [
        f"N={d.index} is held by {len(d.nodes)} nodes ({', '.join(d.nodes)}): LanDB needs one N per carrier"
        for d in duplicates
        if d.label == label
    ]
    indices_by_node: dict[str, list[int]] = defaultdict(list)
    for holding in holdings:
        indices_by_node[holding.node].append(holding.index)
    problems += [
        f"node {node} holds it {len(indices)} times (N={', '.join(map(str, sorted(indices)))})"
        for node, indices in sorted(indices_by_node.items())
        if len(indices) > 1
    ]
    if holdings and plain_nodes:
        problems.append(
            f"also held as a plain (CNAME) alias by {', '.join(plain_nodes)}: LanDB would publish a CNAME "
            "and A records for one name"
        )
    named = owners.get(dns_name, set())
    return NameStatus(
        label=label,
        dns_name=dns_name,
        holdings=tuple(holdings),
        claimed=bool(named),
        owners=tuple(sorted(owner for owner in named if owner is not None)),
        resources=tuple(sorted(resources.get(dns_name, ()))),
        problems=tuple(problems),
        plain_nodes=tuple(plain_nodes),
    )


def _near_quota(inventory: Inventory, quota: int | None) -> tuple[KeyQuotaUse, ...]:
    if quota is None:
        return ()
    return tuple(
        KeyQuotaUse(node.name, server.id, server.name, len(server.metadata), quota)
        for node in sorted(inventory.nodes, key=lambda n: n.name)
        if (server := inventory.servers.get(node.name)) is not None
        and len(server.metadata) > QUOTA_WARNING_RATIO * quota
    )
