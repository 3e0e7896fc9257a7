"""Reading the webhook's metrics in tests the way Prometheus reads them: a scrape of the registry, not
prometheus_client's private ``_value`` of a child."""

from __future__ import annotations

from landb_webhook.metrics import PREFIX, Metrics


def counted(metrics: Metrics, name: str, **labels: str) -> float:
    """The sample ``landb_webhook_<name>`` with exactly these labels (``name`` as the ``Metrics`` field:
    ``refused_changes_total``); 0.0 when it is absent from the scrape, as a counter is until something is
    counted under these labels."""
    value = metrics.registry.get_sample_value(f"{PREFIX}_{name}", labels)
    return 0.0 if value is None else value
