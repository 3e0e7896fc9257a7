"""Orchestration: Records, AdjustEndpoints and ApplyChanges over the ports and the landb domain core."""

from landb_webhook.provider.interface import ApplyError, WebhookProvider

__all__ = ["ApplyError", "WebhookProvider"]
