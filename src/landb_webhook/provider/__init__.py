"""Orchestration: Records, AdjustEndpoints and ApplyChanges over the backends and the landb core.

``facade.LandbProvider`` is the provider the HTTP layer calls; ``records`` answers Records and
AdjustEndpoints, ``apply`` runs ApplyChanges in numbered steps (the apply ordering), ``claims`` is the
ownership gate, ``removals`` the removal guard.
"""

from landb_webhook.provider.facade import LandbProvider
from landb_webhook.provider.interface import ApplyError, WebhookProvider
from landb_webhook.provider.options import ProviderOptions, RemovalGuard

__all__ = ["ApplyError", "LandbProvider", "ProviderOptions", "RemovalGuard", "WebhookProvider"]
