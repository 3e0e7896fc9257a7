"""DNS first (landb/first_look.py, provider/apply/first_look.py): a name this cluster does not publish yet
is looked up before its first write, against a real DNS server (Knot) fed as LanDB would be.

The provider is wired by the composition root to the simulator's Nova and Kubernetes; its resolver is a
loopback relay in front of Knot (support.knot.DnsSwitch) that counts the questions and can stop answering,
as a resolver down, then answer again at the same address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from landb_simulator import Simulator
from landb_simulator.external_dns import ownership_record
from landb_simulator.kube_store import INGRESSES
from landb_simulator.landb_zone import OtherDevice
from landb_webhook import cli
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.propagation import State
from landb_webhook.provider import ApplyError
from landb_webhook.wiring import dns_watch
from support.knot import DnsSwitch, KnotServer, knot, switchable
from support.provider_cluster import OWNER, Cluster

__all__ = ["knot"]

NAMESPACE = "team-a"
OTHER_DEVICE = "10.9.9.9"
PERIOD = 900.0


@pytest.fixture
def switch(knot: KnotServer) -> Iterator[DnsSwitch]:
    with switchable(knot) as relay:
        yield relay


@pytest.fixture
def dns_cluster(make_cluster: Any, switch: DnsSwitch) -> Callable[..., Cluster]:
    def make(**overrides: Any) -> Cluster:
        settings: dict[str, Any] = {
            "dns_watch": True,
            "dns_resolvers": [switch.address],
            "events": True,
            "leader_election": False,
            **overrides,
        }
        return make_cluster(**settings)  # type: ignore[no-any-return]

    return make


def want(cluster: Cluster, *labels: str) -> None:
    """Each name asked for by an Ingress of its own (for its events)."""
    cluster.desired = []
    for label in labels:
        if cluster.sim.state.kube.get(INGRESSES, NAMESPACE, label) is None:
            cluster.sim.state.add_ingress(NAMESPACE, label, [f"{label}.cern.ch"])
        cluster.desired.append(
            Endpoint(
                f"{label}.cern.ch",
                "A",
                ("192.0.2.1",),
                record_ttl=300,
                labels=(("resource", f"ingress/{NAMESPACE}/{label}"),),
            )
        )


def carried(cluster: Cluster, label: str, nodes: list[str] | None = None) -> dict[str, int]:
    """Node (of ``nodes``, else of the cluster) -> the N it carries ``label`` with."""
    return {
        node: found[label]
        for node in (cluster.nodes if nodes is None else nodes)
        if label in (found := cluster.aliases(node))
    }


def ever_written(sim: Simulator, label: str) -> bool:
    return any(f"{label}--load-" in str(change.metadata) for change in sim.state.metadata_history())


def claimed(cluster: Cluster, label: str) -> bool:
    return any(
        f"{label}.cern.ch" in e.dns_name and e.record_type == "TXT" for e in cluster.provider.records()
    )


def notes(sim: Simulator, reason: str) -> dict[str, str]:
    """Ingress name -> the note of its last event with ``reason``."""
    return {e["regarding"]["name"]: e["note"] for e in sim.state.events(NAMESPACE) if e["reason"] == reason}


def node_ips(sim: Simulator, *nodes: str) -> list[str]:
    found = [sim.state.node(node) or {} for node in nodes]
    return sorted(
        a["address"] for node in found for a in node["status"]["addresses"] if a["type"] == "InternalIP"
    )


def refusals(cluster: Cluster) -> float:
    return cluster.gauge("refused_changes_total", reason="dns_elsewhere") or 0.0


@pytest.mark.parametrize("other", ["address", "cname"])
def test_a_name_dns_answers_for_another_device_is_refused_before_any_write_and_the_batch_lands(
    dns_cluster: Callable[..., Cluster], knot: KnotServer, switch: DnsSwitch, other: str
) -> None:
    taken = f"taken-{other}"
    if other == "cname":
        knot.alias(taken, "webfarm.cern.ch.")
        answer = "CNAME webfarm.cern.ch."
    else:
        knot.publish(taken, [OTHER_DEVICE])
        answer = f"A {OTHER_DEVICE}"
    cluster = dns_cluster()
    want(cluster, taken, f"free-{other}")

    with capture_logs() as logs:
        changes = cluster.loop()  # answered 204: no ApplyError for the refusal
        again = cluster.loop()  # external-dns asks again next loop: asked again, said no more

    assert len(changes.create) == 4  # both names and their claims were asked for
    assert set(carried(cluster, f"free-{other}")) == set(cluster.nodes[:3])
    assert carried(cluster, taken) == {} and not ever_written(cluster.sim, taken)
    assert not claimed(cluster, taken)
    assert len(again.create) == 2  # the refused name and its claim, again
    assert switch.questions == 3  # each new name once, the refused one again in the second loop
    said = [e for e in logs if e["log_level"] == "warning" and "elsewhere" in e["event"]]
    assert [(e["event"], e["dns"]) for e in said] == [
        (f"change refused: DNS already answers {taken}.cern.ch elsewhere ({answer}), nothing written", answer)
    ]
    assert "LANDB_TAKEOVER_NAMES" in said[0]["hint"]
    assert refusals(cluster) == 2
    refused = cluster.eventually(lambda: notes(cluster.sim, "Refused").get(taken), what="the Refused event")
    assert refused == (
        f"{taken}.cern.ch not published: DNS already answers it for another device ({answer}). What to do: "
        "another device or someone's plain alias holds the name in LanDB: pick another name; to move it to "
        "this cluster on purpose (a cluster replacing another), ask the webhook's operator to list it in "
        "LANDB_TAKEOVER_NAMES"
    )
    print(f"\nRefused event on ingress {NAMESPACE}/{taken}: {refused}")


def test_a_refused_name_is_in_status(
    dns_cluster: Callable[..., Cluster], knot: KnotServer, capsys: pytest.CaptureFixture[str]
) -> None:
    knot.publish("indico-status", [OTHER_DEVICE])
    cluster = dns_cluster(leader_election=False)
    want(cluster, "indico-status")
    cluster.loop()

    cli.status(cluster.settings, output="table")
    out = capsys.readouterr().out

    section = out[out.index("Names refused before their first write") :].splitlines()[:2]
    assert section[1].startswith(f"  indico-status.cern.ch: DNS answers A {OTHER_DEVICE}, refused ")
    assert "LANDB_TAKEOVER_NAMES" in out
    with capsys.disabled():
        print("\n" + "\n".join(section))


def test_a_name_dns_does_not_know_is_written_at_once(
    dns_cluster: Callable[..., Cluster], switch: DnsSwitch
) -> None:
    cluster = dns_cluster()
    want(cluster, "fresh")

    cluster.loop()

    assert set(carried(cluster, "fresh")) == set(cluster.nodes[:3])
    assert switch.questions == 1
    assert cluster.loop() == Changes() and switch.questions == 1  # published: never asked again


def test_a_name_recreated_while_dns_still_answers_the_clusters_former_carriers_is_written_at_once(
    dns_cluster: Callable[..., Cluster], knot: KnotServer
) -> None:
    cluster = dns_cluster()
    want(cluster, "again")
    cluster.settle()
    knot.publish("again", node_ips(cluster.sim, *cluster.nodes[:3]))  # LanDB's sync
    want(cluster)
    cluster.loop()  # withdrawn; DNS answers it until LanDB's next sync
    gone = cluster.nodes[0]  # one of its carriers leaves the cluster, its server deleted
    cluster.sim.state.delete_node(gone)
    cluster.sim.state.delete_server(cluster.server_id(gone))
    cluster.eventually(
        lambda: all(n.name != gone for n in cluster.adapters.nodes.nodes()),
        what=f"{gone} gone from the cache",
    )

    want(cluster, "again")
    cluster.loop()

    assert set(carried(cluster, "again", cluster.nodes[1:])) == set(cluster.nodes[1:3])
    assert refusals(cluster) == 0


def test_a_node_joining_gets_the_clusters_names_while_dns_is_stopped(
    dns_cluster: Callable[..., Cluster], switch: DnsSwitch
) -> None:
    cluster = dns_cluster()
    want(cluster, "one", "two")
    cluster.settle()
    switch.answering = False
    asked = switch.questions
    newcomer = cluster.nodes[3]

    with capture_logs() as logs:
        cluster.relabel(newcomer, True)
        cluster.settle()

    assert cluster.aliases(newcomer) == {"one": 3, "two": 3}
    assert switch.questions == asked  # names already published are never asked again
    assert not [e for e in logs if "held back" in e["event"]]


def test_a_new_name_is_held_back_while_dns_is_stopped_then_written_once_it_answers(
    dns_cluster: Callable[..., Cluster], switch: DnsSwitch
) -> None:
    cluster = dns_cluster(request_timeout=10)
    want(cluster, "held", "other")
    switch.answering = False

    with capture_logs() as logs:
        first = cluster.loop()  # no ApplyError: held back is no failure
        second = cluster.loop()

    assert len(first.create) == len(second.create) == 4
    assert carried(cluster, "held") == {} and carried(cluster, "other") == {}
    assert not ever_written(cluster.sim, "held") and not claimed(cluster, "held")
    said = [e for e in logs if e["log_level"] == "warning" and "held back" in e["event"]]
    assert len(said) == 1  # said once, not every loop
    assert said[0]["names"] == "held.cern.ch, other.cern.ch" and said[0]["resolvers"] == switch.address

    switch.answering = True
    cluster.loop()

    assert set(carried(cluster, "held")) == set(carried(cluster, "other")) == set(cluster.nodes[:3])


def test_a_takeover_writes_ns_from_the_floor_and_is_shared_not_conflict_until_the_other_device_leaves(
    dns_cluster: Callable[..., Cluster], knot: KnotServer
) -> None:
    knot.publish("indico", [OTHER_DEVICE])
    cluster = dns_cluster(takeover_names=["indico.cern.ch"], index_floor=10)
    want(cluster, "indico")

    cluster.loop()

    assert sorted(carried(cluster, "indico").values()) == [10, 11, 12]
    assert refusals(cluster) == 0
    written = cluster.eventually(lambda: notes(cluster.sim, "Written").get("indico"), what="Written")
    assert f"taking over from A {OTHER_DEVICE} (LANDB_TAKEOVER_NAMES)" in written

    now = [cluster.clock()]
    watch = dns_watch(
        cluster.settings,
        cluster.adapters.published,
        cluster.metrics,
        clock=lambda: now[0],
        events=cluster.adapters.events,
    )
    cluster.provider.records()  # the carriers reported: what DNS should answer is known

    def step(seconds: float) -> State | None:
        now[0] += seconds
        watch.step()
        found = watch.judgements().get("indico.cern.ch")
        return found.state if found is not None else None

    ours = node_ips(cluster.sim, *cluster.nodes[:3])
    seen = [step(60)]  # LanDB has not synced yet: the other device only
    knot.publish("indico", [OTHER_DEVICE, *ours])  # LanDB's sync: both
    seen += [step(PERIOD), step(3 * PERIOD)]  # past two sync periods: still not a conflict
    shared = cluster.eventually(lambda: notes(cluster.sim, "TakingOver").get("indico"), what="TakingOver")
    knot.publish("indico", ours)  # the other device's holder let it go
    seen.append(step(PERIOD))
    on_the_air = cluster.eventually(lambda: notes(cluster.sim, "OnTheAir").get("indico"), what="OnTheAir")

    assert seen == [State.PENDING, State.SHARED, State.SHARED, State.PUBLISHED]
    assert cluster.gauge("dns_names", state="conflict") == 0
    assert shared.startswith(
        f"indico.cern.ch resolves to its 3 ingress nodes and to {OTHER_DEVICE} of another device: taking over"
    )
    assert on_the_air.startswith("indico.cern.ch resolves to its 3 ingress nodes")
    print(f"\nWritten: {written}\nTakingOver: {shared}\nOnTheAir: {on_the_air}")


def test_a_listed_name_dns_does_not_answer_elsewhere_is_just_written(
    dns_cluster: Callable[..., Cluster], knot: KnotServer
) -> None:
    cluster = dns_cluster(takeover_names=["plain-listed.cern.ch"])
    want(cluster, "plain-listed")

    cluster.loop()

    assert set(carried(cluster, "plain-listed")) == set(cluster.nodes[:3])
    written = cluster.eventually(lambda: notes(cluster.sim, "Written").get("plain-listed"), what="Written")
    assert "taking over" not in written


def test_the_simulated_landb_shows_a_refusal_then_a_take_over(
    make_cluster: Any, simulator: Simulator
) -> None:
    """The simulator's own LanDB DNS holding another device's name (``--other-device``): refused, then
    taken over once listed, DNS answering both after LanDB's next sync."""
    simulator.dns.add_other_device(OtherDevice.parse(f"webfarm={OTHER_DEVICE}:shop--load-0-"))
    simulator.dns.sync()
    cluster = make_cluster(dns_watch=True, dns_resolvers=[simulator.dns.address], leader_election=False)
    want(cluster, "shop")

    cluster.loop()
    refused = carried(cluster, "shop")
    cluster.settings = cluster.settings.model_copy(
        update={"takeover_names": ["shop.cern.ch"], "index_floor": 10}
    )
    cluster.restart()
    cluster.loop()
    answered = simulator.dns.sync().describe("shop")

    assert refused == {}
    assert sorted(carried(cluster, "shop").values()) == [10, 11, 12]
    assert answered is not None
    assert set(answered.split(", ")) == {OTHER_DEVICE, *node_ips(simulator, *cluster.nodes[:3])}


def test_a_name_one_of_our_servers_holds_as_a_plain_alias_is_the_plans_to_refuse_not_dns(
    dns_cluster: Callable[..., Cluster], knot: KnotServer, switch: DnsSwitch
) -> None:
    """DNS answers such a name with the CNAME LanDB publishes for the plain alias: the plan's refusal
    (``plain_alias``, naming the server that holds it) is the precise one, and DNS is not asked."""
    cluster = dns_cluster()
    holder = cluster.server_id(cluster.nodes[0])
    cluster.sim.state.set_metadata_direct(
        holder, {**cluster.sim.state.metadata(holder), "landb-alias": "held"}
    )
    knot.alias("held", f"{cluster.nodes[0]}.cern.ch.")
    create = Endpoint(
        "held.cern.ch", "A", ("192.0.2.1",), labels=(("resource", f"ingress/{NAMESPACE}/held"),)
    )

    with pytest.raises(ApplyError, match="plain"):
        cluster.provider.apply_changes(Changes(create=(create, ownership_record(create, OWNER))))

    assert switch.questions == 0
    assert (cluster.gauge("refused_changes_total", reason="plain_alias") or 0.0) >= 1
    assert refusals(cluster) == 0
    assert not ever_written(cluster.sim, "held")
