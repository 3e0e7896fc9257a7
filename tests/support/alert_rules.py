"""deploy/prometheus-rules.yaml read, and the shapes of expression its rules use evaluated on a registry.

Two shapes, as Prometheus evaluates them (without a Prometheus here):
- ``metric{label="value"} > N`` (or ``== N``): the registry's current sample;
- ``sum by (label) (rate(counter{label!="value"}[window])) > N``: the counter's increase between two
  snapshots of the registry, grouped by the label; the groups whose rate is above N fire.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus-rules.yaml"

Samples = dict[tuple[tuple[str, str], ...], float]
"""A counter's samples: its sorted labels -> value."""

_COMPARISONS: dict[str, Callable[[float, float], bool]] = {">": operator.gt, "==": operator.eq}
_INSTANT = re.compile(r"^(\w+)(?:\{([^}]*)\})?\s*(>|==)\s*(\d+)$")
_GROUPED_RATE = re.compile(r"^sum by \((\w+)\) \(rate\((\w+)(?:\{([^}]*)\})?\[\w+\]\)\)\s*>\s*(\d+)$")
_MATCHER = re.compile(r'(\w+)(=|!=)"([^"]*)"')


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def expression(alert: str) -> str:
    [expr] = [rule["expr"] for rule in rules() if rule["alert"] == alert]
    return " ".join(str(expr).split())


def fires_now(alert: str, registry: CollectorRegistry) -> bool:
    """An instant ``metric{...} > N`` or ``== N`` rule on the registry's current sample."""
    return fires(expression(alert), registry)


def fires(expr: str, registry: CollectorRegistry) -> bool:
    [(name, selector, comparison, threshold)] = _INSTANT.findall(expr.strip())
    labels = dict(re.findall(r'(\w+)="([^"]*)"', selector))
    value = registry.get_sample_value(name, labels)
    assert value is not None, f"{name}{labels} is not exported"
    return _COMPARISONS[comparison](value, float(threshold))


def counter_samples(registry: CollectorRegistry, name: str) -> Samples:
    """Every sample of the counter ``name`` (with its ``_total``), by its labels."""
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def firing_groups(expr: str, before: Samples, after: Samples) -> set[str]:
    """The values of the ``sum by (label)`` of a grouped rate rule that fire, the counter having gone from
    ``before`` to ``after`` within the window (a series new in ``after`` counts from 0)."""
    [(by, _, selector, threshold)] = _GROUPED_RATE.findall(expr.strip())
    matchers = _MATCHER.findall(selector)
    increase: dict[str, float] = {}
    for labels, value in after.items():
        found = dict(labels)
        if all((found.get(key, "") == wanted) == (op == "=") for key, op, wanted in matchers):
            group = found.get(by, "")
            increase[group] = increase.get(group, 0.0) + value - before.get(labels, 0.0)
    return {group for group, rise in increase.items() if rise > float(threshold)}
