"""deploy/openstack-access-rules.json holds every OpenStack call the webhook makes: the access rules of the
application credential the README recommends (Keystone refuses the credential any other call). The
simulator records each request; a loop creating, moving and removing names on nodes and load balancers
sends nothing outside the rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_provider_loadbalancers import VIP_APP, ingress, lbs, service  # noqa: F401 (lbs: a fixture)

RULES = Path(__file__).resolve().parents[2] / "deploy" / "openstack-access-rules.json"
SERVICE_OF_API = {"nova": "compute", "octavia": "load-balancer", "neutron": "network"}
PREFIX_OF_SERVICE = {"compute": "/compute", "load-balancer": "/load-balancer", "network": "/network"}
"""Where the simulator serves each API; the service itself sees the path after it, as behind a proxy."""


def matches(rule_path: str, path: str) -> bool:
    """Keystone's access rule matching: ``*`` is one path segment, ``**`` any number of them."""
    rule, actual = rule_path.strip("/").split("/"), path.strip("/").split("/")
    if "**" in rule:
        at = rule.index("**")
        head, tail = rule[:at], rule[at + 1 :]
        return len(actual) >= len(head) + len(tail) and all(
            matches("/".join(r), "/".join(a))
            for r, a in ((head, actual[: len(head)]), (tail, actual[len(actual) - len(tail) :]))
        )
    return len(rule) == len(actual) and all(r in ("*", a) for r, a in zip(rule, actual, strict=True))


@pytest.mark.usefixtures("lbs")  # the project's load balancers
def test_every_openstack_call_of_a_loop_is_in_the_access_rules_and_every_rule_is_needed(
    make_cluster: Any,
) -> None:
    rules = [(rule["service"], rule["method"], rule["path"]) for rule in json.loads(RULES.read_text())]
    cluster = make_cluster()
    cluster.sim.state.reset_api_calls()
    for desired in (
        [service("app.cern.ch", VIP_APP), ingress("site.cern.ch")],  # a tag and an alias
        [ingress("site.cern.ch"), ingress("app.cern.ch")],  # moved from the load balancer to the nodes
        [service("app.cern.ch", VIP_APP)],  # back, and the nodes' last alias gone: its key deleted
    ):
        cluster.desired = desired
        cluster.loop()

    calls = {
        (
            SERVICE_OF_API[call.api],
            call.method,
            call.path.removeprefix(PREFIX_OF_SERVICE[SERVICE_OF_API[call.api]]),
        )
        for call in cluster.sim.state.api_calls()
        if call.api in SERVICE_OF_API
    }
    outside = [
        call
        for call in calls
        if not any(rule[:2] == call[:2] and matches(rule[2], call[2]) for rule in rules)
    ]
    unused = [rule for rule in rules if not any(rule[:2] == c[:2] and matches(rule[2], c[2]) for c in calls)]

    assert outside == []
    assert unused == []  # GET /v2.1/servers/* also covers a server read by its id (a providerID's)
    assert ("compute", "DELETE") in {call[:2] for call in calls}
