"""The adapters' options as the service builds them from the default settings, for a test that builds an
adapter by hand: wiring turns ``Settings()`` into them, so a default stays written once, in config.Settings.
A test changes what it is about by name: ``watch_options(watch_timeout=1)``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from landb_webhook import wiring
from landb_webhook.adapters.openstack import OpenStackOptions
from landb_webhook.adapters.reflector import WatchOptions
from landb_webhook.adapters.retry import RetryPolicy
from landb_webhook.config import Settings, setting_default
from landb_webhook.provider.watch.dns_watch import DnsWatchOptions

UPSTREAM_TIMEOUT: float = setting_default("upstream_timeout")
"""Seconds one Kubernetes or OpenStack request may take by default (LANDB_UPSTREAM_TIMEOUT)."""


def watch_options(**changes: Any) -> WatchOptions:
    """How the node and ownership caches list and watch (wiring.watch_options)."""
    return replace(wiring.watch_options(Settings()), **changes)


def openstack_options(**changes: Any) -> OpenStackOptions:
    """How the OpenStack session times and retries its calls (wiring.openstack_options)."""
    return replace(wiring.openstack_options(Settings()), **changes)


def retry_policy(**changes: Any) -> RetryPolicy:
    """The OpenStack session's retries (``openstack_options().retry``)."""
    return replace(openstack_options().retry, **changes)


def dns_watch_options(**changes: Any) -> DnsWatchOptions:
    """How fast the DNS watcher asks, and when it calls an answer a conflict (wiring.dns_watch_options)."""
    return replace(wiring.dns_watch_options(Settings()), **changes)
