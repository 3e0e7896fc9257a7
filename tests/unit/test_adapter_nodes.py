"""How a Kubernetes Node object becomes a backends.Node: providerID, InternalIPs, ingress role."""

from __future__ import annotations

from typing import Any

import pytest

from landb_webhook.adapters.kubernetes import (
    NodeClassifier,
    internal_ipv4_addresses,
    server_id_from_provider_id,
)
from landb_webhook.backends import Node
from landb_webhook.selector import InvalidSelector

UUID = "3f1c2a9e-6b7d-4e21-9a0c-5d8f7e6b4a21"
EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        (f"openstack:///{UUID}", UUID),
        (f"openstack://cern/{UUID}", UUID),
        (f"openstack://{UUID}", None),  # the UUID in the region slot: no server part
        (f"openstack:////{UUID}", None),
        (f"openstack://cern/extra/{UUID}", None),
        (f"aws:///eu-west-1a/{UUID}", None),
        (f"gce://project/zone/{UUID}", None),
        ("openstack:///not-a-uuid", None),
        (f"openstack:///{UUID}/", None),
        ("", None),
        (None, None),
    ],
)
def test_server_id_comes_only_from_an_openstack_provider_id(
    provider_id: str | None, expected: str | None
) -> None:
    assert server_id_from_provider_id(provider_id) == expected


def test_internal_ips_are_ipv4_internal_ones_sorted_numerically() -> None:
    addresses = [
        {"type": "InternalIP", "address": "188.184.10.2"},
        {"type": "InternalIP", "address": "2001:1458:d00::1"},
        {"type": "ExternalIP", "address": "137.138.1.1"},
        {"type": "Hostname", "address": "node-0"},
        {"type": "InternalIP", "address": "188.184.9.200"},
        {"type": "InternalIP", "address": "not-an-ip"},
        {"type": "InternalIP", "address": "188.184.10.2"},
    ]
    assert internal_ipv4_addresses(addresses) == ("188.184.9.200", "188.184.10.2")


def _node(name: str, labels: dict[str, str], provider_id: str | None = None) -> dict[str, Any]:
    spec = {"providerID": provider_id} if provider_id else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_node_object_becomes_a_port_node() -> None:
    classifier = NodeClassifier("role=ingress", EXCLUDE)
    node = classifier.node(_node("k8s-node-0", {"role": "ingress"}, f"openstack:///{UUID}"))
    assert node == Node(name="k8s-node-0", server_id=UUID, internal_ips=("10.0.0.1",), is_ingress=True)


def test_the_exclude_label_wins_over_the_selector_whatever_its_value() -> None:
    classifier = NodeClassifier("role=ingress", EXCLUDE)
    assert not classifier.node(_node("a", {"role": "ingress", EXCLUDE: ""})).is_ingress
    assert not classifier.node(_node("b", {"role": "ingress", EXCLUDE: "false"})).is_ingress
    assert not classifier.node(_node("c", {"role": "worker"})).is_ingress


def test_no_exclude_label_configured_means_no_exclusion() -> None:
    assert NodeClassifier("role=ingress", "").node(_node("a", {"role": "ingress", EXCLUDE: ""})).is_ingress


def test_a_node_without_labels_status_or_spec_is_still_a_node() -> None:
    node = NodeClassifier("role=ingress", EXCLUDE).node({"metadata": {"name": "bare"}})
    # No Ready condition is not Ready: the node lifecycle controller treats it as Unknown too.
    assert node == Node(name="bare", server_id=None, internal_ips=(), is_ingress=False, ready=False)


def test_a_malformed_selector_fails_at_construction() -> None:
    with pytest.raises(InvalidSelector):
        NodeClassifier("role in (ingress", EXCLUDE)


def _with_health(
    ready: str | None,
    transition: str | None = "2026-11-23T10:00:00Z",
    deletion: str | None = None,
    unschedulable: object = None,
) -> dict[str, Any]:
    obj = _node("n", {"role": "ingress"})
    if ready is not None:
        obj["status"]["conditions"] = [
            {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": "Ready", "status": ready, "lastTransitionTime": transition},
        ]
    if deletion is not None:
        obj["metadata"]["deletionTimestamp"] = deletion
    if unschedulable is not None:
        obj["spec"]["unschedulable"] = unschedulable
    return obj


TEN_O_CLOCK = 1_795_428_000.0  # 2026-11-23T10:00:00Z


@pytest.mark.parametrize(("status", "ready"), [("True", True), ("False", False), ("Unknown", False)])
def test_only_a_ready_condition_that_is_true_makes_a_node_ready(status: str, ready: bool) -> None:
    node = NodeClassifier("role=ingress", EXCLUDE).node(_with_health(status))
    assert node.ready is ready
    assert node.ready_changed_at == TEN_O_CLOCK


@pytest.mark.parametrize("transition", [None, "", "yesterday", "2026-11-23T10:00:00"])
def test_an_unreadable_transition_time_is_unknown_not_an_error(transition: str | None) -> None:
    node = NodeClassifier("role=ingress", EXCLUDE).node(_with_health("False", transition))
    assert not node.ready
    assert node.ready_changed_at is None


def test_a_deletion_timestamp_marks_the_node_as_being_deleted_since_then() -> None:
    node = NodeClassifier("role=ingress", EXCLUDE).node(_with_health("True", deletion="2026-11-23T10:00:00Z"))
    assert node.deleting
    assert node.deleting_since == TEN_O_CLOCK
    assert not NodeClassifier("role=ingress", EXCLUDE).node(_with_health("True")).deleting


@pytest.mark.parametrize(
    ("value", "cordoned"), [(True, True), (False, False), (None, False), ("true", False)]
)
def test_spec_unschedulable_is_a_cordon_only_when_it_is_true(value: object, cordoned: bool) -> None:
    node = NodeClassifier("role=ingress", EXCLUDE).node(_with_health("True", unschedulable=value))
    assert node.unschedulable is cordoned
