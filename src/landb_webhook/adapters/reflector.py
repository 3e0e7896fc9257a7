"""One Kubernetes collection kept current in memory by list+watch in a daemon thread.

Objects are handled as raw JSON dicts rather than client models: a list of a few thousand costs a
``json.loads`` instead of a model tree per object, and each is turned at once into the small value its
user reads. The node source runs one for nodes and, with a pod selector, one for the controller's pods;
the ConfigMap ownership store runs one for its ConfigMaps, and tells it of its own writes (observe()).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from kubernetes import watch

from landb_webhook.adapters.kubeclient import UPSTREAM, json_body, upstream_error
from landb_webhook.backends import UpstreamError

log = structlog.get_logger(__name__)

Value = TypeVar("Value")
ChangeHook = Callable[[str, "Value | None", "Value | None"], None]

_SHORTEST_NORMAL_WATCH = 1.0
"""Seconds; a watch the server ends sooner than this is followed by a short pause."""


@dataclass(frozen=True, kw_only=True)
class WatchOptions:
    """How a cache lists and watches, and how old it may get before it refuses to answer. The fields that
    are settings have no default here: wiring.watch_options fills them from config.Settings."""

    request_timeout: float
    """Seconds one list request may take, and a watch to connect (LANDB_UPSTREAM_TIMEOUT)."""
    max_staleness: float
    """Seconds since the last list or watch that ended well past which the cache refuses to answer
    (LANDB_NODE_CACHE_MAX_AGE)."""
    watch_timeout: int = 60
    """Seconds the server keeps one watch open before we open the next."""
    list_page_size: int = 500
    """Objects per list page: a large cluster's nodes come in several replies, none of them huge."""
    backoff_initial: float = 0.5
    """Seconds before the first retry of a failed list or watch, doubled at each failure after it."""
    backoff_max: float = 30.0
    """Longest pause between two tries: an API server back after an outage is seen within this."""
    clock: Callable[[], float] = time.monotonic


