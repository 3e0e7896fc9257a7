"""deploy/prometheus-rules.yaml judged by Prometheus' promtool, and held to the series the webhook exports.

``promtool check rules`` parses every expression as Prometheus does; ``promtool test rules`` runs
tests/alerts/prometheus-rules.test.yaml, where each alert fires after its ``for:`` on the series the webhook
exports and has a case where it must not fire. The tests without promtool hold the rules to the metrics
(every series and label value they name is exported) and to kube-prometheus-stack's selection label.
tests/e2e/test_prometheus_scrape.py runs the same rules in a real Prometheus scraping ``serve``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from landb_webhook.landb.propagation import Alias, Answer, NoAnswer, NoName
from landb_webhook.metrics import PREFIX, Metrics
from landb_webhook.provider.watch.dns_watch import DnsWatch
from landb_webhook.provider.watch.publications import PublicationLog
from support.default_options import dns_watch_options
from support.metrics import exportable_series
from support.prometheus import RULES, PrometheusTools, promtool, rules, write_rule_file

REPO_ROOT = Path(__file__).resolve().parents[2]
RULE_TESTS = REPO_ROOT / "tests" / "alerts" / "prometheus-rules.test.yaml"
VALUES = REPO_ROOT / "deploy" / "helm" / "values.yaml"
START = 1_800_000_000.0
SERIES = re.compile(r"\b([a-z_]+)(?=\s*(?:\{|\[|\)|\s|$))")
MATCHER = re.compile(r"\b([a-z_]+)\{([^}]*)\}")
LABEL_MATCH = re.compile(r'(\w+)(=|!=)"([^"]*)"')


def fresh_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Metrics.create(registry, process_metrics=False)
    return registry


def test_every_series_an_alert_reads_is_one_the_webhook_exports() -> None:
    exported = exportable_series()
    read = {
        name for rule in rules() for name in SERIES.findall(rule["expr"]) if name.startswith(f"{PREFIX}_")
    }

    assert read and read - exported == set()


def test_every_label_value_an_alert_matches_on_is_one_the_webhook_exports_from_start_up() -> None:
    """``reason!="frozen_alias"``, ``state="conflict"``: a value the webhook never exports would leave an
    alert silent (or, after ``!=``, never leave anything out). Each is among the series at 0 from start-up."""
    registry = fresh_registry()
    values: dict[tuple[str, str], set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            for label, value in sample.labels.items():
                values.setdefault((sample.name, label), set()).add(value)
    matched = [
        (rule["alert"], series, label, value)
        for rule in rules()
        for series, selector in MATCHER.findall(rule["expr"])
        if series.startswith(f"{PREFIX}_")
        for label, _, value in LABEL_MATCH.findall(selector)
    ]

    assert matched
    assert [m for m in matched if m[3] not in values.get((m[1], m[2]), set())] == []


def test_every_counting_alert_also_reads_a_series_born_above_its_threshold() -> None:
    """increase() sees nothing of a series' first sample: a counter whose labelled series first appears
    at 1 never shows an increase. Each increase() rule needs the branch that catches a new series (the
    promtool cases show both branches firing)."""
    counting = [rule for rule in rules() if "increase(" in rule["expr"]]

    assert counting
    for rule in counting:
        [(counter, window, threshold)] = re.findall(r"increase\((\w+)\[(\w+)\]\)\s*>\s*(\d+)", rule["expr"])
        born_above = f"({counter} unless {counter} offset {window}) + 0 > {threshold}"
        assert f" or {born_above}" in " ".join(rule["expr"].split()), rule["alert"]


def test_the_rules_and_the_service_monitor_carry_the_release_label_kube_prometheus_stack_selects() -> None:
    """kube-prometheus-stack's Prometheus selects rules and ServiceMonitors by ``release: <its release>``
    (its *SelectorNilUsesHelmValues defaults): both files set the same label, to that stack's default."""
    rule_labels = yaml.safe_load(RULES.read_text())["metadata"]["labels"]
    monitor_labels = yaml.safe_load(VALUES.read_text())["serviceMonitor"]["additionalLabels"]

    assert rule_labels == monitor_labels == {"release": "kube-prometheus-stack"}


