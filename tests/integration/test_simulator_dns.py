"""The simulated LanDB's DNS server, asked over the real wire protocol (dnspython, UDP and TCP): it publishes
what the Nova metadata said at the last sync, as LanDB does every 15 minutes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from landb_simulator import Simulator, seed_cluster
from landb_simulator.landb_dns import LandbDnsServer
from landb_simulator.landb_zone import OtherDevice
from landb_simulator.state import SimulatorState

TIMEOUT = 5.0
Query = Callable[..., dns.message.Message]


def over_udp(server: LandbDnsServer, name: str, rdtype: str = "A", **options: object) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, **options)  # type: ignore[arg-type]
    return dns.query.udp(query, server.host, port=server.port, timeout=TIMEOUT)


def over_tcp(server: LandbDnsServer, name: str, rdtype: str = "A", **options: object) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, **options)  # type: ignore[arg-type]
    return dns.query.tcp(query, server.host, port=server.port, timeout=TIMEOUT)


@pytest.fixture(params=[over_udp, over_tcp], ids=["udp", "tcp"])
def ask(request: pytest.FixtureRequest) -> Query:
    transport: Query = request.param
    return transport


@pytest.fixture
def cluster() -> Iterator[tuple[Simulator, list[str]]]:
    """Three servers with addresses and one without, the DNS sync period far beyond any test's length."""
    with Simulator(dns_sync_period=3600) as sim:
        names = seed_cluster(sim.state, ingress_nodes=3, workers=0)
        sim.state.add_server("no-address")
        yield sim, names


def server_id(sim: Simulator, name: str) -> str:
    return next(server.id for server in sim.state.servers() if server.name == name)


def set_aliases(sim: Simulator, name: str, value: str, key: str = "landb-alias") -> None:
    sid = server_id(sim, name)
    sim.state.set_metadata_direct(sid, {**sim.state.metadata(sid), key: value})


def ip_of(sim: Simulator, name: str) -> str:
    ip = sim.state.server(server_id(sim, name)).ip
    assert ip is not None
    return ip


def answer_values(reply: dns.message.Message, rdtype: str = "A") -> list[str]:
    return [
        rdata.to_text()
        for rrset in reply.answer
        if rrset.rdtype == dns.rdatatype.from_text(rdtype)
        for rdata in rrset
    ]


