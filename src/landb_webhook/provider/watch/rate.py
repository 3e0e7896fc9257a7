"""A token bucket: how the DNS watch and the event emitter keep to their rates."""

from __future__ import annotations


class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` saved up; a clock stepped back adds none."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self._tokens, self._at = capacity, now

    def take(self, now: float) -> bool:
        self._refill(now)
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def wait(self, now: float) -> float:
        """Seconds until a token is there."""
        self._refill(now)
        return max(0.0, (1 - self._tokens) / self.rate)

    def _refill(self, now: float) -> None:
        self._tokens = min(self.capacity, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now