class Reflector(Generic[Value]):
    """The objects of one collection by ``namespace/name``, parsed; call start() once, stop() at shutdown."""

    def __init__(
        self,
        what: str,
        list_call: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], Value],
        *,
        on_change: Callable[[str, Value | None, Value | None], None] | None = None,
        list_options: Mapping[str, str] | None = None,
        options: WatchOptions,
    ) -> None:
        """``on_change(key, before, after)`` runs in the watch thread after each change (None: absent).

        items() refuses to answer from a cache older than ``options.max_staleness``, counted from the
        last list or watch that ended well.
        """
        self.what = what
        self._list_call = list_call
        self._parse = parse
        self._on_change = on_change
        self._list_options = dict(list_options or {})
        self._options = options
        self._max_staleness = options.max_staleness
        self._clock = options.clock
        self._last_contact = -math.inf

        self._lock = threading.Lock()
        self._items: dict[str, Value] = {}
        self._versions: dict[str, int] = {}
        """Key -> the resourceVersion its item was read at, when that is an integer."""
        self.version = 0
        """Bumped on every change of the items, so users can cache what they derive from them."""
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: watch.Watch | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"landb-{self.what}-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the watch thread; returns once it has exited or ``timeout`` has passed."""
        self._stopping.set()
        thread = self._thread
        if thread is None:
            return
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline:
            # Repeated because the thread may be between creating a watch and opening its
            # connection, when Watch.stop() has nothing to close yet.
            current = self._watch
            if current is not None:
                current.stop()  # type: ignore[no-untyped-call]
            thread.join(0.05)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # -- reads -----------------------------------------------------------------------------------

    def age(self) -> float:
        """Seconds since the last list or watch that ended well; infinity before the first list."""
        return self._clock() - self._last_contact

    def items(self) -> tuple[dict[str, Value], int]:
        """A copy of the cache and its version; an UpstreamError before the first list or when stale."""
        if not self._synced.is_set():
            raise UpstreamError(UPSTREAM, f"{self.what} inventory not synced yet")
        age = self.age()
        if age > self._max_staleness:
            # Aliases placed from a picture this old could land on nodes that are long gone.
            raise UpstreamError(
                UPSTREAM, f"{self.what} inventory is stale: no list or watch succeeded for {age:.0f} s"
            )
        with self._lock:
            return dict(self._items), self.version

    # -- the watch thread ------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        resource_version: str | None = None
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                started = time.monotonic()
                resource_version = self._watch_from(resource_version)
                self._last_contact = self._clock()
                failures = 0
                if time.monotonic() - started < _SHORTEST_NORMAL_WATCH:
                    # A server that ends watches at once would otherwise make this loop spin.
                    self._stopping.wait(self._options.backoff_initial)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                failures += 1
                delay = min(self._options.backoff_max, self._options.backoff_initial * 2 ** (failures - 1))
                reason = upstream_error(exc, f"list/watch {self.what}").reason
                log.warning(f"relisting {self.what}", reason=reason, retry_in=delay, attempt=failures)
                resource_version = None
                self._stopping.wait(delay)

    def _relist(self) -> str:
        """List every object (in pages), replace the cache, return the list's resourceVersion.

        An item observed newer than the list (our own write, answered after the list was served)
        is kept: the watch from the list's resourceVersion brings its change again, never an older one.
        """
        fresh: dict[str, Value] = {}
        versions: dict[str, int] = {}
        continue_token: str | None = None
        while True:
            response: Any = self._list_call(
                limit=self._options.list_page_size,
                _continue=continue_token,
                _preload_content=False,
                _request_timeout=self._options.request_timeout,
                **self._list_options,
            )
            page = json_body(response)
            for obj in page.get("items") or ():
                key = object_key(obj)
                fresh[key] = self._parse(obj)
                if (version := resource_version_of(obj)) is not None:
                    versions[key] = version
            list_metadata = page.get("metadata") or {}
            continue_token = list_metadata.get("continue") or None
            if continue_token is None:
                break
        listed_at = _as_int(list_metadata.get("resourceVersion"))
        with self._lock:
            previous = self._items
            if listed_at is not None:
                for key, version in self._versions.items():
                    if version > listed_at and key in previous:
                        fresh[key], versions[key] = previous[key], version
            self._items, self._versions = fresh, versions
            self.version += 1
        for key in sorted(previous.keys() | fresh.keys()):
            self._changed(key, previous.get(key), fresh.get(key))
        self._last_contact = self._clock()
        self._synced.set()
        return str(list_metadata.get("resourceVersion", ""))

    def _watch_from(self, resource_version: str) -> str:
        """Apply watch events until the server ends the watch; return the last resourceVersion seen."""
        current = watch.Watch()  # type: ignore[no-untyped-call]
        self._watch = current
        if self._stopping.is_set():
            return resource_version
        try:
            for event in current.stream(  # type: ignore[no-untyped-call]
                self._list_call,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._options.watch_timeout,
                _request_timeout=(
                    self._options.request_timeout,
                    self._options.watch_timeout + self._options.request_timeout,
                ),
                **self._list_options,
            ):
                raw = event["raw_object"]
                resource_version = str((raw.get("metadata") or {}).get("resourceVersion") or resource_version)
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._set(object_key(raw), self._parse(raw), resource_version_of(raw))
                elif event["type"] == "DELETED":
                    self._set(object_key(raw), None, resource_version_of(raw))
        finally:
            self._watch = None
        return resource_version

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Take in an object the API has just returned (say, from our own write), unless the cache
        already holds it at the same or a later resourceVersion: reads see a write at once."""
        self._set(object_key(obj), self._parse(obj), resource_version_of(obj))

    def _set(self, key: str, value: Value | None, version: int | None) -> None:
        """Store ``value`` (None: gone) unless the cache holds a later version of the object."""
        with self._lock:
            known = self._versions.get(key)
            if version is not None and known is not None and version <= known:
                # Equal: nothing new. Older: the watch catching up with a write already observed.
                return
            previous = self._items.get(key)
            if value is None:
                self._items.pop(key, None)
                self._versions.pop(key, None)
            else:
                self._items[key] = value
                if version is None:
                    self._versions.pop(key, None)
                else:
                    self._versions[key] = version
            if previous == value:
                return
            self.version += 1
        self._changed(key, previous, value)

    def _changed(self, key: str, before: Value | None, after: Value | None) -> None:
        if before != after and self._on_change is not None:
            self._on_change(key, before, after)


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name", ""))
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def resource_version_of(obj: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion as an integer, or None.

    The API calls it opaque; kube-apiserver's (and the simulator's) are etcd revisions, which only
    grow. Compared only to keep a cache from going back in time; one that is not an integer is never
    compared, so the latest event then simply wins, as it would without this.
    """
    return _as_int((obj.get("metadata") or {}).get("resourceVersion"))


def _as_int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None
