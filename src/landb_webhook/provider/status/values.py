"""What ``landb-webhook status`` reports, as values: the nodes, every name LanDB publishes for them, and
what needs a human (:meth:`ClusterStatus.attention`).

Data only, no rule and no I/O: ``status/analysis.py`` makes them (the problem rules are
``status/problems.py``), ``status/reader.py`` reads the cluster for it, ``report.py`` prints them and
``provider/ownership/adopt.py`` hands external-dns only names whose :attr:`NameStatus.problems` is empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from landb_webhook.provider.read.dns_refusals import DnsRefusal
from landb_webhook.provider.read.health import NO_CONTROLLER


@dataclass(frozen=True)
class TaggedLoadBalancer:
    """A load balancer carrying names, as ``status`` shows it."""

    id: str
    name: str
    addresses: tuple[str, ...]
    names: tuple[str, ...]
    """The DNS names its ``landb-alias=`` tags publish."""
    unclaimed: tuple[str, ...]
    """Those without an ownership claim: someone else's, never touched (registry txt)."""


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
    """Why the node is unhealthy as the carrier rule sees it (``read/health.py``); empty when
    healthy."""

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
    refused_by_dns: tuple[DnsRefusal, ...] = ()
    """Names refused before their first write because DNS answers them elsewhere (provider.first_look),
    as the webhook stored them, the most recent first."""

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
