"""What another distribution may rely on: serving the webhook on sockets it has bound, the program's name
and exit codes, and the refusal of ``LANDB_*`` variables that set nothing, with the settings and the
logging set-up these take.

The simulator (packages/simulator, a distribution of its own) runs the webhook inside its ``demo`` through
this module, and its command refuses a misspelled setting in the words and with the code ``landb-webhook``
uses. Besides this module it uses only the webhook protocol (``endpoint``, ``webhook.wire``) and the label
selector parser (``selector``): the import contract ``simulator-through-embedding`` in pyproject.toml holds
it to that. Everything else in the package may change without it; a name here changes with its users.
"""

from __future__ import annotations

import asyncio
import gc
import math
import socket
from typing import Protocol

import landb_webhook
from landb_webhook.config import (
    ENV_PREFIX,
    PROG,
    SettingError,
    Settings,
    describe_unknown_variables,
    unknown_variables,
)
from landb_webhook.logs import configure_logging, get_logger
from landb_webhook.metrics import Metrics
from landb_webhook.webhook.api import create_api_app, create_health_app
from landb_webhook.webhook.server import HEALTH_LIMITS, HttpServers, api_limits, listener_url

__all__ = [
    "ENV_PREFIX",
    "EXIT_CANNOT_START",
    "EXIT_INVALID_SETTINGS",
    "EXIT_NEEDS_A_HUMAN",
    "EXIT_READER_LEFT",
    "PROG",
    "Settings",
    "configure_logging",
    "describe_unknown_variables",
    "freeze_startup_objects",
    "run_webhook",
    "unknown_variables",
]

EXIT_INVALID_SETTINGS = 2
EXIT_CANNOT_START = 1
EXIT_NEEDS_A_HUMAN = 3
"""``status``: the cluster and the cloud were read, and something in them needs a human."""
EXIT_READER_LEFT = 128 + 13
"""The shell's code for a process ended by SIGPIPE: what ``cat`` gives when ``head`` has stopped reading."""

_log = get_logger(__name__)


class _Closeable(Protocol):
    def close(self) -> None: ...


def freeze_startup_objects() -> None:
    """Leave what start-up built out of every later garbage collection (``gc.freeze``).

    The clients' modules, pydantic schemas, caches and the provider are some 200,000 objects that live
    as long as the process; every full collection walked them all, 100-170 ms of CPU inside whichever
    webhook call it fell in. Objects made afterwards are collected exactly as before.
    """
    gc.collect()
    gc.freeze()


def run_webhook(settings: Settings, api_listener: socket.socket, health_listener: socket.socket) -> int:
    """Serve the webhook on already-bound sockets with the provider ``landb_webhook.wiring`` builds."""
    from landb_webhook.wiring import ask_openstack_once, build_provider, start_dns_watch  # noqa: PLC0415

    metrics = Metrics.create()
    try:
        provider, adapters = build_provider(settings, metrics)
    except SettingError:
        api_listener.close()
        health_listener.close()
        raise
    except Exception as error:
        # Usually configuration (no kubeconfig, unknown cloud): say what, without a traceback...
        _log.error("cannot start: building the provider failed", error=f"{type(error).__name__}: {error}")
        _log.debug("traceback", exc_info=True)  # ...unless asked for with --log-level debug.
        api_listener.close()
        health_listener.close()
        return EXIT_CANNOT_START
    closeable: _Closeable = adapters
    ask_openstack_once(adapters)
    start_dns_watch(settings, adapters, metrics)
    try:
        api_app = create_api_app(
            provider,
            metrics,
            request_timeout=settings.request_timeout,
            max_body_bytes=settings.max_request_body,
            max_endpoints=settings.max_request_endpoints,
            allowed_hosts=settings.api_allowed_hosts,
        )
        # /healthz judges the progress of the API's provider calls (webhook.liveness).
        health_app = create_health_app(provider, metrics, progress=api_app.state.provider_calls.progress)
        servers = HttpServers(
            [
                (api_app, api_listener, api_limits(settings.api_max_connections)),
                (health_app, health_listener, HEALTH_LIMITS),
            ],
            graceful_timeout=math.ceil(settings.request_timeout) + 2,
        )
        freeze_startup_objects()
        _log.info(
            "serving",
            api=listener_url(api_listener),
            health=listener_url(health_listener),
            version=landb_webhook.__version__,
            settings=settings.model_dump(mode="json"),
        )
        asyncio.run(servers.serve())
        _log.info("stopped")
    finally:
        closeable.close()
    return 0
