"""A Node deleted while its VM runs, with the real external-dns v0.22.0: ``kubectl delete node`` on a drained
node (no finalizer) takes it out of the API at once; the webhook, restarted in between, still cleans its
server of our tokens, and the run after that writes nothing."""

from __future__ import annotations

import json

import pytest
from e2e_support import OWNERSHIP_NAMESPACE, E2EStack, endpoint_json
from test_external_dns import assert_applied, assert_published_on, assert_up_to_date, converge

pytestmark = pytest.mark.e2e

DESIRED = (
    endpoint_json("app-a.cern.ch", "A", "192.0.2.10"),
    endpoint_json("app-b.cern.ch", "CNAME", "lb.example.org"),
)
PUBLISHED = {"app-a", "app-b"}
STATE = "landb-webhook-ownership-state"


def remembered(stack: E2EStack) -> set[str]:
    configmap = stack.state.configmap(OWNERSHIP_NAMESPACE, STATE)
    return set(json.loads(configmap["data"]["carrying-servers"])) if configmap else set()


def test_a_deleted_nodes_server_is_cleaned_across_a_restart(stack: E2EStack) -> None:
    stack.want(*DESIRED)
    converge(stack)
    gone, *staying = stack.ingress_server_ids()
    foreign = {k: v for k, v in stack.all_metadata()[gone].items() if not k.startswith("landb-alias")}
    assert remembered(stack) == {gone, *staying}

    stack.state.delete_node(stack.node_name_of(gone))
    stack.restart_webhook()
    stack.wait_until_webhook_targets(stack.ips_of(staying))

    assert_applied(stack.run())  # Records still shows the departed server: external-dns asks to move off it
    assert stack.aliases()[gone] == {}
    assert stack.all_metadata()[gone] == foreign
    assert_published_on(stack, PUBLISHED, staying)
    assert remembered(stack) == set(staying)
    assert_up_to_date(stack.run())
