"""What the OpenStack session's calls tell about OpenStack as a whole: whether it can be used (``/readyz``)
and whether Keystone is in an outage, said once when it starts and once when it ends.

Fed by adapters.openstack (``OpenStackSession._observe``) with each call's outcome; makes no call itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from landb_webhook.adapters.openstack_errors import AUTH_REFUSED, KEYSTONE_UNREACHABLE
from landb_webhook.backends import UpstreamError

log = structlog.get_logger(__name__)

NOT_ANSWERED_YET = "no call has succeeded since start-up (credentials untried)"

_KEYSTONE_SAYS = {
    KEYSTONE_UNREACHABLE: "keystone unreachable: every OpenStack call fails until it answers",
    AUTH_REFUSED: "keystone refuses the credentials: every OpenStack call fails until they are fixed",
}


class OpenStackHealth:
    """The last calls' verdict on OpenStack, and the Keystone outage under way; safe to share between
    threads."""

    def __init__(self, failure_window: float, clock: Callable[[], float]) -> None:
        """``failure_window``: seconds a failed call keeps :meth:`unavailable` answering, unless a later
        call succeeds; ``clock`` (like time.monotonic) dates the failures."""
        self._failure_window = failure_window
        self._clock = clock
        self._last_failure: tuple[float, str] | None = None
        """When and why the last call failed for a reason that is OpenStack's; None after a success."""
        self._answered = False
        """A call has succeeded since start-up: until then the webhook is not known to work."""
        self._outage_lock = threading.Lock()
        self._outage: _Outage | None = None
        """The Keystone outage under way (said when it started), None while Keystone answers."""

    def unavailable(self) -> str | None:
        """Why OpenStack cannot be used, if the last call failed within the failure window; else None.

        A Nova answer about one request (a locked server's 409, a 404, a rejected value) says nothing
        against OpenStack itself and does not count; refused credentials, 5xx and timeouts do. Before
        the first success, the credentials are untried: :data:`NOT_ANSWERED_YET`.
        """
        failure = self._last_failure
        if failure is None or self._clock() - failure[0] > self._failure_window:
            return None if self._answered else NOT_ANSWERED_YET
        return failure[1]

    def observe(self, result: str, error: UpstreamError | None, about_one_request: bool, now: float) -> None:
        """One call's outcome: ``result`` as it is counted (``ok``, ``error``, ``keystone_unreachable``,
        ``auth_refused``), its error, and whether that error was only about the one request."""
        if error is None:
            self._last_failure = None
            self._answered = True
        elif not about_one_request:
            self._last_failure = (now, str(error))
        else:  # Nova answered, about that one request
            self._answered = True
        self._follow_keystone(result, error, now)

    def _follow_keystone(self, result: str, error: UpstreamError | None, now: float) -> None:
        """Say a Keystone outage when it starts (or changes: unreachable, then refusing) and when it ends;
        each failed attempt between is a debug line."""
        with self._outage_lock:
            outage = self._outage
            if result in _KEYSTONE_SAYS:
                if outage is not None and outage.result == result:
                    outage.failed += 1
                    log.debug("keystone still failing", result=result, error=str(error))
                    return
                self._outage = _Outage(result, started=now)
            else:
                # Any other result means Keystone gave a token: an outage under way is over.
                self._outage = None
        if result in _KEYSTONE_SAYS:
            log.warning(
                _KEYSTONE_SAYS[result],
                result=result,
                error=str(error),
                hint="said once per outage; each failed attempt is a debug line",
            )
        elif outage is not None:
            log.info(
                "keystone answers again",
                after_seconds=round(now - outage.started, 1),
                failed_attempts=outage.failed,
                was=outage.result,
            )


@dataclass
class _Outage:
    result: str
    """keystone_unreachable or auth_refused."""
    started: float
    failed: int = 1
    """Attempts that failed in it."""
