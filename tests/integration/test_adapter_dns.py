"""adapters/dns.py against a real DNS server (Knot, tests/support/knot.py): every kind of answer."""

from __future__ import annotations

from landb_webhook.adapters.dns import DnsResolver
from landb_webhook.config import parse_resolver
from landb_webhook.landb.propagation import Addresses, Alias, NoAnswer, NoName
from support.knot import KnotServer, knot, silent_resolver

__all__ = ["knot"]


def resolver_at(address: str, timeout: float = 2.0) -> DnsResolver:
    return DnsResolver([parse_resolver(address)], timeout=timeout)


def test_round_robin_a_records_are_one_answer(knot: KnotServer) -> None:
    knot.publish("adapter-rr", ["10.0.0.1", "10.0.0.2", "10.0.0.3"])

    answer = resolver_at(knot.address).resolve("adapter-rr.cern.ch")

    assert answer == Addresses(frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"}))


def test_a_name_that_does_not_exist_and_one_without_an_a_record_are_no_name(knot: KnotServer) -> None:
    resolver = resolver_at(knot.address)
    knot.publish("adapter-empty", [])

    assert resolver.resolve("adapter-missing.cern.ch") == NoName()
    assert resolver.resolve("ns.cern.ch") == Addresses(frozenset({"127.0.0.1"}))
    assert resolver.resolve("cern.ch") == NoName()  # the apex: SOA and NS, no A


def test_a_cname_is_an_alias_whether_its_target_exists_or_not(knot: KnotServer) -> None:
    knot.publish("adapter-host", ["10.0.0.9"])
    knot.alias("adapter-plain", "adapter-host.cern.ch.")
    knot.alias("adapter-dangling", "nowhere.cern.ch.")
    resolver = resolver_at(knot.address)

    assert resolver.resolve("adapter-plain.cern.ch") == Alias("adapter-host.cern.ch.")
    assert resolver.resolve("adapter-dangling.cern.ch") == Alias("nowhere.cern.ch.")


def test_a_resolver_that_never_answers_is_no_answer_within_the_timeout() -> None:
    with silent_resolver() as address:
        answer = resolver_at(address, timeout=0.3).resolve("app.cern.ch")

    assert isinstance(answer, NoAnswer)
    assert address in answer.reason


def test_a_refusing_resolver_is_no_answer_naming_it(knot: KnotServer) -> None:
    """knotd is authoritative for cern.ch only: another zone is REFUSED."""
    answer = resolver_at(knot.address).resolve("app.example.org")

    assert isinstance(answer, NoAnswer)
    assert "REFUSED" in answer.reason
