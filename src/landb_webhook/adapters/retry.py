"""Whether a failed OpenStack call is tried again, and after how long: the one retry policy.

- *Transient* failures (5xx, 429, 408, connection failures and resets, timeouts, Keystone unavailable,
  and a token Nova refused although keystoneauth re-authenticated once: parallel writers' renewals
  can void each other's tokens) get up to ``transient_retries`` more attempts, with exponential
  backoff from ``base_delay``, capped at ``max_delay``.
- *Conflicts* (409: a locked server, a vm_state that refuses metadata) get up to ``conflict_retries``
  more attempts from ``conflict_delay``, since a lock or a state change does not clear in milliseconds;
  after that the write is reported for its server and the next loop tries again.
- Anything else (400 schema, 403 policy or quota, 404, credentials Keystone refuses) is final at once.
- Each delay is jittered into [1/2, 1] of its value by an injectable random source, so that replicas
  and parallel writers do not retry in step; a ``Retry-After`` header (seconds or an HTTP date) is
  honoured as the least delay.
- The caller checks the deadline: no retry starts unless its delay and one more call timeout fit before
  the reply deadline (landb_webhook.deadline).

keystoneauth's own ``status_code_retries`` / ``connect_retries`` are not used: they sleep with
``time.sleep`` regardless of any deadline (a ``Retry-After: 120`` would hold the reply two minutes),
do not jitter, and would multiply with these attempts. Its token handling is used: it renews a token
before it expires and re-authenticates once on a 401.
"""

from __future__ import annotations

import enum
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


class Failure(enum.Enum):
    TRANSIENT = "transient"
    CONFLICT = "conflict"
    FINAL = "final"


def failure_of_status(status: int) -> Failure:
    if status == 409:
        return Failure.CONFLICT
    if status == 0 or status >= 500 or status in (408, 429):
        return Failure.TRANSIENT
    return Failure.FINAL


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """The retries are settings, without a default here (wiring.openstack_options fills them); the delays
    are not."""

    transient_retries: int
    """LANDB_UPSTREAM_RETRIES."""
    conflict_retries: int
    """LANDB_CONFLICT_RETRIES."""
    base_delay: float = 0.2
    """Seconds before the first retry of a transient failure, doubled at each one after it."""
    conflict_delay: float = 0.5
    """The same for a 409, longer: a lock or a state change does not clear in milliseconds."""
    max_delay: float = 2.0
    """Longest wait before one retry, however many came before: a longer one would only eat the deadline."""

    def delay(
        self, failure: Failure, retry: int, retry_after: float | None, chance: random.Random
    ) -> float | None:
        """Seconds to wait before retry number ``retry`` (from 1) of this kind of failure; None: give up."""
        if failure is Failure.TRANSIENT:
            limit, first = self.transient_retries, self.base_delay
        elif failure is Failure.CONFLICT:
            limit, first = self.conflict_retries, self.conflict_delay
        else:
            return None
        if retry > limit:
            return None
        backoff = min(self.max_delay, first * 2 ** (retry - 1))
        jittered = backoff * (0.5 + chance.random() / 2)
        return float(max(jittered, retry_after or 0.0))


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` (seconds, or an HTTP date) as seconds from now; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - (now or datetime.now(UTC))).total_seconds())


_URL = re.compile(r"connection to (\S+?):? ")
_UNRESOLVED = re.compile(r"Failed to resolve '([^']+)' \(\[Errno [-\d]+\] ([^)]+)\)")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def connection_failure(text: str) -> str:
    """A connection failure's message (keystoneauth's, or urllib3's chain) reduced to the URL when it
    names one and the innermost reason:
    ``https://keystone.example/v3/auth/tokens: cannot resolve keystone.example (Name or service not known)``.
    """
    url = _URL.search(text)
    unresolved = _UNRESOLVED.search(text)
    errno = _ERRNO.search(text)
    if unresolved:
        why = f"cannot resolve {unresolved[1]} ({unresolved[2]})"
    elif errno:
        why = errno[1].strip()
    else:
        return " ".join(text.split())
    return f"{url[1]}: {why}" if url else why
