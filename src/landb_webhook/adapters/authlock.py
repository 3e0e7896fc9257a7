"""The lock keystoneauth authenticates under, replaced by one that never waits forever.

keystoneauth's identity plugins fetch a token under a plain ``threading.Lock``. Its generic plugins
(``auth_type: password``, openstacksdk's default) look up Keystone's version document first, inside
that lock, and when that ``GET`` answers 401 they ask again *with* a token: fetching it takes the same
lock in the same thread, which never returns. One 401 on ``GET /v3`` left the thread stuck for good and
every later call queued behind it, Keystone healthy or not (keystoneauth 5.x; the code is unchanged
upstream).

:class:`AuthenticationLock` takes that lock's place on each connection's plugin:

- taken again by the thread that holds it, it raises :class:`ReenteredAuthentication`, a
  ``DiscoveryFailure``: keystoneauth then falls back to the version in the URL, or the attempt fails
  and the retry policy tries again with a fresh look-up;
- a thread waits for it only until its reply deadline (or ``wait_at_most``), then gets
  :class:`AuthenticationBusy`, so no call outlives its deadline waiting on another;
- a holder that has had it longer than any authentication takes (``wedged_after``) is not waited for
  at all, and :meth:`wedged` tells the adapter to replace that connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from keystoneauth1 import exceptions as ksa_exceptions

from landb_webhook.deadline import reply_deadline


class ReenteredAuthentication(ksa_exceptions.DiscoveryFailure):
    """Authentication asked for a token while fetching one (the version document answered 401)."""


class AuthenticationBusy(ksa_exceptions.ClientException):
    """Another call has been authenticating on this connection until this call's deadline."""


class AuthenticationLock:
    """A stand-in for keystoneauth's plugin lock: refuses re-entry, waits no longer than the deadline."""

    def __init__(
        self, wait_at_most: float, wedged_after: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``wedged_after``: seconds past which a holder is taken for stuck and not waited for at all."""
        self._lock = threading.Lock()
        self._wait_at_most = wait_at_most
        self._wedged_after = wedged_after
        self._clock = clock
        self._owner: int | None = None
        self._since: float | None = None

    def __enter__(self) -> AuthenticationLock:
        if self._owner == threading.get_ident():
            raise ReenteredAuthentication(
                "Keystone refused its version document and keystoneauth asked for a token to read it "
                "while fetching one"
            )
        wait = 0.0 if self.wedged() else self._wait_at_most
        deadline = reply_deadline()
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        if not self._lock.acquire(timeout=max(0.0, wait)):
            raise AuthenticationBusy(
                f"another call has been authenticating for {self.held_for() or 0.0:.1f} s "
                "and this call's deadline came first"
            )
        self._owner, self._since = threading.get_ident(), self._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._owner = self._since = None
        self._lock.release()

    def wedged(self) -> bool:
        """Whether the holder has held the lock longer than any authentication takes."""
        held_for = self.held_for()
        return held_for is not None and held_for > self._wedged_after

    def held_for(self) -> float | None:
        """Seconds the current holder has held the lock; None when it is free."""
        since = self._since
        return None if since is None else self._clock() - since


PLUGIN_LOCK = "_lock"
"""keystoneauth's own attribute for its plugin lock, which :class:`AuthenticationLock` takes the place of
(the guard tests fail if a release renames or drops it)."""


def authentication_lock(plugin: object) -> AuthenticationLock | None:
    """The AuthenticationLock guarding ``plugin`` (a keystoneauth auth plugin), None when it has none."""
    lock = getattr(plugin, PLUGIN_LOCK, None)
    return lock if isinstance(lock, AuthenticationLock) else None
