"""An OwnershipStore and a StateStore held in process memory: for tests and the demo, lost at restart."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from landb_webhook.backends import ownership_key
from landb_webhook.endpoint import Endpoint


class InMemoryOwnershipStore:
    """backends.OwnershipStore in a dict; safe to share between threads."""

    def __init__(self, records: Sequence[Endpoint] = ()) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], Endpoint] = {}
        self.apply(records, ())

    def records(self) -> Sequence[Endpoint]:
        with self._lock:
            return [self._records[key] for key in sorted(self._records)]

    def apply(self, upserts: Sequence[Endpoint], deletes: Sequence[Endpoint]) -> None:
        """Deletes first, then upserts: an update's old and new share a key and the new one must stay."""
        with self._lock:
            for record in deletes:
                self._records.pop(ownership_key(record), None)
            for record in upserts:
                self._records[ownership_key(record)] = record


class InMemoryStateStore:
    """backends.StateStore in a dict."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}

    def load(self) -> Mapping[str, str]:
        with self._lock:
            return dict(self._data)

    def save(self, data: Mapping[str, str]) -> None:
        with self._lock:
            self._data = dict(data)
