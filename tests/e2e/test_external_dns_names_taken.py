"""The real external-dns v0.22.0 and names the webhook sees but never writes.

A plain (CNAME) alias set by hand, and an alias in a frozen form (``landb-alias1``) on a node that is not
an ingress node: with either registry, external-dns leaves them alone and its loop settles ("All records
are already up to date"), instead of asking every loop for a change the webhook must refuse.
"""

from __future__ import annotations

import pytest
from e2e_support import DOMAIN, E2EStack
from test_external_dns import (
    APP_A,
    APP_B,
    assert_applied,
    assert_published_on,
    assert_up_to_date,
    converge,
    records_reply,
)

pytestmark = pytest.mark.e2e


def set_by_hand(stack: E2EStack, server_id: str, **keys: str) -> dict[str, str]:
    metadata = {**stack.state.metadata(server_id), **{k.replace("_", "-"): v for k, v in keys.items()}}
    stack.state.set_metadata_direct(server_id, metadata)
    return metadata


def worker_server_id(stack: E2EStack) -> str:
    ingress = set(stack.ingress_server_ids())
    return next(s.id for s in stack.state.servers() if s.id not in ingress)


@pytest.mark.parametrize("registry", ["txt", "noop"])
def test_a_hand_set_plain_alias_is_never_written_over_and_the_loop_settles(
    stack: E2EStack, registry: str
) -> None:
    stack.start_webhook(registry=registry)
    holder = stack.ingress_server_ids()[0]
    metadata = set_by_hand(stack, holder, landb_alias="app-a")
    stack.want(APP_A, APP_B)

    first = stack.run()
    assert_applied(first)
    sent = {name for kind in ("create", "updateNew", "delete") for name, _ in first.changed_names(kind)}
    assert f"app-a.{DOMAIN}" not in sent, first.describe()
    assert_up_to_date(stack.run())
    stack.want(APP_B)  # nobody asks for app-a: sync must not try to delete it either
    assert_up_to_date(stack.run())

    assert stack.state.metadata(holder)["landb-alias"].split(",")[0] == "app-a"
    assert {k: v for k, v in stack.state.metadata(holder).items() if k != "landb-alias"} == {
        k: v for k, v in metadata.items() if k != "landb-alias"
    }
    assert all("app-a" not in tokens for tokens in stack.aliases().values())
    assert_published_on(stack, {"app-b"}, stack.ingress_server_ids())
    reported = {(e["dnsName"], e["recordType"]) for e in records_reply(first)}
    assert ((f"app-a.{DOMAIN}", "CNAME") in reported) == (registry == "txt")


@pytest.mark.parametrize("registry", ["txt", "noop"])
def test_an_alias_frozen_on_a_worker_is_counted_as_a_carrier_and_the_loop_settles(
    stack: E2EStack, registry: str
) -> None:
    stack.start_webhook(registry=registry)
    stack.want(APP_A, APP_B)
    converge(stack)
    worker = worker_server_id(stack)
    set_by_hand(stack, worker, landb_alias1="app-a--load-7-")
    writes = stack.metadata_write_count()

    for _ in range(2):
        assert_up_to_date(stack.run())

    assert stack.metadata_write_count() == writes
    assert stack.aliases()[worker] == {"app-a": {7}}
    assert stack.webhook is not None
    said = [line for line in stack.webhook.log_text().splitlines() if "on a non-ingress node" in line]
    assert len(said) == 1, said


def test_a_name_a_worker_holds_frozen_is_withdrawn_once_and_then_left_to_its_owner(stack: E2EStack) -> None:
    stack.want(APP_A, APP_B)
    converge(stack)
    worker = worker_server_id(stack)
    set_by_hand(stack, worker, landb_alias1="app-a--load-7-")

    stack.want(APP_B)
    assert_applied(stack.run())
    assert_up_to_date(stack.run())

    assert {sid: tokens.get("app-a") for sid, tokens in stack.aliases().items() if "app-a" in tokens} == {
        worker: {7}
    }
    assert f"a-app-a.{DOMAIN}" not in stack.ownership_claims()
