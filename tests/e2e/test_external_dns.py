"""The real external-dns v0.22.0 drives ``landb-webhook serve`` against the simulated Nova and Kubernetes.

Each test is one story told in external-dns loops (``--once`` runs): what external-dns sent over the wire,
what it logged, and what landed in the servers' metadata and in the ownership ConfigMap. The desired state
comes from the connector source (tests/e2e/feeder), so a test changes it by rewriting one JSON file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pytest
from e2e_support import (
    DOMAIN,
    MEDIA_TYPE,
    E2EStack,
    Result,
    endpoint_json,
    ingress_selector,
)

# The desired names come in the three types external-dns manages by default, with targets that mean
# nothing to LanDB: AdjustEndpoints must turn each into one A record on the ingress nodes' IPs.
APP_A = endpoint_json("app-a.cern.ch", "A", "192.0.2.10", "192.0.2.11")
APP_B = endpoint_json("app-b.cern.ch", "CNAME", "lb.example.org")
APP_C = endpoint_json("app-c.cern.ch", "AAAA", "2001:db8::10")
TOO_DEEP = endpoint_json("too.deep.cern.ch", "A", "192.0.2.20")
"""Two labels before cern.ch: no LanDB alias can publish it, so AdjustEndpoints drops it."""
DESIRED = (APP_A, APP_B, APP_C, TOO_DEEP)
PUBLISHED = {"app-a", "app-b", "app-c"}

pytestmark = pytest.mark.e2e


def txt_name(name: str) -> str:
    """Where external-dns' txt registry keeps the claim of the A record ``name`` (no --txt-prefix)."""
    return f"a-{name}.{DOMAIN}"


def assert_ok(result: Result) -> None:
    assert result.returncode == 0, result.describe()
    assert "level=error" not in result.log_text and "level=fatal" not in result.log_text, result.describe()


def assert_applied(result: Result) -> None:
    assert_ok(result)
    assert result.desired_changes is not None and not result.up_to_date, result.describe()


def assert_up_to_date(result: Result) -> None:
    assert_ok(result)
    assert result.up_to_date, result.describe()


def converge(stack: E2EStack) -> Result:
    """First loop applies, the next one must find nothing left to do."""
    first = stack.run()
    assert_applied(first)
    assert_up_to_date(stack.run())
    return first


def assert_published_on(stack: E2EStack, labels: Iterable[str], carriers: Iterable[str]) -> None:
    """Each label is on every carrier exactly once, with a distinct ``--load-N-`` per carrier, and on
    no other server."""
    aliases = stack.aliases()
    carriers = sorted(carriers)
    for alias in labels:
        indices: list[int] = []
        for server_id in carriers:
            found = aliases[server_id].get(alias, set())
            assert len(found) == 1, f"{alias} on {server_id}: indices {found}; all: {aliases}"
            indices.extend(found)
        assert len(set(indices)) == len(carriers), f"{alias} reuses an index across servers: {indices}"
        elsewhere = [sid for sid, tokens in aliases.items() if sid not in carriers and alias in tokens]
        assert not elsewhere, f"{alias} also on non-carriers {elsewhere}"


def adjusted_endpoints(result: Result) -> list[dict[str, Any]]:
    exchange = next(e for e in result.exchanges if e.method == "POST" and e.path == "/adjustendpoints")
    assert exchange.status == 200
    return list(exchange.response_json())


def record_shape(endpoint: dict[str, Any]) -> tuple[str, str, tuple[str, ...], int, str, tuple[Any, ...]]:
    """What the planner compares, read as external-dns reads it: absent keys are empty, targets are a
    case-insensitive sorted list, labels do not count."""
    return (
        endpoint["dnsName"],
        endpoint["recordType"],
        tuple(sorted(target.lower() for target in endpoint.get("targets") or ())),
        endpoint.get("recordTTL") or 0,
        endpoint.get("setIdentifier") or "",
        tuple(json.dumps(p, sort_keys=True) for p in endpoint.get("providerSpecific") or ()),
    )


def records_reply(result: Result) -> list[dict[str, Any]]:
    exchange = next(e for e in result.exchanges if e.method == "GET" and e.path == "/records")
    assert exchange.status == 200
    return list(exchange.response_json())


# ----------------------------------------------------------------------------------------------------------
# 1-2: first loop publishes, second loop is a no-op


