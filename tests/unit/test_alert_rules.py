"""deploy/prometheus-rules.yaml alerts on series the webhook exports, and on a counter's first event."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from landb_webhook.metrics import PREFIX, Metrics

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus-rules.yaml"
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
