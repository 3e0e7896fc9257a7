"""adapters/dns.py against a real DNS server (Knot, tests/support/knot.py): every kind of answer."""

from __future__ import annotations

import pytest

from landb_webhook.adapters.dns import DnsResolver, InvalidResolver, parse_resolver
from landb_webhook.landb.propagation import Addresses, Alias, NoAnswer, NoName
from support.knot import KnotServer, knot, silent_resolver

__all__ = ["knot"]


def test_round_robin_a_records_are_one_answer(knot: KnotServer) -> None:
    knot.publish("adapter-rr", ["10.0.0.1", "10.0.0.2", "10.0.0.3"])

    answer = DnsResolver([knot.address]).resolve("adapter-rr.cern.ch")

    assert answer == Addresses(frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"}))


def test_a_name_that_does_not_exist_and_one_without_an_a_record_are_no_name(knot: KnotServer) -> None:
    resolver = DnsResolver([knot.address])
    knot.publish("adapter-empty", [])

    assert resolver.resolve("adapter-missing.cern.ch") == NoName()
    assert resolver.resolve("ns.cern.ch") == Addresses(frozenset({"127.0.0.1"}))
    assert resolver.resolve("cern.ch") == NoName()  # the apex: SOA and NS, no A


def test_a_cname_is_an_alias_whether_its_target_exists_or_not(knot: KnotServer) -> None:
    knot.publish("adapter-host", ["10.0.0.9"])
    knot.alias("adapter-plain", "adapter-host.cern.ch.")
    knot.alias("adapter-dangling", "nowhere.cern.ch.")
    resolver = DnsResolver([knot.address])

    assert resolver.resolve("adapter-plain.cern.ch") == Alias("adapter-host.cern.ch.")
    assert resolver.resolve("adapter-dangling.cern.ch") == Alias("nowhere.cern.ch.")


def test_a_resolver_that_never_answers_is_no_answer_within_the_timeout() -> None:
    with silent_resolver() as address:
        answer = DnsResolver([address], timeout=0.3).resolve("app.cern.ch")

    assert isinstance(answer, NoAnswer)
    assert address in answer.reason


def test_a_refusing_resolver_is_no_answer_naming_it(knot: KnotServer) -> None:
    """knotd is authoritative for cern.ch only: another zone is REFUSED."""
    answer = DnsResolver([knot.address]).resolve("app.example.org")

    assert isinstance(answer, NoAnswer)
    assert "REFUSED" in answer.reason


def test_resolver_addresses_are_ip_or_ip_and_port() -> None:
    assert parse_resolver("192.0.2.1") == ("192.0.2.1", 53)
    assert parse_resolver("192.0.2.1:5353") == ("192.0.2.1", 5353)
    assert parse_resolver("2001:db8::1") == ("2001:db8::1", 53)
    assert parse_resolver("[2001:db8::1]:5353") == ("2001:db8::1", 5353)
    for bad in ("dns.cern.ch", "192.0.2.1:0", "192.0.2.1:x", "[2001:db8::1", "[::1]x"):
        with pytest.raises(InvalidResolver):
            parse_resolver(bad)
