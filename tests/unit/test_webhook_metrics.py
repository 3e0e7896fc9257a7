"""The metrics every instance exposes, in its own registry."""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client import generate_latest

import landb_webhook
from landb_webhook.metrics import DROP_REASONS, REFUSAL_REASONS, Metrics
from landb_webhook.provider.refusals import KINDS

SOURCE = Path(landb_webhook.__file__).parent


def test_two_instances_do_not_share_series() -> None:
    first, second = Metrics.create(), Metrics.create()  # a shared registry would refuse the second

    first.requests_total.labels(route="records", code="200").inc()

    assert (
        first.registry.get_sample_value("landb_webhook_requests_total", {"route": "records", "code": "200"})
        == 1
    )
    assert (
        second.registry.get_sample_value("landb_webhook_requests_total", {"route": "records", "code": "200"})
        is None
    )


def test_exposition_names_every_project_metric() -> None:
    exposition = generate_latest(Metrics.create(process_metrics=False).registry).decode()

    for name, kind in [
        ("landb_webhook_requests_total", "counter"),
        ("landb_webhook_request_duration_seconds", "histogram"),
        ("landb_webhook_upstream_errors_total", "counter"),
        ("landb_webhook_metadata_writes_total", "counter"),
        ("landb_webhook_refused_changes_total", "counter"),
        ("landb_webhook_dropped_endpoints_total", "counter"),
        ("landb_webhook_aliases_published", "gauge"),
        ("landb_webhook_names_needing_attention", "gauge"),
        ("landb_webhook_nodes_without_server", "gauge"),
        ("landb_webhook_writer_lease_held", "gauge"),
        ("landb_webhook_node_cache_age_seconds", "gauge"),
        ("landb_webhook_ingress_nodes", "gauge"),
        ("landb_webhook_last_apply_success_timestamp_seconds", "gauge"),
        ("landb_webhook_last_successful_sync_timestamp_seconds", "gauge"),
        ("landb_webhook_openstack_api_calls_total", "counter"),
        ("landb_webhook_openstack_api_call_duration_seconds", "histogram"),
    ]:
        assert f"# TYPE {name} {kind}" in exposition
    assert 'landb_webhook_build_info{version="' in exposition


def test_metadata_write_series_exist_before_the_first_write() -> None:
    registry = Metrics.create(process_metrics=False).registry

    for operation in ("post", "delete"):
        for result in ("ok", "error", "dry_run"):
            labels = {"operation": operation, "result": result}
            assert registry.get_sample_value("landb_webhook_metadata_writes_total", labels) == 0


def test_process_metrics_are_included_by_default() -> None:
    exposition = generate_latest(Metrics.create().registry).decode()

    assert "process_resident_memory_bytes" in exposition
    assert "python_info" in exposition


def test_openstack_call_and_upstream_error_series_exist_before_the_first_call() -> None:
    registry = Metrics.create(process_metrics=False).registry

    for operation in ("list_servers", "get_server", "set_metadata", "delete_metadata", "get_limits"):
        for result in ("ok", "error", "keystone_unreachable", "auth_refused"):
            labels = {"operation": operation, "result": result}
            assert registry.get_sample_value("landb_webhook_openstack_api_calls_total", labels) == 0
    for upstream in ("nova", "keystone", "kubernetes"):
        assert registry.get_sample_value("landb_webhook_upstream_errors_total", {"upstream": upstream}) == 0


def test_counters_have_no_created_twin() -> None:
    exposition = generate_latest(Metrics.create(process_metrics=False).registry).decode()

    assert "_created" not in exposition


def test_every_refusal_drop_and_ownership_series_exists_at_zero_from_start_up() -> None:
    """So that increase() sees the first refusal after a restart (a series born at 1 has no increase)."""
    registry = Metrics.create(process_metrics=False).registry

    for reason in REFUSAL_REASONS:
        assert registry.get_sample_value("landb_webhook_refused_changes_total", {"reason": reason}) == 0
    for reason in DROP_REASONS:
        assert registry.get_sample_value("landb_webhook_dropped_endpoints_total", {"reason": reason}) == 0
    for ownership in ("owned", "unowned"):
        assert registry.get_sample_value("landb_webhook_aliases_published", {"ownership": ownership}) == 0


def _constant(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


KIND_ARGUMENT = {"drop": 2, "InvalidName": 1}
"""Where the drop reason is among the arguments of the calls that carry one."""


def reasons_in_source() -> tuple[set[str], set[str]]:
    """The refusal kinds the code refuses with (literals given to ``Refusal`` and ``Refusals.refuse``, second
    argument, and to provider.refusals' ``count``) and the drop reasons it can count (literals passed to
    the counter, to ``Context.drop`` and to landb's ``InvalidName``)."""
    refused, dropped = set(), set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            keywords = {k.arg: _constant(k.value) for k in node.keywords}
            if name == "labels" and isinstance(function, ast.Attribute):
                counter = getattr(function.value, "attr", "")
                if counter == "refused_changes_total" and keywords.get("reason"):
                    refused.add(str(keywords["reason"]))
                elif counter == "dropped_endpoints_total" and keywords.get("reason"):
                    dropped.add(str(keywords["reason"]))
            elif name in KIND_ARGUMENT and len(node.args) > KIND_ARGUMENT[name]:
                if kind := _constant(node.args[KIND_ARGUMENT[name]]):
                    dropped.add(kind)
            elif name in ("Refusal", "refuse") and len(node.args) > 1:
                if kind := _constant(node.args[1]):
                    refused.add(kind)
            elif name == "count" and len(node.args) > 1 and isinstance(node.args[1], ast.List):
                refused.update(kind for element in node.args[1].elts if (kind := _constant(element)))
    return refused, dropped


def test_every_reason_the_code_counts_is_known_at_start_up() -> None:
    """Every kind refused with has its row in provider.refusals.KINDS, and every reason a row counts as
    exists at zero from start-up."""
    refused, dropped = reasons_in_source()

    assert {"not_owned", "removal_guard", "frozen", "capacity", "writer_lease_lost"} <= refused  # seen
    assert {"record_type", "wildcard"} <= dropped
    assert refused <= KINDS.keys(), "add the new kind to provider.refusals.KINDS"
    counted = {kind.counted_as for kind in KINDS.values() if kind.counted_as is not None}
    assert counted <= set(REFUSAL_REASONS), "add the new reason to metrics.REFUSAL_REASONS"
    assert dropped <= set(DROP_REASONS), "add the new reason to metrics.DROP_REASONS"


def test_build_info_names_the_version() -> None:
    registry = Metrics.create(process_metrics=False).registry

    assert registry.get_sample_value("landb_webhook_build_info", {"version": landb_webhook.__version__}) == 1
