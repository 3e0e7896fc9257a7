"""Lets long-lived requests (watch streams, injected delays) end at once when the simulator stops.

uvicorn waits for open responses before it exits; a watch that runs for its full timeout or a fault that
sleeps for a minute would hold the shutdown. Everything that waits registers here and wakes up on close.
"""

from __future__ import annotations

import asyncio
from typing import Any

CLOSED = None
"""Put into every registered queue on close; readers treat it as end-of-stream."""


class Lifecycle:
    """Use from the event loop's thread only (the simulator calls ``close`` via call_soon_threadsafe)."""

    def __init__(self) -> None:
        self._closing = asyncio.Event()
        self._queues: set[asyncio.Queue[Any]] = set()

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    def close(self) -> None:
        self._closing.set()
        for queue in self._queues:
            queue.put_nowait(CLOSED)

    def register(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.add(queue)
        if self.closed:
            queue.put_nowait(CLOSED)

    def unregister(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.discard(queue)

    async def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False if the simulator started stopping meanwhile."""
        if seconds <= 0:
            return not self.closed
        try:
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)
        except TimeoutError:
            return True
        return False
