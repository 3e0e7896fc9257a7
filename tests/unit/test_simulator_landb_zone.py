"""What the simulated LanDB publishes where the documents are silent: each case names what it ignores."""

from __future__ import annotations

from landb_simulator.landb_zone import publish
from landb_simulator.state import SimulatorState


def servers(*specs: tuple[str, str | None, dict[str, str]]) -> SimulatorState:
    state = SimulatorState()
    for name, ip, metadata in specs:
        state.add_server(name, metadata, ip=ip)
    return state


def test_a_name_with_load_balanced_carriers_is_never_also_a_cname() -> None:
    state = servers(
        ("node-a", "188.184.1.1", {"landb-alias": "web"}),
        ("node-b", "188.184.1.2", {"landb-alias": "web--load-1-"}),
    )

    zone = publish(state.servers())

    assert zone.addresses["web"] == ("188.184.1.2",)
    assert "web" not in zone.canonical
    assert [(r.server, r.item) for r in zone.rejected] == [("node-a", "web")]


def test_an_alias_never_shadows_a_device_and_a_plain_alias_has_one_holder() -> None:
    state = servers(
        ("node-a", "188.184.1.1", {"landb-alias": "node-b,docs"}),
        ("node-b", "188.184.1.2", {"landb-alias": "docs"}),
    )

    zone = publish(state.servers())

    assert zone.addresses["node-b"] == ("188.184.1.2",)
    assert zone.canonical == {"docs": "node-a"}
    assert {(r.server, r.item) for r in zone.rejected} == {("node-a", "node-b"), ("node-b", "docs")}


def test_values_that_are_not_one_label_are_ignored_and_ipv6_gets_its_own_records() -> None:
    state = servers(
        ("node-a", "2001:db8::1", {"landb-alias": "app.cern.ch, bad_name ,app--load-0-,,"}),
        ("node-b", "188.184.1.2", {"landb-alias2": "APP--Load-7-"}),
        ("no-address", None, {"landb-alias": "app--load-9-"}),
    )

    zone = publish(state.servers())

    assert zone.addresses["app"] == ("188.184.1.2", "2001:db8::1")
    assert {(r.server, r.item) for r in zone.rejected} == {
        ("node-a", "app.cern.ch"),
        ("node-a", "bad_name"),
        ("no-address", "app--load-9-"),
    }
    assert zone.hosts == {"node-a", "node-b"}


def test_what_is_published_does_not_depend_on_the_order_servers_were_created() -> None:
    specs = [
        ("node-a", "188.184.1.1", {"landb-alias": "x--load-0-,y"}),
        ("node-b", "188.184.1.2", {"landb-alias": "x--load-0-,y,x--load-1-"}),
    ]

    assert publish(servers(*specs).servers()) == publish(servers(*reversed(specs)).servers())


def test_a_load_balancers_alias_tag_is_an_a_record_of_its_vip_shared_with_servers_load_balanced_aliases() -> (
    None
):
    state = servers(
        ("node-a", "188.184.1.1", {"landb-alias": "web--load-1-,docs"}),
    )
    state.octavia.add_load_balancer("lb-1", "188.184.9.1", tags=["landb-alias=Shop", "landb-alias=web", "x"])
    state.octavia.add_load_balancer("lb-2", "2001:db8::9", tags=["landb-alias=shop", "landb-alias=docs"])
    state.octavia.add_load_balancer("lb-3", "188.184.9.3", tags=["landb-alias=node-a", "landb-alias=a.b"])

    zone = publish(state.servers(), state.octavia.load_balancers())

    assert zone.addresses["shop"] == ("188.184.9.1", "2001:db8::9")  # round robin across load balancers
    assert zone.addresses["web"] == ("188.184.1.1", "188.184.9.1")  # and across servers and load balancers
    assert zone.addresses["docs"] == ("2001:db8::9",)  # A records, so never also a CNAME
    assert zone.canonical == {}
    assert zone.shared == {"web"}
    assert {(r.holder, r.server, r.item) for r in zone.rejected} == {
        ("server", "node-a", "docs"),
        ("load balancer", "lb-3", "landb-alias=node-a"),
        ("load balancer", "lb-3", "landb-alias=a.b"),
    }
    assert "on load balancer lb-3" in next(r for r in zone.rejected if r.server == "lb-3").describe()