def test_first_run_publishes_every_name_on_every_ingress_node_and_claims_it(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    ingress = stack.ingress_server_ids()

    result = stack.run()

    assert_applied(result)
    negotiation = next(e for e in result.exchanges if e.method == "GET" and e.path == "/")
    assert {k.lower(): v for k, v in negotiation.response_headers.items()}["content-type"] == MEDIA_TYPE
    assert DOMAIN in negotiation.response_json()["include"]
    names = {f"{alias}.{DOMAIN}" for alias in PUBLISHED}
    assert result.changed_names("create") == {(n, "A") for n in names} | {
        (txt_name(alias), "TXT") for alias in PUBLISHED
    }
    assert result.changed_names("delete") == set() and result.changed_names("updateNew") == set()
    # AdjustEndpoints normalised A, CNAME and AAAA alike, and dropped what LanDB cannot publish.
    ingress_ips = stack.ips_of(ingress)
    assert sorted(map(record_shape, adjusted_endpoints(result))) == [
        (name, "A", tuple(sorted(ingress_ips)), 0, "", ()) for name in sorted(names)
    ]
    assert_published_on(stack, PUBLISHED, ingress)
    claims = stack.ownership_claims()
    assert set(claims) == {txt_name(alias) for alias in PUBLISHED}
    assert all(f"external-dns/owner={stack.owner_id}" in value for value in claims.values()), claims


def test_second_run_is_up_to_date_and_writes_nothing(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    first = stack.run()
    assert_applied(first)
    writes = stack.metadata_write_count()
    nova_calls = len(stack.state.api_calls("nova"))
    before = stack.all_metadata()

    second = stack.run()

    assert_up_to_date(second)
    assert stack.metadata_write_count() == writes
    new_nova_calls = stack.state.api_calls("nova")[nova_calls:]
    assert [c for c in new_nova_calls if c.method in {"POST", "PUT", "DELETE"}] == []
    assert stack.all_metadata() == before
    # Zero churn: Records now reports exactly what AdjustEndpoints asked for.
    reported = {record_shape(ep) for ep in records_reply(second) if ep["recordType"] == "A"}
    assert reported == {record_shape(ep) for ep in adjusted_endpoints(first)}


# ----------------------------------------------------------------------------------------------------------
# 3-5: the cluster or the desired state changes


def test_new_ingress_node_gets_every_alias_and_no_other_server_is_rewritten(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    converge(stack)
    before = stack.all_metadata()
    old_ingress = stack.ingress_server_ids()
    writes = stack.metadata_write_count()

    newcomer = stack.add_ingress_node("e2e-ingress-new", "10.0.9.9")
    stack.wait_until_webhook_targets(stack.ips_of([*old_ingress, newcomer]))
    result = stack.run()

    assert_applied(result)
    assert result.changed_names("updateNew") >= {(f"{alias}.{DOMAIN}", "A") for alias in PUBLISHED}
    assert_published_on(stack, PUBLISHED, [*old_ingress, newcomer])
    assert stack.written_servers_since(writes) == {newcomer}
    after = stack.all_metadata()
    assert {sid: after[sid] for sid in before} == before
    assert_up_to_date(stack.run())


def test_node_losing_ingress_label_loses_its_aliases_and_no_other_server_is_rewritten(
    stack: E2EStack,
) -> None:
    stack.want(*DESIRED)
    converge(stack)
    leaving, *staying = stack.ingress_server_ids()
    before = stack.all_metadata()
    writes = stack.metadata_write_count()

    key, _, _ = ingress_selector().partition("=")
    stack.state.label_node(stack.node_name_of(leaving), key, None)
    stack.wait_until_webhook_targets(stack.ips_of(staying))
    result = stack.run()

    assert_applied(result)
    assert_published_on(stack, PUBLISHED, staying)
    assert stack.aliases()[leaving] == {}
    assert stack.written_servers_since(writes) == {leaving}
    after = stack.all_metadata()
    assert {sid: after[sid] for sid in before if sid != leaving} == {
        sid: meta for sid, meta in before.items() if sid != leaving
    }
    assert_up_to_date(stack.run())


def test_name_leaving_the_source_leaves_every_node_and_the_ownership_configmap(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    converge(stack)
    before = stack.aliases()

    stack.want(APP_A, APP_B, TOO_DEEP)
    result = stack.run()

    assert_applied(result)
    assert result.desired_changes is not None
    assert result.changed_names("delete") == {("app-c.cern.ch", "A"), (txt_name("app-c"), "TXT")}
    assert result.changed_names("create") == set()
    after = stack.aliases()
    for server_id, tokens in before.items():
        assert after[server_id] == {alias: idx for alias, idx in tokens.items() if alias != "app-c"}
    assert set(stack.ownership_claims()) == {txt_name("app-a"), txt_name("app-b")}
    assert_up_to_date(stack.run())


# ----------------------------------------------------------------------------------------------------------
# 6-7: what external-dns does not own survives; ownership survives a restart


def test_hand_set_alias_without_claim_survives_every_sync_run(stack: E2EStack) -> None:
    holder = stack.ingress_server_ids()[0]
    stack.state.set_metadata_direct(
        holder, {**stack.state.metadata(holder), "landb-alias": "legacy--load-0-"}
    )
    stack.want(*DESIRED)

    runs = [stack.run()]
    assert_applied(runs[-1])
    runs.append(stack.run())
    assert_up_to_date(runs[-1])
    stack.want(APP_A)
    runs.append(stack.run())
    assert_applied(runs[-1])
    runs.append(stack.run())
    assert_up_to_date(runs[-1])

    assert stack.aliases()[holder]["legacy"] == {0}
    for result in runs:
        deleted = {name for name, _ in result.changed_names("delete")}
        assert "legacy.cern.ch" not in deleted, result.describe()
    assert_published_on(stack, {"app-a"}, stack.ingress_server_ids())
    assert "legacy.cern.ch" in {ep["dnsName"] for ep in records_reply(runs[-1])}


def test_webhook_restart_reads_ownership_back_and_changes_nothing(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    converge(stack)
    before = stack.all_metadata()
    writes = stack.metadata_write_count()

    stack.restart_webhook()
    after_restart = stack.run()

    assert_up_to_date(after_restart)
    assert stack.metadata_write_count() == writes
    assert stack.all_metadata() == before
    # The claims came back from the ConfigMap: a name the source drops is still ours to delete.
    stack.want(APP_A, APP_B)
    removal = stack.run()
    assert_applied(removal)
    assert "app-c" not in set().union(*(set(tokens) for tokens in stack.aliases().values()))


# ----------------------------------------------------------------------------------------------------------
# 8: the other registry and policy


def test_noop_registry_publishes_without_any_txt_record(stack: E2EStack) -> None:
    stack.start_webhook(registry="noop")
    stack.want(*DESIRED)

    first = stack.run()
    assert_applied(first)
    assert_up_to_date(stack.run())
    stack.want(APP_A)
    removal = stack.run()
    assert_applied(removal)

    for result in (first, removal):
        assert result.desired_changes is not None
        sent = [ep for kind in result.desired_changes.values() for ep in kind]
        assert [ep for ep in sent if ep["recordType"] == "TXT"] == [], result.describe()
    assert stack.ownership_claims() == {}
    assert_published_on(stack, {"app-a"}, stack.ingress_server_ids())
    assert set().union(*(set(tokens) for tokens in stack.aliases().values())) == {"app-a"}


def test_upsert_only_policy_adds_but_never_removes(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    converge(stack)
    before = stack.all_metadata()

    stack.want(APP_A)
    dropped = stack.run(policy="upsert-only")
    assert_up_to_date(dropped)
    assert stack.all_metadata() == before
    assert txt_name("app-c") in stack.ownership_claims()

    stack.want(APP_A, endpoint_json("app-d.cern.ch", "A", "192.0.2.40"))
    added = stack.run(policy="upsert-only")
    assert_applied(added)
    assert added.changed_names("delete") == set()
    assert_published_on(stack, PUBLISHED | {"app-d"}, stack.ingress_server_ids())


# ----------------------------------------------------------------------------------------------------------
# The fake source: external-dns' own generated endpoints, every record type it knows


def test_fake_source_first_run_applies_and_second_settles(stack: E2EStack) -> None:
    fake = ["--source=fake", f"--fqdn-template={DOMAIN}"]

    first = stack.run(source=fake)

    assert_applied(first)
    generated = re.findall(
        r"fake source generated (A|AAAA|CNAME) endpoint: ([a-z]+)\.cern\.ch ", first.log_text
    )
    assert len(generated) == 3, first.describe()
    labels = {alias for _, alias in generated}
    assert_published_on(stack, labels, stack.ingress_server_ids())
    # The other types (TXT, SRV, NS, MX, NAPTR, DNAME, PTR) were dropped, not published.
    assert set().union(*(set(tokens) for tokens in stack.aliases().values())) == labels
    assert_up_to_date(stack.run(source=fake))
