"""deploy/grafana/landb-webhook.json is a dashboard Grafana loads as it is, on the webhook's own series, and
its ConfigMap carries it unchanged. tests/e2e/test_prometheus_scrape.py runs every query against a real
Prometheus scraping ``serve``: each returns data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from support.grafana import DASHBOARD, dashboard, panels, queries, variables
from support.metrics import exportable_series

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGMAP = REPO_ROOT / "deploy" / "grafana" / "landb-webhook-dashboard.yaml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SELECTED = 'namespace="$namespace", pod=~"$pod"'
ROWS = ("Names", "Applies", "Upstream", "Webhook", "Events", "Writer Lease")
SERIES = re.compile(r"\b((?:landb_webhook|process)_[a-z_]+)\b")


def test_it_is_a_dashboard_of_a_recent_schema_with_unique_panel_ids_and_a_unique_uid() -> None:
    ids = [panel["id"] for panel in panels()]

    assert dashboard()["schemaVersion"] >= 39  # Grafana 11 and later
    assert dashboard()["uid"] == "landb-webhook"
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)


def test_its_data_source_is_a_variable_every_panel_and_query_uses() -> None:
    """No data source uid of ours is baked in: Grafana offers its Prometheus data sources to pick from."""
    datasource = variables()["datasource"]
    not_using = [
        panel["title"]
        for panel in panels()
        if panel["type"] != "row"
        and {json.dumps(d) for d in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]}
        != {json.dumps(DATASOURCE)}
    ]

    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    assert not_using == []


def test_it_is_templated_by_namespace_and_pod_and_every_query_selects_by_them() -> None:
    """The Writer Lease's sum is over the namespace: every replica, whichever pods are picked."""
    namespace, pod = variables()["namespace"], variables()["pod"]
    unselected = [
        title
        for title, expr in queries()
        if SELECTED not in expr and 'landb_webhook_writer_lease_held{namespace="$namespace"}' not in expr
    ]

    assert namespace["datasource"] == pod["datasource"] == DATASOURCE
    assert "$namespace" in pod["definition"]
    assert unselected == []


def test_its_rows_are_names_applies_upstream_webhook_events_and_the_writer_lease() -> None:
    rows = [panel["title"] for panel in panels() if panel["type"] == "row"]

    assert [next(r for r in rows if r.startswith(prefix)) for prefix in ROWS] == rows


def test_every_series_a_panel_reads_is_one_the_webhook_exports() -> None:
    """The names only: the e2e test runs the queries, label values and all."""
    read = {name for _, expr in queries() for name in SERIES.findall(expr)}

    assert len(queries()) >= 20
    assert read - exportable_series() == set()


def test_the_configmap_carries_the_json_unchanged_with_the_label_grafana_loads() -> None:
    """Regenerate it with ``make grafana-dashboard`` after editing the JSON."""
    configmap = yaml.safe_load(CONFIGMAP.read_text())

    assert (configmap["kind"], configmap["metadata"]["labels"]) == ("ConfigMap", {"grafana_dashboard": "1"})
    assert configmap["data"] == {"landb-webhook.json": DASHBOARD.read_text()}
