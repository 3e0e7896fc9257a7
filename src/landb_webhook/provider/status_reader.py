"""``status``' reading: the cluster, the cloud, the claims, the departed servers the webhook remembers and
the project's load balancers, through the ports and never writing, then analysed
(``provider/status_analysis.py``)."""

from __future__ import annotations

from dataclasses import replace

from landb_webhook.backends import Ports
from landb_webhook.provider import departed
from landb_webhook.provider.health import HealthPolicy
from landb_webhook.provider.inventory import InventoryReader
from landb_webhook.provider.loadbalancers import tagged_load_balancers
from landb_webhook.provider.status import ClusterStatus
from landb_webhook.provider.status_analysis import DEFAULT_HEALTH, analyse
from landb_webhook.provider.txt_registry import claimed_names


def read_status(
    ports: Ports,
    *,
    domain: str,
    health: HealthPolicy = DEFAULT_HEALTH,
    registry: str = "txt",
    departed_servers: bool = True,
) -> ClusterStatus:
    """Read the cluster, the cloud, the claims, (``departed_servers``) the servers of departed nodes the
    webhook remembers in ``ports.state`` and the project's load balancers (never writing) and analyse
    them."""
    state = ports.state if departed_servers else None
    remembered = departed.from_state(state.load()) if state is not None else {}
    inventory = InventoryReader(ports.nodes, ports.servers, max_age=0, departed=remembered.values).fresh()
    claims = list(ports.ownership.records())
    found = analyse(inventory, claims, domain=domain, quota=ports.servers.max_metadata_items(), health=health)
    if ports.load_balancers is None:
        return found
    tagged = tagged_load_balancers(
        ports.load_balancers.load_balancers(), claimed_names(claims), domain=domain, registry=registry
    )
    return replace(found, load_balancers=tagged)