def test_round_robin_a_records_from_every_server_holding_a_load_alias(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    sim, names = cluster
    for index, name in enumerate(names):
        set_aliases(sim, name, f"myapp--load-{index * 7}-")
    sim.dns.sync()

    replies = [ask(sim.dns, "myapp.cern.ch.") for _ in range(len(names))]

    expected = sorted(ip_of(sim, name) for name in names)
    for reply in replies:
        assert reply.rcode() == dns.rcode.NOERROR
        assert reply.flags & dns.flags.AA
        assert sorted(answer_values(reply)) == expected
        assert all(rrset.ttl == sim.dns.ttl for rrset in reply.answer)
    firsts = {answer_values(reply)[0] for reply in replies}
    assert firsts == set(expected)  # each answer starts with another address: round robin


def test_a_plain_alias_is_a_cname_to_the_servers_own_host_name(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    sim, names = cluster
    set_aliases(sim, names[1], "Docs")  # names are case-insensitive, published in lower case
    sim.dns.sync()

    reply = ask(sim.dns, "docs.cern.ch.")

    host = f"{names[1]}.cern.ch."
    assert reply.rcode() == dns.rcode.NOERROR
    assert answer_values(reply, "CNAME") == [host]
    assert [
        (str(rrset.name), rdata)
        for rrset in reply.answer
        if rrset.rdtype == dns.rdatatype.A
        for rdata in answer_values(reply)
    ] == [(host, ip_of(sim, names[1]))]
    only_cname = ask(sim.dns, "docs.cern.ch.", "CNAME")
    assert answer_values(only_cname, "CNAME") == [host] and answer_values(only_cname) == []


def test_unknown_names_are_nxdomain_with_the_zones_soa(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    sim, names = cluster
    set_aliases(sim, names[0], "myapp--load-0-")
    sim.dns.sync()

    for unknown in ("nothing.cern.ch.", "deeper.myapp.cern.ch.", "no-address.cern.ch."):
        reply = ask(sim.dns, unknown)
        assert reply.rcode() == dns.rcode.NXDOMAIN, unknown
        assert [rrset.rdtype for rrset in reply.authority] == [dns.rdatatype.SOA]
    assert ask(sim.dns, "example.org.").rcode() == dns.rcode.REFUSED
    nodata = ask(sim.dns, "myapp.cern.ch.", "AAAA")
    assert nodata.rcode() == dns.rcode.NOERROR and nodata.answer == []


def test_a_write_is_answered_only_after_the_next_sync(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    sim, names = cluster
    set_aliases(sim, names[0], "myapp--load-0-")
    assert ask(sim.dns, "myapp.cern.ch.").rcode() == dns.rcode.NXDOMAIN  # written, not yet synced

    sim.dns.sync()
    assert answer_values(ask(sim.dns, "myapp.cern.ch.")) == [ip_of(sim, names[0])]

    set_aliases(sim, names[0], "")
    assert answer_values(ask(sim.dns, "myapp.cern.ch.")) == [ip_of(sim, names[0])]  # stale until the sync
    sim.dns.sync()
    assert ask(sim.dns, "myapp.cern.ch.").rcode() == dns.rcode.NXDOMAIN


def test_a_load_balancers_alias_tag_is_answered_with_its_vip_at_the_next_sync_round_robin_with_servers(
    cluster: tuple[Simulator, list[str]], ask: Query, caplog: pytest.LogCaptureFixture
) -> None:
    sim, names = cluster
    lb = sim.state.octavia.add_load_balancer("shop-lb", "188.184.77.7", tags=["landb-alias=shop", "other"])
    set_aliases(sim, names[0], "both--load-0-")
    assert ask(sim.dns, "shop.cern.ch.").rcode() == dns.rcode.NXDOMAIN  # tagged, not yet synced

    sim.dns.sync()
    assert answer_values(ask(sim.dns, "shop.cern.ch.")) == ["188.184.77.7"]

    sim.state.octavia.set_tags_direct(lb, ["landb-alias=both"])  # a name moving from the nodes to the tag
    sim.dns.sync()
    assert ask(sim.dns, "shop.cern.ch.").rcode() == dns.rcode.NXDOMAIN
    assert sorted(answer_values(ask(sim.dns, "both.cern.ch."))) == sorted(
        [ip_of(sim, names[0]), "188.184.77.7"]
    )
    assert "answers both.cern.ch from both servers' metadata and load balancer tags" in caplog.text

    set_aliases(sim, names[0], "")
    sim.dns.sync()
    assert answer_values(ask(sim.dns, "both.cern.ch.")) == ["188.184.77.7"]


def test_the_server_syncs_by_itself_every_period() -> None:
    state = SimulatorState()
    seed_cluster(state, ingress_nodes=1, workers=0)
    with LandbDnsServer(state, sync_period=0.05) as server:
        assert server.syncs == 1  # the snapshot at start
        sid = state.servers()[0].id
        state.set_metadata_direct(sid, {"landb-alias": "myapp--load-3-"})
        assert server.wait_for_syncs(3, timeout=TIMEOUT)  # a whole period after the write, with no sync()
        assert answer_values(over_udp(server, "myapp.cern.ch.")) == [state.server(sid).ip]


def test_per_interface_values_and_every_landb_alias_key_are_read(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    sim, names = cluster
    set_aliases(sim, names[0], f"{names[0].upper()}.cern.ch:web--LOAD-1-,wiki;elsewhere.cern.ch:lost")
    set_aliases(sim, names[1], "web--load-2-", key="landb-alias2")
    published = sim.dns.sync()

    assert sorted(answer_values(ask(sim.dns, "web.cern.ch."))) == sorted(ip_of(sim, n) for n in names[:2])
    assert answer_values(ask(sim.dns, "wiki.cern.ch."), "CNAME") == [f"{names[0]}.cern.ch."]
    assert ask(sim.dns, "lost.cern.ch.").rcode() == dns.rcode.NXDOMAIN
    assert [(r.server, r.item) for r in published.rejected] == [(names[0], "lost")]


def test_an_index_held_twice_is_published_for_its_first_holder_only(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    sim, names = cluster
    set_aliases(sim, names[0], "myapp--load-0-")
    set_aliases(sim, names[1], "myapp--load-0-")
    published = sim.dns.sync()

    assert answer_values(ask(sim.dns, "myapp.cern.ch.")) == [ip_of(sim, names[0])]
    assert [(r.server, r.reason) for r in published.rejected] == [
        (names[1], f"server {names[0]} already holds it")
    ]


def test_an_answer_larger_than_udp_allows_is_truncated_and_complete_over_tcp() -> None:
    state = SimulatorState()
    for index in range(60):
        state.add_server(f"node-{index}", {"landb-alias": f"big--load-{index}-"}, ip=f"188.184.9.{index + 1}")
    with LandbDnsServer(state) as server:
        udp = over_udp(server, "big.cern.ch.")
        tcp = over_tcp(server, "big.cern.ch.")

    assert udp.flags & dns.flags.TC
    assert len(answer_values(tcp)) == 60


def test_garbage_gets_formerr_and_the_server_keeps_answering(cluster: tuple[Simulator, list[str]]) -> None:
    sim, names = cluster
    set_aliases(sim, names[0], "myapp--load-0-")
    sim.dns.sync()
    query = dns.message.make_query("myapp.cern.ch.", "A")
    garbage = query.to_wire()[:12] + b"\xff\xff\xff"

    reply = dns.message.from_wire(sim.dns.answer(garbage) or b"")

    assert reply.id == query.id and reply.rcode() == dns.rcode.FORMERR
    assert answer_values(over_udp(sim.dns, "myapp.cern.ch.")) == [ip_of(sim, names[0])]


def test_another_devices_names_are_answered_beside_the_clusters_and_leave_with_it(
    cluster: tuple[Simulator, list[str]], ask: Query
) -> None:
    """A device outside the project (``--other-device webfarm=10.9.9.9:indico--load-0-,www``): its load
    alias answers its address, round robin with the cluster's servers holding the same name; its plain
    alias is a CNAME to its host name; removed, both go at the next sync."""
    sim, names = cluster
    sim.dns.add_other_device(OtherDevice.parse("webfarm=10.9.9.9:indico--load-0-,www"))
    set_aliases(sim, names[0], "indico--load-10-")
    sim.dns.sync()

    shared = ask(sim.dns, "indico.cern.ch.")
    alias = ask(sim.dns, "www.cern.ch.")
    sim.dns.remove_other_device("webfarm")
    sim.dns.sync()

    assert sorted(answer_values(shared)) == sorted(["10.9.9.9", ip_of(sim, names[0])])
    assert answer_values(alias, "CNAME") == ["webfarm.cern.ch."]
    assert answer_values(ask(sim.dns, "indico.cern.ch.")) == [ip_of(sim, names[0])]
    assert ask(sim.dns, "www.cern.ch.").rcode() == dns.rcode.NXDOMAIN


@pytest.mark.parametrize(
    "text", ["webfarm", "webfarm=10.9.9.9", "webfarm=nowhere:www", "Bad_Name=10.9.9.9:www", "w=10.9.9.9:"]
)
def test_another_device_is_written_name_address_and_aliases(text: str) -> None:
    with pytest.raises(ValueError, match=r"NAME=IPV4:ALIAS|not an IP address"):
        OtherDevice.parse(text)
