"""Names on Octavia load balancers, through the real openstacksdk against the simulated Octavia and Neutron.

An endpoint whose targets are a load balancer's VIP (or a floating IP on its VIP port) is published as a
``landb-alias=<name>`` tag on it; the rest take the ingress nodes. Each test names what it guards
(docs/operations.md#load-balancers, docs/architecture.md invariants 1, 3, 4).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

import pytest
from structlog.testing import capture_logs
from test_adopt_and_status import World, world  # noqa: F401 (a fixture)

from landb_simulator import Simulator
from landb_simulator.external_dns import ownership_record, plan
from landb_webhook.adapters.dns import DnsResolver
from landb_webhook.config import parse_resolver
from landb_webhook.endpoint import Changes, Endpoint
from landb_webhook.landb.propagation import State
from landb_webhook.provider import ApplyError
from landb_webhook.provider.watch.dns_watch import DnsWatch
from landb_webhook.wiring import NO_LOAD_BALANCER_SERVICE, ask_openstack_once
from support.default_options import dns_watch_options
from support.homes import watching
from support.metrics import counted
from support.provider_cluster import OWNER, Cluster

VIP_APP, VIP_WEB, FLOATING_WEB = "188.184.30.10", "188.184.30.20", "137.138.40.9"
VIP_SHOP = "188.184.30.30"
SERVICE_TAG = "kube_service_cluster_default_app"


def service(name: str, *targets: str) -> Endpoint:
    """What external-dns' service source makes of a LoadBalancer Service: its status addresses."""
    return Endpoint(
        name,
        "A",
        targets=targets,
        labels=(("resource", f"service/default/{name.split('.', maxsplit=1)[0]}"),),
    )


def ingress(name: str) -> Endpoint:
    return Endpoint(name, "A", targets=("192.0.2.80",), labels=(("resource", f"ingress/default/{name}"),))


@dataclass
class LoadBalancers:
    sim: Simulator
    app: str
    web: str

    def tags(self, lb_id: str) -> tuple[str, ...]:
        return self.sim.state.octavia.load_balancer(lb_id).tags

    def puts(self, lb_id: str | None = None, status: int | None = None) -> list[Any]:
        return [
            call
            for call in self.sim.state.api_calls("octavia")
            if call.method == "PUT"
            and (lb_id is None or call.path.endswith(lb_id))
            and (status is None or call.status == status)
        ]


@pytest.fixture
def lbs(simulator: Simulator) -> LoadBalancers:
    octavia = simulator.state.octavia
    return LoadBalancers(
        simulator,
        app=octavia.add_load_balancer("kube_service_cluster_default_app", VIP_APP, tags=[SERVICE_TAG]),
        web=octavia.add_load_balancer("kube_service_cluster_default_web", VIP_WEB, floating_ip=FLOATING_WEB),
    )


def carrying(cluster: Cluster, label: str) -> set[str]:
    return {node for node in cluster.nodes if label in cluster.aliases(node)}


def claims(cluster: Cluster) -> set[str]:
    return {e.dns_name for e in cluster.provider.records() if e.record_type == "TXT"}


