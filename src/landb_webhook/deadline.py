"""The reply deadline of the webhook call being served, visible to the adapters that call upstream.

The webhook answers 503 at ``request_timeout`` and external-dns gives up at 15 s: a retry that starts
after that moment only delays the next loop and keeps the single writer busy. The webhook sets the
deadline in the context it runs the provider call in; threads that work for that call run in copies
of it (``contexts_for``), and the OpenStack adapter reads it before every retry.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_reply_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "landb_reply_deadline", default=None
)


def reply_deadline() -> float | None:
    """The moment (``time.monotonic()`` seconds) the current webhook call must have answered by."""
    return _reply_deadline.get()


@contextlib.contextmanager
def answering_by(moment: float) -> Iterator[None]:
    """Within the block, ``reply_deadline()`` is ``moment`` (or an earlier deadline already set)."""
    current = _reply_deadline.get()
    token = _reply_deadline.set(moment if current is None else min(current, moment))
    try:
        yield
    finally:
        _reply_deadline.reset(token)


def context_answering_by(moment: float) -> contextvars.Context:
    """A copy of the current context in which ``reply_deadline()`` is ``moment``: run a call in it."""
    context = contextvars.copy_context()
    context.run(_reply_deadline.set, moment)
    return context


def contexts_for(count: int) -> list[contextvars.Context]:
    """One copy of the current context per task handed to a thread pool (a context runs in one thread
    at a time), so that the tasks see the caller's reply deadline."""
    return [contextvars.copy_context() for _ in range(count)]
