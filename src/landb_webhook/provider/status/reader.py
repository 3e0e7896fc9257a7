"""``status``' reading: the cluster, the cloud, the claims, the departed servers the webhook remembers and
the project's load balancers, through the ports and never writing, then analysed
(``provider/status/analysis.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import replace

from landb_webhook.backends import LoadBalancer, Ports
from landb_webhook.landb.loadbalancers import tag_labels
from landb_webhook.landb.names import dns_name_for
from landb_webhook.landb.propagation import Published
from landb_webhook.provider.read import departed, dns_refusals
from landb_webhook.provider.read.dns_refusals import DnsRefusal
from landb_webhook.provider.read.health import HealthPolicy
from landb_webhook.provider.read.inventory import InventoryReader, sorted_ips
from landb_webhook.provider.read.txt_registry import claimed_names
from landb_webhook.provider.registry import Registry
from landb_webhook.provider.status.analysis import analyse
from landb_webhook.provider.status.values import ClusterStatus, TaggedLoadBalancer
from landb_webhook.provider.watch.publications import PublicationLog


def read_status(
    ports: Ports,
    *,
    domain: str,
    health: HealthPolicy,
    registry: Registry,
    departed_servers: bool = True,
) -> ClusterStatus:
    """Read the cluster, the cloud, the claims, (``departed_servers``) the servers of departed nodes the
    webhook remembers in ``ports.state`` and the project's load balancers (never writing) and analyse
    them."""
    state = ports.state if departed_servers else None
    stored = state.load() if state is not None else {}
    remembered = departed.from_state(stored)
    inventory = InventoryReader(ports.nodes, ports.servers, max_age=0, departed=remembered.values).fresh()
    claims = list(ports.ownership.records())
    found = analyse(inventory, claims, domain=domain, quota=ports.servers.max_metadata_items(), health=health)
    found = replace(found, refused_by_dns=refused_by_dns(stored))
    if ports.load_balancers is None:
        return found
    tagged = tagged_load_balancers(
        ports.load_balancers.load_balancers(), claimed_names(claims), domain=domain, registry=registry
    )
    return replace(found, load_balancers=tagged)


def refused_by_dns(stored: Mapping[str, str]) -> tuple[DnsRefusal, ...]:
    """The names the webhook refused because DNS answers them elsewhere, the most recent first; what is
    unreadable is left out (the webhook says so when it reads it)."""
    try:
        found = dns_refusals.from_json(stored.get(dns_refusals.STATE_KEY, "{}"))
    except ValueError:
        return ()
    return tuple(sorted(found.values(), key=lambda refusal: (-refusal.at, refusal.name)))


def tagged_load_balancers(
    lbs: Iterable[LoadBalancer], claimed: Set[str], *, domain: str, registry: Registry
) -> tuple[TaggedLoadBalancer, ...]:
    """The load balancers whose tags publish a name; ``claimed``: the DNS names with a claim (a name the
    registry does not own is unclaimed)."""
    found = []
    for lb in sorted(lbs, key=lambda lb: (lb.name, lb.id)):
        names = tuple(dns_name_for(label, domain) for label in sorted(tag_labels(lb.tags)))
        if names:
            unclaimed = tuple(n for n in names if not registry.owns(n, claimed))
            found.append(TaggedLoadBalancer(lb.id, lb.name, sorted_ips(lb.addresses), names, unclaimed))
    return tuple(found)


def published_in(status: ClusterStatus, stored: PublicationLog) -> dict[str, Published]:
    """What each name of ``status`` should resolve to: the IPs of every node holding it and the addresses
    of every load balancer whose tags hold it (LanDB publishes each holder), with the write time and
    former carriers stored by the webhook."""
    ips_by_node = {node.name: node.internal_ips for node in status.nodes}
    expected: dict[str, set[str]] = {}
    for name in status.names:
        expected.setdefault(name.dns_name, set()).update(
            ip for h in name.holdings for ip in ips_by_node.get(h.node, ())
        )
    for lb in status.load_balancers:
        for dns_name in lb.names:
            expected.setdefault(dns_name, set()).update(lb.addresses)
    known = stored.published()
    found = {}
    for dns_name, ips in sorted(expected.items()):
        if not ips:
            continue  # a plain alias only: LanDB answers it with a CNAME, which is not ours to judge
        entry = known.get(dns_name, Published(frozenset()))
        found[dns_name] = Published(frozenset(ips), entry.former - ips, entry.written_at)
    return found
