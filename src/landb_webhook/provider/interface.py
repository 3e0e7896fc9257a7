"""What the HTTP layer needs from a provider; blocking calls, run off the event loop by the caller."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint


class ApplyError(Exception):
    """Some changes did not land (other servers still converged); answered 503 with ``str(self)``."""


@dataclass(frozen=True)
class Readiness:
    """Whether the webhook can do its job now, and why (the body of ``/readyz``)."""

    ready: bool
    reason: str


class ApplyRefused(ApplyError):
    """The whole change set was refused before anything was written; answered 503 with ``str(self)``."""


class WebhookProvider(Protocol):
    def domain_filter(self) -> DomainFilter:
        """Answered at negotiation: must not call any remote API."""
        ...

    def records(self) -> list[Endpoint]:
        """Current state. Raises backends.UpstreamError."""
        ...

    def adjust_endpoints(self, endpoints: Sequence[Endpoint]) -> list[Endpoint]:
        """Desired endpoints as records() will report them once applied. Raises UpstreamError."""
        ...

    def apply_changes(self, changes: Changes) -> None:
        """Raises UpstreamError (nothing learned/changed) or ApplyError (partial)."""
        ...

    def readiness(self) -> Readiness:
        """Ready when the node cache is synced and OpenStack usable as far as known; cheap, no remote call."""
        ...
