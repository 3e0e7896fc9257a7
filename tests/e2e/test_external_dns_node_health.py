"""Node health with the real external-dns v0.22.0: an ingress node that stays NotReady past its grace
period hands its aliases over, and the run after that writes nothing.

The webhook runs with the default grace period (300 s); the test moves the node's Ready condition
lastTransitionTime into the past rather than waiting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from e2e_support import MEDIA_TYPE, E2EStack, endpoint_json, http_get
from test_external_dns import assert_applied, assert_published_on, assert_up_to_date, converge

from landb_webhook.config import Settings
from support.waiting import eventually

pytestmark = pytest.mark.e2e

DESIRED = (
    endpoint_json("app-a.cern.ch", "A", "192.0.2.10"),
    endpoint_json("app-b.cern.ch", "CNAME", "lb.example.org"),
)
PUBLISHED = {"app-a", "app-b"}
GRACE = timedelta(seconds=float(Settings.model_fields["node_grace_period"].default))


def wait_until_unhealthy_nodes(stack: E2EStack, state: str, count: int, timeout: float = 10.0) -> None:
    """Wait until the webhook, asked for its records, counts ``count`` ingress nodes in ``state``."""
    assert stack.webhook is not None
    wanted = f'landb_webhook_ingress_nodes_unhealthy{{state="{state}"}} {float(count)}'
    webhook = stack.webhook

    def reported() -> bool:
        http_get(webhook.api_port, "/records", {"Accept": MEDIA_TYPE})
        _, _, body = http_get(webhook.health_port, "/metrics")
        return wanted in body.decode()

    eventually(reported, what=f"the webhook to report {wanted!r}", timeout=timeout, every=0.1)


def test_a_node_not_ready_past_its_grace_period_loses_its_aliases_and_regains_them_when_back(
    stack: E2EStack,
) -> None:
    stack.want(*DESIRED)
    converge(stack)
    sick, *staying = stack.ingress_server_ids()
    name = stack.node_name_of(sick)
    before = stack.all_metadata()

    # NotReady just now (a kubelet restart, say): within the grace period nothing moves.
    stack.state.set_node_ready(name, False, status="Unknown")
    wait_until_unhealthy_nodes(stack, "grace", 1)
    writes = stack.metadata_write_count()
    assert_up_to_date(stack.run())
    assert stack.metadata_write_count() == writes

    # NotReady for longer than the grace period: its aliases go, the others' stay as they were.
    stack.state.set_node_ready(name, False, status="Unknown", since=datetime.now(UTC) - 2 * GRACE)
    stack.wait_until_webhook_targets(stack.ips_of(staying))
    assert_applied(stack.run())
    assert_published_on(stack, PUBLISHED, staying)
    assert stack.aliases()[sick] == {}
    assert stack.written_servers_since(writes) == {sick}
    assert_up_to_date(stack.run())

    # Ready again: it takes its aliases back, with the indices it had.
    stack.state.set_node_ready(name, True)
    stack.wait_until_webhook_targets(stack.ips_of([sick, *staying]))
    assert_applied(stack.run())
    assert stack.all_metadata() == before
    assert_up_to_date(stack.run())
