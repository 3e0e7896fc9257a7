"""Settings from LANDB_* environment variables."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from landb_simulator.seed import cern_vm_metadata
from landb_simulator.state import DEFAULT_MAX_SERVER_META
from landb_webhook.config import InvalidResolver, Settings, parse_resolver


def test_defaults_are_production_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [f"LANDB_{field.upper()}" for field in Settings.model_fields]:
        monkeypatch.delenv(name, raising=False)

    settings = Settings()

    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8888)  # the API is localhost only
    assert settings.health_port == 8080  # the port the official Helm chart probes
    assert settings.domain_filter == ["cern.ch"]
    assert settings.request_timeout < 15  # external-dns gives up after 15 s
    assert settings.dry_run is False


def test_domain_filter_from_the_environment_is_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANDB_DOMAIN_FILTER", "cern.ch, Example.ORG.,")

    assert Settings().domain_filter == ["cern.ch", "example.org"]


def test_domain_filter_also_takes_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANDB_DOMAIN_FILTER", '["cern.ch", "example.org"]')

    assert Settings().domain_filter == ["cern.ch", "example.org"]


def test_environment_values_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANDB_API_PORT", "70000")
    monkeypatch.setenv("LANDB_LOG_FORMAT", "xml")

    with pytest.raises(ValidationError) as raised:
        Settings()

    assert {error["loc"][0] for error in raised.value.errors()} == {"api_port", "log_format"}


def test_dns_domain_must_be_dns_labels() -> None:
    assert Settings(dns_domain="CERN.CH.").dns_domain == "cern.ch"
    with pytest.raises(ValidationError):
        Settings(dns_domain="cern_ch")


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.api_port = 1  # type: ignore[misc]


def test_ingress_selectors_are_checked_when_the_settings_are_read() -> None:
    assert Settings(ingress_selector="role=ingress;node-role.kubernetes.io/ingress").ingress_selector
    with pytest.raises(ValidationError, match="empty alternative"):
        Settings(ingress_selector="role=ingress;")
    with pytest.raises(ValidationError, match="not a valid label value"):
        Settings(ingress_pod_selector="app=a;app=b")  # the API server selects pods: one selector only


def test_the_node_cache_max_age_cannot_be_shorter_than_a_watch_period() -> None:
    """A quiet, healthy cluster refreshes the cache once per 60 s watch: a shorter bound would 503."""
    with pytest.raises(ValidationError, match="node_cache_max_age"):
        Settings(node_cache_max_age=30)
    assert Settings(node_cache_max_age=60).node_cache_max_age == 60


def test_the_renew_deadline_must_leave_room_for_one_upstream_timeout_after_a_renewal() -> None:
    """A write is sent only while the lease surely lasts one upstream timeout more: with a renewal every
    retry period, a shorter renew deadline would leave the holder never sure enough to write."""
    with pytest.raises(ValidationError, match="must exceed --upstream-timeout"):
        Settings(upstream_timeout=8, lease_renew_deadline=10, lease_retry_period=2)
    assert Settings(upstream_timeout=8, leader_election=False).upstream_timeout == 8  # no lease, no fence
    assert Settings().lease_renew_deadline > Settings().upstream_timeout + 1.2 * Settings().lease_retry_period


def test_resolver_addresses_are_ip_or_ip_and_port() -> None:
    assert parse_resolver("192.0.2.1") == ("192.0.2.1", 53)
    assert parse_resolver("192.0.2.1:5353") == ("192.0.2.1", 5353)
    assert parse_resolver("2001:db8::1") == ("2001:db8::1", 53)
    assert parse_resolver("[2001:db8::1]:5353") == ("2001:db8::1", 5353)
    for bad in ("dns.cern.ch", "192.0.2.1:0", "192.0.2.1:x", "[2001:db8::1", "[::1]x"):
        with pytest.raises(InvalidResolver):
            parse_resolver(bad)


def test_dns_resolvers_are_a_comma_list_each_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANDB_DNS_RESOLVERS", "192.0.2.1, 192.0.2.2:5353")
    assert Settings().dns_resolvers == ["192.0.2.1", "192.0.2.2:5353"]

    monkeypatch.setenv("LANDB_DNS_RESOLVERS", "192.0.2.1,dns.cern.ch")
    with pytest.raises(ValidationError, match=r"dns\.cern\.ch"):
        Settings()


def test_the_request_endpoint_limit_is_bounded_and_named_by_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for refused in ("999", "1000001", "ten"):
        monkeypatch.setenv("LANDB_MAX_REQUEST_ENDPOINTS", refused)
        with pytest.raises(ValidationError) as raised:
            Settings()
        assert [error["loc"][0] for error in raised.value.errors()] == ["max_request_endpoints"]
    for accepted in (1_000, 1_000_000):
        monkeypatch.setenv("LANDB_MAX_REQUEST_ENDPOINTS", str(accepted))
        assert Settings().max_request_endpoints == accepted


def test_the_default_endpoint_limit_holds_a_node_joining_the_envelopes_largest_cluster() -> None:
    """The most names a cluster holds is what one server's quota holds (docs/configuration.md: 2,057 of
    5 characters, CERN's own keys besides); a node joining or leaving sends each name's A record and TXT
    claim in updateOld and again in updateNew."""
    settings = Settings()
    token = "abcde--load-1-"
    keys = DEFAULT_MAX_SERVER_META - len(cern_vm_metadata("cluster", "node"))
    most_names = keys * ((settings.max_value_length + 1) // (len(token) + 1))
    assert most_names == 2_057  # the figure the documents give
    assert settings.max_request_endpoints >= 4 * most_names