def test_the_dns_watcher_sets_the_gauges_the_dns_alerts_read_as_a_name_waits_and_conflicts() -> None:
    """The watcher's own gauges from names judged as they would be: the promtool cases take it from there
    (DnsPending above 1800 s, DnsConflict above 0, DnsResolverSilent on names in state unknown)."""
    metrics = Metrics.create(CollectorRegistry(), process_metrics=False)
    clock = [START]
    published = PublicationLog()
    answers: dict[str, Answer] = {}
    resolver = SimpleNamespace(where="test", resolve=lambda name: answers[name])
    watch = DnsWatch(
        published, resolver, dns_watch_options(recheck_period=60), metrics=metrics, clock=lambda: clock[0]
    )
    published.reported({}, START)
    published.written(["late.cern.ch", "taken.cern.ch"], START)
    published.reported({"late.cern.ch": ["10.0.0.1"], "taken.cern.ch": ["10.0.0.1"]}, START)
    answers.update({"late.cern.ch": NoName(), "taken.cern.ch": Alias("other.cern.ch.")})

    def gauges_at(seconds: float) -> tuple[float | None, ...]:
        clock[0] = START + seconds
        watch.step()
        sample = metrics.registry.get_sample_value
        states = [sample(f"{PREFIX}_dns_names", {"state": s}) for s in ("pending", "conflict", "unknown")]
        return (sample(f"{PREFIX}_dns_oldest_pending_seconds"), *states)

    assert gauges_at(60) == (60, 2, 0, 0)
    assert gauges_at(1800) == (1800, 2, 0, 0)
    assert gauges_at(1801) == (1801, 2, 0, 0)  # an age: no question needed
    assert gauges_at(1860) == (1860, 1, 1, 0)  # asked again past two syncs: a conflict
    answers.update({"late.cern.ch": NoAnswer("timed out"), "taken.cern.ch": NoAnswer("timed out")})
    assert gauges_at(1920) == (0, 0, 0, 2)  # no answer: unknown, and no name counts as pending


# -- promtool ------------------------------------------------------------------------------------------


def rule_tests() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RULE_TESTS.read_text())["tests"])


def test_promtool_check_rules_accepts_the_rule_file(
    prometheus_tools: PrometheusTools, tmp_path: Path
) -> None:
    rule_file = write_rule_file(tmp_path / "landb-webhook.rules.yaml")
    checked = promtool(prometheus_tools, "check", "rules", "--lint-fatal", str(rule_file), cwd=tmp_path)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout, checked.stdout


def test_the_rule_test_cases_make_every_alert_fire_and_each_has_a_case_where_it_must_not() -> None:
    """The coverage the promtool run below is worth: every alert of the rules file fires in some case, and
    in some case each evaluation of it expects nothing."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in rule_tests():
        by_alert: dict[str, list[bool]] = {}
        for check in case["alert_rule_test"]:
            by_alert.setdefault(check["alertname"], []).append(bool(check["exp_alerts"]))
        for alert, fired in by_alert.items():
            (firing if any(fired) else quiet).add(alert)
    alerts = {rule["alert"] for rule in rules()}

    assert len(alerts) == 16
    assert (firing, quiet) == (alerts, alerts)


def test_promtool_test_rules_passes_every_case(prometheus_tools: PrometheusTools, tmp_path: Path) -> None:
    """Each alert fires after its ``for:`` (and not a minute before) on the series the webhook exports,
    with its labels and rendered annotations, and stays quiet in its other case."""
    write_rule_file(tmp_path / "landb-webhook.rules.yaml")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    tested = promtool(prometheus_tools, "test", "rules", RULE_TESTS.name, cwd=tmp_path)

    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout, tested.stdout