def test_a_name_targeting_a_load_balancer_is_tagged_on_it_not_on_the_nodes_and_settles(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    cluster = make_cluster()
    cluster.desired = [service("app.cern.ch", VIP_APP), ingress("site.cern.ch")]

    with capture_logs() as logs:
        first = cluster.loop()

    [summary] = [line["summary"] for line in logs if line["event"] == "apply finished"]
    assert summary.startswith("+2 -0 aliases (+3 -0 tokens) on 3 of 4 nodes and 1 load balancer, 0 failed")

    assert len(first.create) == 4  # two names and their claims
    assert lbs.tags(lbs.app) == ("kube_service_cluster_default_app", "landb-alias=app")
    assert lbs.tags(lbs.web) == ()
    assert carrying(cluster, "app") == set()
    assert carrying(cluster, "site") == set(cluster.nodes[:3])
    assert claims(cluster) == {"a-app.cern.ch", "a-site.cern.ch"}
    cluster.sim.state.reset_api_calls()
    assert cluster.loop() == Changes()
    assert lbs.puts() == []
    records = {replace(e, labels=()) for e in cluster.provider.records() if e.record_type == "A"}
    adjusted = {replace(e, labels=()) for e in cluster.provider.adjust_endpoints(cluster.desired)}
    assert records == adjusted
    assert Endpoint("app.cern.ch", "A", (VIP_APP,)) in records


def test_a_floating_ip_target_finds_the_load_balancer_of_its_vip_port(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    cluster = make_cluster()
    cluster.desired = [service("web.cern.ch", FLOATING_WEB)]

    cluster.settle()

    assert lbs.tags(lbs.web) == ("landb-alias=web",)
    assert carrying(cluster, "web") == set()
    [web] = [e for e in cluster.provider.records() if e.dns_name == "web.cern.ch"]
    assert web.targets == (FLOATING_WEB, VIP_WEB)  # 137.x before 188.x: numeric order


def test_other_tags_and_other_load_balancers_are_never_touched(make_cluster: Any, lbs: LoadBalancers) -> None:
    """Invariant 4 for tags: only landb-alias=<name> tags we own change; a hand-set one is left alone."""
    octavia = lbs.sim.state.octavia
    original = (SERVICE_TAG, "landb-alias=Upper", "landb-alias=handmade", "owner=team-a")
    octavia.set_tags_direct(lbs.app, original)
    octavia.set_tags_direct(lbs.web, ["landb-alias=other"])
    cluster = make_cluster()
    cluster.desired = [service("app.cern.ch", VIP_APP)]
    cluster.settle()
    assert lbs.tags(lbs.app) == tuple(sorted((*original, "landb-alias=app")))

    cluster.desired = []  # the Service is deleted: sync withdraws what it owns, and only that
    cluster.settle()

    assert lbs.tags(lbs.app) == tuple(sorted(original))
    assert lbs.tags(lbs.web) == ("landb-alias=other",)
    assert lbs.puts(lbs.web) == []
    assert [c.method for c in octavia.tag_history(lbs.web)] == ["direct"]
    names = {e.dns_name: e for e in cluster.provider.records()}
    assert names["handmade.cern.ch"].targets == (VIP_APP,)  # reported as taken, never claimed
    assert "a-handmade.cern.ch" not in names and "a-app.cern.ch" not in names


def test_a_deleted_service_takes_its_tag_and_its_claim_with_it(make_cluster: Any, lbs: LoadBalancers) -> None:
    cluster = make_cluster()
    cluster.desired = [service("app.cern.ch", VIP_APP), service("web.cern.ch", VIP_WEB)]
    cluster.settle()

    cluster.desired = [service("web.cern.ch", VIP_WEB)]
    changes = cluster.loop()

    assert {e.dns_name for e in changes.delete} == {"app.cern.ch", "a-app.cern.ch"}
    assert lbs.tags(lbs.app) == (SERVICE_TAG,)
    assert lbs.tags(lbs.web) == ("landb-alias=web",)
    assert claims(cluster) == {"a-web.cern.ch"}
    assert cluster.loop() == Changes()


def test_a_409_while_pending_is_retried_with_a_fresh_read_and_a_bounded_number_of_times(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    octavia = lbs.sim.state.octavia
    cluster = make_cluster()  # LANDB_CONFLICT_RETRIES: 2
    cluster.desired = [service("app.cern.ch", VIP_APP)]
    changes = plan(
        cluster.provider.records(), cluster.provider.adjust_endpoints(cluster.desired), owner=OWNER
    ).changes
    octavia.hold_pending(lbs.app, requests=3)  # the apply's list, then the GET and the PUT of its first try
    cluster.sim.state.reset_api_calls()

    cluster.provider.apply_changes(changes)

    assert [c.status for c in lbs.puts(lbs.app)] == [409, 200]
    assert lbs.tags(lbs.app) == (SERVICE_TAG, "landb-alias=app")

    hold = octavia.hold_pending(lbs.app)  # until released
    cluster.desired = [service("app.cern.ch", VIP_APP), service("api.cern.ch", VIP_APP)]
    cluster.sim.state.reset_api_calls()
    with pytest.raises(ApplyError, match="load balancer kube_service_cluster_default_app"):
        cluster.loop()
    assert [c.status for c in lbs.puts(lbs.app)] == [409, 409, 409]  # 1 + LANDB_CONFLICT_RETRIES
    assert lbs.tags(lbs.app) == (SERVICE_TAG, "landb-alias=app")

    hold.release()
    cluster.settle()
    assert lbs.tags(lbs.app) == (SERVICE_TAG, "landb-alias=api", "landb-alias=app")


def test_dry_run_writes_no_tag(make_cluster: Any, lbs: LoadBalancers) -> None:
    cluster = make_cluster(dry_run=True)
    cluster.desired = [service("app.cern.ch", VIP_APP)]
    cluster.sim.state.reset_api_calls()

    cluster.loop()

    assert lbs.puts() == []
    assert lbs.tags(lbs.app) == (SERVICE_TAG,)
    assert counted(cluster.metrics, "load_balancer_tag_writes_total", result="dry_run") == 1
    assert counted(cluster.metrics, "load_balancer_tag_writes_total", result="ok") == 0


def test_a_name_moving_between_nodes_and_load_balancers_always_has_a_home(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    """Invariant 3 across Nova and Octavia: the new home is written before the old one is cleared."""
    cluster = make_cluster()
    cluster.desired = [ingress("app.cern.ch")]
    cluster.settle()

    with watching(cluster.sim.state, "app") as homes:
        for desired, where in (
            (service("app.cern.ch", VIP_APP), lbs.app),
            (service("app.cern.ch", FLOATING_WEB), lbs.web),
            (ingress("app.cern.ch"), None),
        ):
            cluster.desired = [desired]
            cluster.settle()
            assert {lb for lb in (lbs.app, lbs.web) if "landb-alias=app" in lbs.tags(lb)} == (
                {where} if where else set()
            )
            assert carrying(cluster, "app") == (set() if where else set(cluster.nodes[:3]))

    homes.assert_never_homeless()
    assert homes.tag_writes() == [(lbs.app, True), (lbs.web, True), (lbs.app, False), (lbs.web, False)]
    assert homes.writes[0] == (("load balancer", lbs.app), True)  # before any node loses it


def test_a_removal_from_the_nodes_waits_while_the_load_balancer_addition_did_not_land(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    cluster = make_cluster()
    cluster.desired = [ingress("app.cern.ch")]
    cluster.settle()
    hold = lbs.sim.state.octavia.hold_pending(lbs.app)
    writes_before = len(cluster.sim.state.metadata_history())

    cluster.desired = [service("app.cern.ch", VIP_APP)]
    with capture_logs() as logs, pytest.raises(ApplyError, match="removal held back"):
        cluster.loop()

    [summary] = [line["summary"] for line in logs if line["event"] == "apply finished"]
    # The tag write that failed counts as failed, not as a load balancer written.
    assert re.fullmatch(
        r"\+0 -0 aliases \(\+0 -0 tokens\) on 0 of 4 nodes, 1 failed, \d+ ms, 3 held back", summary
    )
    assert carrying(cluster, "app") == set(cluster.nodes[:3])
    assert len(cluster.sim.state.metadata_history()) == writes_before
    assert claims(cluster) == {"a-app.cern.ch"}
    hold.release()
    cluster.settle()
    assert carrying(cluster, "app") == set()
    assert lbs.tags(lbs.app) == (SERVICE_TAG, "landb-alias=app")


def test_octavia_and_neutron_calls_per_loop(make_cluster: Any, lbs: LoadBalancers) -> None:
    """The note's figures: a settled loop lists load balancers once and floating IPs once (Records),
    however many load balancers and names, and AdjustEndpoints reuses that; a loop that moves a name adds
    one list of each and a GET and a PUT per load balancer written."""
    octavia = lbs.sim.state.octavia
    addresses = [f"188.184.31.{i}" for i in range(20)]
    for i, address in enumerate(addresses):
        octavia.add_load_balancer(f"kube_service_cluster_default_svc{i}", address)
    more = [service(f"svc{i}.cern.ch", address) for i, address in enumerate(addresses)]
    cluster = make_cluster(inventory_max_age=30)
    cluster.desired = [
        service("app.cern.ch", VIP_APP),
        service("web.cern.ch", FLOATING_WEB),
        ingress("x.cern.ch"),
        *more,
    ]
    cluster.settle()
    assert (
        sum(1 for lb in octavia.load_balancers() if any(t.startswith("landb-alias=") for t in lb.tags)) == 22
    )

    cluster.sim.state.reset_api_calls()
    assert cluster.loop() == Changes()
    settled = [(c.api, c.method) for c in cluster.sim.state.api_calls() if c.api in ("octavia", "neutron")]
    assert sorted(settled) == [("neutron", "GET"), ("octavia", "GET")]  # sent together

    cluster.desired = [
        service("app.cern.ch", VIP_WEB),
        service("web.cern.ch", FLOATING_WEB),
        ingress("x.cern.ch"),
        *more,
    ]
    cluster.sim.state.reset_api_calls()
    cluster.loop()
    moved = [
        (c.api, c.method, c.path) for c in cluster.sim.state.api_calls() if c.api in ("octavia", "neutron")
    ]
    lists = [m for m in moved if m[1] == "GET" and m[2].endswith("/loadbalancers")]
    assert len(lists) == 2  # Records, then the apply's fresh read
    assert len(moved) == 8  # and a floating IP list with each, a GET and a PUT on each load balancer written
    assert sorted(m[1] for m in moved if lbs.app in m[2] or lbs.web in m[2]) == ["GET", "GET", "PUT", "PUT"]


def test_with_loadbalancers_off_every_name_goes_to_the_nodes_and_octavia_is_never_called(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    cluster = make_cluster(loadbalancers=False)
    cluster.desired = [service("app.cern.ch", VIP_APP)]
    cluster.sim.state.reset_api_calls()

    cluster.settle()

    assert carrying(cluster, "app") == set(cluster.nodes[:3])
    assert lbs.tags(lbs.app) == (SERVICE_TAG,)
    assert cluster.sim.state.api_calls("octavia") == cluster.sim.state.api_calls("neutron") == []


def test_status_lists_the_load_balancers_carrying_names_and_which_are_unclaimed(
    world: World,  # noqa: F811 (the fixture of test_adopt_and_status, shared)
) -> None:
    octavia = world.sim.state.octavia
    shop = octavia.add_load_balancer(
        "kube_service_shop", VIP_APP, tags=["landb-alias=shop", "landb-alias=hand", SERVICE_TAG]
    )
    octavia.add_load_balancer("untagged", VIP_WEB, tags=[SERVICE_TAG])
    world.store_claims(ownership_record(service("shop.cern.ch", VIP_APP), OWNER))
    world.sim.state.reset_api_calls()

    code, out, _ = world.run("status")
    _, document, _ = world.run("status", "--output=json")

    assert code == 0
    assert (
        f"  kube_service_shop ({shop}) {VIP_APP}: hand.cern.ch, shop.cern.ch (unclaimed: hand.cern.ch)"
        in (out.splitlines())
    )
    assert json.loads(document)["load_balancers"] == [
        {
            "id": shop,
            "name": "kube_service_shop",
            "addresses": [VIP_APP],
            "names": ["hand.cern.ch", "shop.cern.ch"],
            "unclaimed": ["hand.cern.ch"],
            "dns": {"hand.cern.ch": None, "shop.cern.ch": None},  # not asked (--no-dns-watch)
        }
    ]
    assert world.writes() == []


def test_a_create_of_a_name_someone_else_tagged_is_refused_and_changes_nothing(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    """Invariant 4: a hand-set landb-alias tag makes the name someone else's, as a hand-set alias does."""
    octavia = lbs.sim.state.octavia
    octavia.set_tags_direct(lbs.app, [SERVICE_TAG, "landb-alias=app"])
    cluster = make_cluster()
    wanted = service("app.cern.ch", VIP_WEB)
    cluster.sim.state.reset_api_calls()

    with pytest.raises(ApplyError, match="no ownership record"):
        cluster.provider.apply_changes(Changes(create=(wanted, ownership_record(wanted, OWNER))))

    assert lbs.puts() == []
    assert lbs.tags(lbs.web) == ()
    assert claims(cluster) == set()
    assert counted(cluster.metrics, "refused_changes_total", reason="not_owned") == 1


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_dns_watch_follows_tagged_names_from_the_tag_write_to_their_vip_and_a_name_moved_off_the_nodes(
    make_cluster: Any, lbs: LoadBalancers
) -> None:
    """Tagged names are followed like the nodes' (docs/operations.md "Is it on the air yet?"): DNS should
    answer their load balancer's VIP, counted from the tag write; asked of the simulated LanDB."""
    clock = Clock()
    cluster = make_cluster(clock=clock)
    octavia, dns = lbs.sim.state.octavia, lbs.sim.dns
    octavia.add_load_balancer("kube_service_cluster_default_shop", VIP_SHOP)
    resolver = DnsResolver([parse_resolver(dns.address)], timeout=2.0)
    watch = DnsWatch(
        cluster.adapters.published,
        resolver,
        dns_watch_options(queries_per_second=50, recheck_period=30),
        clock=clock,
    )

    def states_a_minute_later() -> dict[str, State]:
        clock.now += 60
        watch.step()
        return {name: judged.state for name, judged in watch.judgements().items()}

    cluster.desired = [ingress("app.cern.ch")]
    cluster.settle()
    dns.sync()
    assert states_a_minute_later() == {"app.cern.ch": State.PUBLISHED}
    [node_ips] = [e.targets for e in cluster.provider.records() if e.dns_name == "app.cern.ch"]

    written = clock.now
    cluster.desired = [service("app.cern.ch", VIP_APP), service("shop.cern.ch", VIP_SHOP)]
    octavia.observe_tag_changes(lambda _: dns.sync())  # LanDB syncs between the make and the break writes
    cluster.loop()
    octavia.observe_tag_changes(None)
    clock.now += 300  # Records sees the writes a loop later
    assert cluster.loop() == Changes()
    published = cluster.adapters.published.published()
    assert (published["shop.cern.ch"].ips, published["shop.cern.ch"].written_at) == ({VIP_SHOP}, written)
    assert (published["app.cern.ch"].ips, published["app.cern.ch"].former) == ({VIP_APP}, set(node_ips))

    # DNS answers the nodes and the VIP (both held the name at the sync): the nodes' IPs are stale.
    assert states_a_minute_later() == {"app.cern.ch": State.STALE, "shop.cern.ch": State.PUBLISHED}
    with capture_logs() as logs:
        dns.sync()  # the next sync, once the nodes dropped it
        assert states_a_minute_later() == {"app.cern.ch": State.PUBLISHED, "shop.cern.ch": State.PUBLISHED}
    said = [line["event"] for line in logs if line["log_level"] == "info"]
    assert said == ["app.cern.ch resolves to its load balancer, 7 min after the write"]


# -- a cloud without Octavia ------------------------------------------------------------------------------

NOT_SERVED = {"api": "octavia", "status": 404, "times": None, "body": "<html>404 Not Found</html>"}
"""A catalog entry with no Octavia behind it, as on a Nova-only cloud: every request under it is a 404."""


def test_a_cloud_without_octavia_publishes_on_the_nodes_and_says_so_once_at_start_up(
    simulator: Simulator, make_cluster: Any
) -> None:
    """With LANDB_LOADBALANCERS on (the default), every Records was a 503 (`octavia unavailable: list load
    balancers: HTTP 404`) forever, so no name was ever published."""
    simulator.state.inject_fault(**NOT_SERVED)
    cluster: Cluster = make_cluster()
    cluster.desired = [ingress("app.cern.ch")]

    with capture_logs() as logs:
        ask_openstack_once(cluster.adapters).join(30)
        cluster.settle()

    assert set(cluster.aliases(cluster.nodes[0])) == {"app"}
    assert cluster.gauge("load_balancer_service", state="absent") == 1
    assert cluster.gauge("load_balancer_service", state="present") == 0
    absent = [log for log in logs if log["event"].startswith("this cloud has no load-balancer service")]
    assert [(log["why"], log["hint"]) for log in absent] == [
        ("the load-balancer API of the catalog answers 404", NO_LOAD_BALANCER_SERVICE)
    ]
    assert "LANDB_LOADBALANCERS=false" in NO_LOAD_BALANCER_SERVICE


def test_status_says_the_cloud_has_no_load_balancer_service(
    world: World,  # noqa: F811 (the fixture of test_adopt_and_status, shared)
) -> None:
    world.sim.state.identity.catalog_without = {"load-balancer"}

    code, out, _ = world.run("status")
    _, document, _ = world.run("status", "--output=json")
    _, off, _ = world.run("status", "--no-loadbalancers")

    assert code == 0
    said = (
        "Load balancers: none: this cloud has no load-balancer service (not in the OpenStack catalog); "
        f"{NO_LOAD_BALANCER_SERVICE}"
    )
    assert said in out.splitlines()
    assert json.loads(document)["read_from"]["load_balancers"] == said.removeprefix("Load balancers: ")
    assert "Load balancers: off (LANDB_LOADBALANCERS=false)" in off.splitlines()


def test_with_an_admin_credential_a_name_aimed_at_another_project_s_load_balancer_is_never_tagged_on_it(
    simulator: Simulator, make_cluster: Any
) -> None:
    """An admin's token lists every project's load balancers unless asked for one: the webhook asks for
    its own project's, so another project's VIP is no load balancer of ours and its tags stay theirs."""
    theirs = simulator.state.octavia.add_load_balancer(
        "theirs", VIP_SHOP, tags=[SERVICE_TAG], project_id="0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"
    )
    cluster: Cluster = make_cluster(os_cloud="simulator-admin")
    cluster.desired = [service("shop.cern.ch", VIP_SHOP)]

    cluster.settle()

    assert simulator.state.octavia.load_balancer(theirs).tags == (SERVICE_TAG,)
    assert [call for call in simulator.state.api_calls("octavia") if call.method == "PUT"] == []
