"""deploy/prometheus-rules.yaml alerts on series the webhook exports, and on a counter's first event."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from landb_webhook.landb.propagation import Alias, Answer, NoAnswer, NoName
from landb_webhook.metrics import PREFIX, Metrics
from landb_webhook.provider.dns_watch import DnsWatch, WatchOptions
from landb_webhook.provider.publications import PublicationLog

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus-rules.yaml"
DNS_ALERTS = ("LandbWebhookDnsPending", "LandbWebhookDnsConflict", "LandbWebhookDnsResolverSilent")
START = 1_800_000_000.0
SERIES = re.compile(r"\b([a-z_]+)(?=\s*(?:\{|\[|\)|\s|$))")


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


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


def _fires(expr: str, registry: CollectorRegistry) -> bool:
    """A ``metric{label="value"} > N`` rule, evaluated on the registry's current samples."""
    [(name, selector, threshold)] = re.findall(r"^(\w+)(?:\{([^}]*)\})?\s*>\s*(\d+)$", expr.strip())
    labels = dict(re.findall(r'(\w+)="([^"]*)"', selector))
    value = registry.get_sample_value(name, labels)
    assert value is not None, f"{name}{labels} is not exported"
    return value > float(threshold)


def test_the_dns_alerts_fire_on_a_name_pending_past_30_minutes_and_on_a_conflict() -> None:
    """The watcher's own gauges, from a name judged as it would be, against the rules' expressions."""
    by_name = {rule["alert"]: rule["expr"] for rule in rules()}
    metrics = Metrics.create(CollectorRegistry(), process_metrics=False)
    clock = [START]
    published = PublicationLog()
    answers: dict[str, Answer] = {}
    resolver = SimpleNamespace(where="test", resolve=lambda name: answers[name])
    watch = DnsWatch(
        published, resolver, WatchOptions(recheck_period=60), metrics=metrics, clock=lambda: clock[0]
    )
    published.reported({}, START)
    published.written(["late.cern.ch", "taken.cern.ch"], START)
    published.reported({"late.cern.ch": ["10.0.0.1"], "taken.cern.ch": ["10.0.0.1"]}, START)
    answers.update({"late.cern.ch": NoName(), "taken.cern.ch": Alias("other.cern.ch.")})

    def fired_at(seconds: float) -> set[str]:
        clock[0] = START + seconds
        watch.step()
        return {alert for alert in DNS_ALERTS if _fires(by_name[alert], metrics.registry)}

    assert fired_at(60) == set()
    assert fired_at(1800) == set()
    assert fired_at(1801) == {"LandbWebhookDnsPending"}  # an age: no question needed
    assert fired_at(1860) == {"LandbWebhookDnsPending", "LandbWebhookDnsConflict"}  # asked again: conflict
    answers.update({"late.cern.ch": NoAnswer("timed out"), "taken.cern.ch": NoAnswer("timed out")})
    assert fired_at(1920) == {"LandbWebhookDnsResolverSilent"}
