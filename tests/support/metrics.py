"""Reading the webhook's metrics in tests the way Prometheus reads them: a scrape of the registry, not
prometheus_client's private ``_value`` of a child."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from landb_webhook.metrics import PREFIX, Metrics


def counted(metrics: Metrics, name: str, **labels: str) -> float:
    """The sample ``landb_webhook_<name>`` with exactly these labels (``name`` as the ``Metrics`` field:
    ``refused_changes_total``); 0.0 when it is absent from the scrape, as a counter is until something is
    counted under these labels."""
    value = metrics.registry.get_sample_value(f"{PREFIX}_{name}", labels)
    return 0.0 if value is None else value


def exportable_series() -> set[str]:
    """Every series name ``serve``'s registry can export, labelled or not, process metrics included (a
    labelled family has no sample before its first child: its names are worked out from its type)."""
    registry = CollectorRegistry()
    Metrics.create(registry)
    names = set()
    for family in registry.collect():
        suffixes = {
            "counter": ("_total",),
            "info": ("_info",),
            "histogram": ("_bucket", "_sum", "_count"),
        }.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names
