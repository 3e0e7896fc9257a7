"""Migrating a cluster: aliases the landb-alias-controller left on the ingress nodes are adopted with
``landb-webhook adopt``, then the real external-dns takes them over with registry txt and the same owner
id -- without removing or renumbering any alias at any moment, and its second loop writes nothing."""

from __future__ import annotations

import json

import pytest
from e2e_support import OWNERSHIP_NAMESPACE, E2EStack, alias_tokens, endpoint_json, ownership_configmap
from test_external_dns import assert_applied, assert_published_on, assert_up_to_date

pytestmark = pytest.mark.e2e

APP = endpoint_json("app.cern.ch", "A", "192.0.2.10")
WEB = endpoint_json("web.cern.ch", "CNAME", "lb.example.org")
FRESH = endpoint_json("fresh.cern.ch", "A", "192.0.2.11")
"""A name external-dns creates itself, to compare its claim with adoption's byte for byte."""


def stored_claims(stack: E2EStack) -> dict[str, str]:
    """ConfigMap data key -> the stored record, exactly as the webhook keeps it."""
    configmap = stack.state.configmap(OWNERSHIP_NAMESPACE, ownership_configmap())
    return dict((configmap or {}).get("data") or {})


def assert_every_state_keeps(stack: E2EStack, before: dict[str, dict[str, set[int]]]) -> None:
    """No alias removed or renumbered at any moment: every metadata state the simulator recorded since
    the seeding still holds each alias a server held before, with the same N."""
    for change in stack.state.metadata_history():
        if change.method == "direct":
            continue
        held = alias_tokens(change.metadata)
        for label, indices in before.get(change.server_id, {}).items():
            assert indices <= held.get(label, set()), f"{label} {indices} lost at {change}"


def test_adopted_aliases_are_owned_by_external_dns_without_a_moment_off_the_air(stack: E2EStack) -> None:
    first_node, second_node, third_node = stack.ingress_server_ids()
    # As the controller leaves them: app on every ingress node, web on two (the third joined later).
    for server_id, value in (
        (first_node, "app--load-0-,web--load-0-"),
        (second_node, "app--load-1-,web--load-1-"),
        (third_node, "app--load-2-"),
    ):
        stack.state.set_metadata_direct(server_id, {**stack.state.metadata(server_id), "landb-alias": value})
    before = stack.aliases()

    adopted = stack.landb_webhook("adopt", f"--owner-id={stack.owner_id}", "--all-unclaimed")
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.splitlines()[-1] == "2 claimed, 0 left.", adopted.stdout
    adoption_claims = stored_claims(stack)
    assert sorted(adoption_claims) == ["a-app.cern.ch", "a-web.cern.ch"]

    stack.want(APP, WEB, FRESH)
    first = stack.run()

    assert_applied(first)
    assert first.desired_changes is not None
    created = sorted(name for name, _ in first.changed_names("create"))
    assert created == ["a-fresh.cern.ch", "fresh.cern.ch"], first.describe()
    assert first.desired_changes["delete"] == [], first.describe()
    # Only web changed among the adopted: its third carrier. app needed nothing.
    updated = sorted({name for name, _ in first.changed_names("updateNew")})
    assert updated == ["a-web.cern.ch", "web.cern.ch"], first.describe()

    ingress = stack.ingress_server_ids()
    assert_published_on(stack, {"app", "web", "fresh"}, ingress)
    after = stack.aliases()
    assert after[third_node]["web"] == {2}
    assert_every_state_keeps(stack, before)

    # The claim adoption wrote is the one external-dns writes itself for an A record without resource.
    claims = stored_claims(stack)
    assert claims["a-app.cern.ch"] == adoption_claims["a-app.cern.ch"]  # external-dns kept it as it was
    assert claims["a-fresh.cern.ch"] == adoption_claims["a-app.cern.ch"].replace(
        "app.cern.ch", "fresh.cern.ch"
    )
    assert (
        json.loads(claims["a-web.cern.ch"])["targets"]
        == json.loads(adoption_claims["a-web.cern.ch"])["targets"]
    )

    writes = stack.metadata_write_count()
    second = stack.run()
    assert_up_to_date(second)
    assert stack.metadata_write_count() == writes
    assert stored_claims(stack) == claims

    status = stack.landb_webhook("status", "--output=json")
    assert status.returncode == 0, status.stdout + status.stderr
    report = json.loads(status.stdout)
    assert {n["name"]: n["owners"] for n in report["names"]} == {
        "app.cern.ch": [stack.owner_id],
        "fresh.cern.ch": [stack.owner_id],
        "web.cern.ch": [stack.owner_id],
    }
    assert report["needs_human"] == []


def test_adopt_existing_lets_the_running_webhook_adopt_what_external_dns_wants(stack: E2EStack) -> None:
    ingress = stack.ingress_server_ids()
    for index, server_id in enumerate(ingress[:2]):
        stack.state.set_metadata_direct(
            server_id,
            {**stack.state.metadata(server_id), "landb-alias": f"app--load-{index}-,kept--load-{index}-"},
        )
    before = stack.aliases()
    stack.start_webhook(LANDB_ADOPT_EXISTING="true")
    stack.want(APP)

    first = stack.run()

    assert_applied(first)
    assert sorted(name for name, _ in first.changed_names("create")) == ["a-app.cern.ch", "app.cern.ch"]
    assert_published_on(stack, {"app"}, ingress)
    assert_every_state_keeps(stack, before)
    assert sorted(stored_claims(stack)) == ["a-app.cern.ch"]  # kept is nobody's wish: left alone
    assert stack.webhook is not None and "existing alias adopted" in stack.webhook.log_text()
    assert_up_to_date(stack.run())
