"""deploy/prometheus-rules.yaml alerts on series the webhook exports, and on a counter's first event;
Prometheus Operator setups built by kube-prometheus-stack select the rules and the chart's ServiceMonitor."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client import CollectorRegistry

from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.propagation import Alias, Answer, NoAnswer, NoName
from landb_webhook.metrics import DROP_REASONS, PREFIX, Metrics
from landb_webhook.provider.context import Context
from landb_webhook.provider.options import ProviderOptions
from landb_webhook.provider.watch.dns_watch import DnsWatch, DnsWatchOptions
from landb_webhook.provider.watch.publications import PublicationLog
from support.alert_rules import RULES, counter_samples, expression, fires, firing_groups, rules

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "values.yaml"
DNS_ALERTS = ("LandbWebhookDnsPending", "LandbWebhookDnsConflict", "LandbWebhookDnsResolverSilent")
START = 1_800_000_000.0
SERIES = re.compile(r"\b([a-z_]+)(?=\s*(?:\{|\[|\)|\s|$))")


def exported_series() -> set[str]:
    """Every series name the webhook's registry can export, labelled or not."""
    registry = CollectorRegistry()
    Metrics.create(registry, process_metrics=False)
    names = set()
    for family in registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(
            family.type, ("",)
        )
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_every_series_an_alert_reads_is_one_the_webhook_exports() -> None:
    exported = exported_series()
    read = {
        name for rule in rules() for name in SERIES.findall(rule["expr"]) if name.startswith(f"{PREFIX}_")
    }

    assert read and read - exported == set()


def test_a_counter_alert_also_fires_on_a_series_born_above_its_threshold() -> None:
    """increase() sees nothing of a series' first sample: a counter whose labelled series first appears
    at 1 never shows an increase. Each increase() rule needs the branch that catches a new series."""
    counting = [rule for rule in rules() if "increase(" in rule["expr"]]

    assert counting
    for rule in counting:
        [(counter, window, threshold)] = re.findall(r"increase\((\w+)\[(\w+)\]\)\s*>\s*(\d+)", rule["expr"])
        born_above = f"({counter} unless {counter} offset {window}) + 0 > {threshold}"
        assert f" or {born_above}" in " ".join(rule["expr"].split()), rule["alert"]


def test_the_dns_alerts_fire_on_a_name_pending_past_30_minutes_and_on_a_conflict() -> None:
    """The watcher's own gauges, from a name judged as it would be, against the rules' expressions."""
    by_name = {rule["alert"]: rule["expr"] for rule in rules()}
    metrics = Metrics.create(CollectorRegistry(), process_metrics=False)
    clock = [START]
    published = PublicationLog()
    answers: dict[str, Answer] = {}
    resolver = SimpleNamespace(where="test", resolve=lambda name: answers[name])
    watch = DnsWatch(
        published, resolver, DnsWatchOptions(recheck_period=60), metrics=metrics, clock=lambda: clock[0]
    )
    published.reported({}, START)
    published.written(["late.cern.ch", "taken.cern.ch"], START)
    published.reported({"late.cern.ch": ["10.0.0.1"], "taken.cern.ch": ["10.0.0.1"]}, START)
    answers.update({"late.cern.ch": NoName(), "taken.cern.ch": Alias("other.cern.ch.")})

    def fired_at(seconds: float) -> set[str]:
        clock[0] = START + seconds
        watch.step()
        return {alert for alert in DNS_ALERTS if fires(by_name[alert], metrics.registry)}

    assert fired_at(60) == set()
    assert fired_at(1800) == set()
    assert fired_at(1801) == {"LandbWebhookDnsPending"}  # an age: no question needed
    assert fired_at(1860) == {"LandbWebhookDnsPending", "LandbWebhookDnsConflict"}  # asked again: conflict
    answers.update({"late.cern.ch": NoAnswer("timed out"), "taken.cern.ch": NoAnswer("timed out")})
    assert fired_at(1920) == {"LandbWebhookDnsResolverSilent"}


def test_the_rules_and_the_service_monitor_carry_the_release_label_kube_prometheus_stack_selects() -> None:
    """kube-prometheus-stack's Prometheus selects rules and ServiceMonitors by ``release: <its release>``
    (its *SelectorNilUsesHelmValues defaults): both files set the same label, to that stack's default."""
    rule_labels = yaml.safe_load(RULES.read_text())["metadata"]["labels"]
    monitor_labels = yaml.safe_load(VALUES.read_text())["serviceMonitor"]["additionalLabels"]

    assert rule_labels == monitor_labels == {"release": "kube-prometheus-stack"}


@pytest.mark.parametrize(("ingress_nodes", "fired"), [(0, True), (1, False), (3, False)])
def test_the_no_ingress_node_alert_fires_when_no_node_matches_the_selector(
    ingress_nodes: int, fired: bool
) -> None:
    """Its ``for`` lets a Records or two pass after a restart (the gauge reads 0 until the first)."""
    metrics = Metrics.create(CollectorRegistry(), process_metrics=False)
    metrics.ingress_nodes.set(ingress_nodes)
    [rule] = [rule for rule in rules() if rule["alert"] == "LandbWebhookNoIngressNode"]

    assert fires(rule["expr"], metrics.registry) is fired
    assert rule["for"] == "10m"


def test_the_dropped_endpoints_alert_names_each_reason_a_name_is_never_published_for() -> None:
    """A mistyped host is dropped by AdjustEndpoints in every loop: the rate stays above 0 by reason.
    A name held only in a frozen form (registry noop) is dropped but published, so it is no alarm."""
    metrics = Metrics.create(CollectorRegistry(), process_metrics=False)
    context = Context(ProviderOptions(), metrics)
    series = f"{PREFIX}_dropped_endpoints_total"
    before = counter_samples(metrics.registry, series)
    for host in ("app.example.org", "my_app.cern.ch", "a.b.cern.ch", "ok.cern.ch"):
        context.alias_label(Endpoint(host, "A", ("192.0.2.1",)))
    context.drop(Endpoint("frozen.cern.ch", "A", ("192.0.2.1",)), "held frozen", "frozen_alias")
    after = counter_samples(metrics.registry, series)

    alert = expression("LandbWebhookEndpointsDropped")
    assert firing_groups(alert, before, after) == {"other_zone", "invalid_characters", "multi_label"}
    assert firing_groups(alert, after, after) == set()
    assert 'reason!="frozen_alias"' in alert and "frozen_alias" in DROP_REASONS  # a reason that exists
