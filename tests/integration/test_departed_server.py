"""A Node deleted while its VM runs (``kubectl delete node`` on a drained node, no finalizer): its server is
remembered in the state ConfigMap and cleaned of our tokens, make-before-break kept (provider.departed).

Driven through the provider wired to the real clients against the simulator, with external-dns' own loop.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from structlog.testing import capture_logs

from landb_simulator import ClientConfig
from landb_simulator.external_dns import plan
from landb_simulator.seed import node_ip
from landb_webhook.adapters.kubernetes import api_client_for
from landb_webhook.backends import Ports
from landb_webhook.endpoint import Changes
from landb_webhook.landb.metadata import read_aliases
from landb_webhook.provider.status.reader import read_status
from landb_webhook.wiring import health_policy, state_store
from support.provider_cluster import OWNER, Cluster, api_writes, settings_for

STATE = "landb-webhook-ownership-state"


def delete_node(cluster: Cluster, node: str) -> None:
    """``kubectl delete node`` without finalizers: gone at once; wait until the node cache has seen it."""
    cluster.sim.state.delete_node(node)
    cluster.eventually(
        lambda: all(n.name != node for n in cluster.adapters.nodes.nodes()),
        what=f"{node} gone from the node cache",
    )


def tokens(cluster: Cluster, server_id: str) -> dict[str, int]:
    return {t.label: t.index for t in read_aliases(cluster.sim.state.metadata(server_id)).load_tokens()}


def remembered(cluster: Cluster) -> set[str]:
    configmap = cluster.sim.state.configmap("default", STATE)
    return set(json.loads(configmap["data"]["carrying-servers"])) if configmap else set()


def settled(make_cluster: Any, *names: str) -> tuple[Cluster, str]:
    """Three ingress nodes carrying ``names`` and a worker; the server id of the third ingress node."""
    cluster = make_cluster(ingress_nodes=3, workers=1)
    cluster.want(*names)
    cluster.settle()
    return cluster, cluster.server_id(cluster.nodes[2])


def duplicate_indices(cluster: Cluster) -> list[tuple[str, int]]:
    """(label, N) held by more than one server anywhere in Nova, departed ones included."""
    held = Counter(
        (t.label, t.index)
        for server in cluster.sim.state.servers()
        for t in read_aliases(cluster.sim.state.metadata(server.id)).load_tokens()
    )
    return sorted(key for key, count in held.items() if count > 1)


def test_a_deleted_nodes_server_is_cleaned_once_its_aliases_landed_on_their_new_carrier(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(ingress_nodes=1, workers=2)
    gone, heir = cluster.nodes[0], cluster.nodes[1]
    gone_id, heir_id = cluster.server_id(gone), cluster.server_id(heir)
    foreign = {
        k: v for k, v in cluster.sim.state.metadata(gone_id).items() if not k.startswith("landb-alias")
    }
    cluster.want("app.cern.ch", "web.cern.ch")
    cluster.settle()
    assert tokens(cluster, gone_id) == {"app": 0, "web": 0}
    assert remembered(cluster) == {gone_id}
    cluster.sim.state.clear_metadata_history()

    delete_node(cluster, gone)
    cluster.relabel(heir, True)
    cluster.settle()

    assert tokens(cluster, heir_id) == {"app": 1, "web": 1}  # N 0 was still held while the heir was made
    assert tokens(cluster, gone_id) == {}
    assert cluster.sim.state.metadata(gone_id) == foreign  # every key but our slots is left as it was
    history = api_writes(cluster.sim)
    made = min(c.seq for c in history if c.server_id == heir_id)
    broken = min(c.seq for c in history if c.server_id == gone_id)
    assert made < broken
    assert remembered(cluster) == {heir_id}


def test_a_later_node_never_gets_an_n_a_departed_server_still_holds(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=3, workers=1)
    cluster.want("app.cern.ch")
    cluster.settle()
    gone_id = cluster.server_id(cluster.nodes[0])
    assert tokens(cluster, gone_id) == {"app": 0}

    delete_node(cluster, cluster.nodes[0])
    cluster.relabel(cluster.nodes[3], True)
    cluster.settle()

    assert duplicate_indices(cluster) == []
    assert tokens(cluster, gone_id) == {}
    assert tokens(cluster, cluster.server_id(cluster.nodes[3])) == {"app": 3}


def test_a_restart_before_the_next_apply_does_not_forget_the_departed_server(make_cluster: Any) -> None:
    cluster, gone_id = settled(make_cluster, "app.cern.ch", "web.cern.ch")
    assert remembered(cluster) == {cluster.server_id(n) for n in cluster.nodes[:3]}

    delete_node(cluster, cluster.nodes[2])
    cluster.restart()
    cluster.settle()

    assert tokens(cluster, gone_id) == {}
    assert gone_id not in remembered(cluster)
    for node in cluster.nodes[:2]:
        assert set(tokens(cluster, cluster.server_id(node))) == {"app", "web"}


def test_the_state_names_the_servers_carrying_our_aliases_for_what_they_are(make_cluster: Any) -> None:
    """After the first apply every ingress server carries an alias of ours and is listed, none departed:
    the key says ``carrying-servers``, not ``departed-servers`` (which read as if every node had left)."""
    cluster, _ = settled(make_cluster, "app.cern.ch")

    data = cluster.sim.state.configmap("default", STATE)["data"]
    assert "departed-servers" not in data
    assert json.loads(data["carrying-servers"]) == {
        cluster.server_id(node): {"node": node, "internalIPs": [node_ip("demo", index)]}
        for index, node in enumerate(cluster.nodes[:3])
    }


def test_owned_aliases_go_even_when_the_change_set_does_not_name_them(make_cluster: Any) -> None:
    cluster, gone_id = settled(make_cluster, "app.cern.ch")
    delete_node(cluster, cluster.nodes[2])

    cluster.want("app.cern.ch", "new.cern.ch")
    changes = plan(
        cluster.provider.records(), cluster.provider.adjust_endpoints(cluster.desired), owner=OWNER
    ).changes
    only_new = Changes(create=[e for e in changes.create if "new" in e.dns_name])
    assert only_new.create and not any("app" in e.dns_name for e in only_new.create)
    cluster.provider.apply_changes(only_new)

    assert tokens(cluster, gone_id) == {}
    assert gone_id not in remembered(cluster)


def test_only_owned_slot_tokens_leave_a_departed_server(make_cluster: Any) -> None:
    cluster, gone_id = settled(make_cluster, "app.cern.ch")
    metadata = cluster.sim.state.metadata(gone_id)
    kept = {
        "landb-alias": metadata["landb-alias"] + ",other--load-5-,plainname",  # unowned and plain, in a slot
        "landb-alias1": "legacy--load-7-",  # a frozen key
        "landb-alias-extra": "node-x.cern.ch:frozen--load-3-",  # a frozen form
    }
    cluster.sim.state.set_metadata_direct(gone_id, {**metadata, **kept})
    cluster.settle()

    delete_node(cluster, cluster.nodes[2])
    cluster.settle()

    after = cluster.sim.state.metadata(gone_id)
    assert after["landb-alias"] == "other--load-5-,plainname"
    assert (after["landb-alias1"], after["landb-alias-extra"]) == (
        kept["landb-alias1"],
        kept["landb-alias-extra"],
    )
    assert {k: v for k, v in after.items() if not k.startswith("landb-alias")} == {
        k: v for k, v in metadata.items() if not k.startswith("landb-alias")
    }
    assert gone_id not in remembered(cluster)


def test_a_departed_server_deleted_from_nova_is_forgotten(make_cluster: Any) -> None:
    cluster, gone_id = settled(make_cluster, "app.cern.ch")
    delete_node(cluster, cluster.nodes[2])
    cluster.sim.state.delete_server(gone_id)

    cluster.want("app.cern.ch", "new.cern.ch")
    cluster.settle()

    assert gone_id not in remembered(cluster)
    assert "new" in tokens(cluster, cluster.server_id(cluster.nodes[0]))


def test_status_shows_a_departed_server_until_it_is_cleaned(
    make_cluster: Any, sim_clients: ClientConfig
) -> None:
    cluster, gone_id = settled(make_cluster, "app.cern.ch")
    gone = cluster.nodes[2]
    delete_node(cluster, gone)
    settings = settings_for(sim_clients)
    state = state_store(settings, api_client_for(settings.kubeconfig))

    def departed() -> list[tuple[str, str, tuple[str, ...]]]:
        found = read_status(
            Ports(cluster.adapters.nodes, cluster.adapters.servers, cluster.adapters.ownership, state),
            domain="cern.ch",
            health=health_policy(settings),
            registry=settings.external_dns_registry,
        )
        return [(d.node, d.server_id, d.tokens) for d in found.departed_servers]

    assert departed() == [(gone, gone_id, ("app--load-2-",))]
    cluster.settle()
    assert departed() == []


def test_a_same_named_configmap_of_someone_else_is_never_written(make_cluster: Any) -> None:
    """The state is then kept in memory only, and said; applies go on."""
    cluster = make_cluster(ingress_nodes=3, workers=1)
    foreign = cluster.sim.state.put_configmap("default", STATE, {"mine": "yes"})
    cluster.want("app.cern.ch")
    with capture_logs() as logs:
        cluster.settle()

    assert cluster.sim.state.configmap("default", STATE)["data"] == foreign["data"] == {"mine": "yes"}
    assert set(tokens(cluster, cluster.server_id(cluster.nodes[0]))) == {"app"}
    [line] = [e for e in logs if e["event"].startswith("webhook state not stored")]
    assert "without label app.kubernetes.io/managed-by=landb-webhook" in line["reason"]


def test_an_unreadable_state_is_said_and_replaced_by_the_next_apply(make_cluster: Any) -> None:
    cluster = make_cluster(ingress_nodes=3, workers=1)
    assert cluster.settings is not None
    state_store(cluster.settings, api_client_for(cluster.settings.kubeconfig)).save(
        {"carrying-servers": "not json"}
    )
    cluster.want("app.cern.ch")
    with capture_logs() as logs:
        cluster.settle()

    assert any(e["event"] == "webhook state unreadable: ignored" for e in logs)
    assert remembered(cluster) == {cluster.server_id(n) for n in cluster.nodes[:3]}
