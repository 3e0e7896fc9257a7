"""Logging as a test found it, put back afterwards.

``configure_logging`` (every command of the CLI calls it) and ``register_secrets`` change state of the
whole process: structlog's configuration, the root logger's handlers and levels, the secrets to redact.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import structlog

from landb_webhook.logs import register_secrets, registered_secrets


@contextlib.contextmanager
def restored_logging() -> Iterator[None]:
    configured = structlog.is_configured()
    structlog_config = structlog.get_config()
    loggers = [logging.getLogger(), logging.getLogger("landb_webhook")]
    handlers = [list(logger.handlers) for logger in loggers]
    levels = [logger.level for logger in loggers]
    secrets = registered_secrets()
    try:
        yield
    finally:
        if configured:
            structlog.configure(**structlog_config)
        else:
            structlog.reset_defaults()
        for logger, its_handlers, level in zip(loggers, handlers, levels, strict=True):
            logger.handlers[:] = its_handlers
            logger.setLevel(level)
        register_secrets(secrets)
