"""The metrics every instance exposes, in its own registry."""

from __future__ import annotations

from prometheus_client import generate_latest

from landb_webhook.metrics import Metrics


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
        ("landb_webhook_aliases_managed", "gauge"),
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
        for result in ("ok", "error", "auth_error"):
            labels = {"operation": operation, "result": result}
            assert registry.get_sample_value("landb_webhook_openstack_api_calls_total", labels) == 0
    for upstream in ("nova", "keystone", "kubernetes"):
        assert registry.get_sample_value("landb_webhook_upstream_errors_total", {"upstream": upstream}) == 0
