"""Everything the simulated APIs serve, behind one lock, with the knobs tests turn.

The HTTP layers (keystone.py, nova.py, kube.py) stay thin: they parse requests and render replies, while
the rules whose order matters (Nova's 404 -> policy -> 409 -> quota sequence, Kubernetes' optimistic
concurrency) run here, atomically, so a test that drives the state directly sees exactly what a client
sees. Every accessor returns a copy.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from landb_simulator import kube_gateways
from landb_simulator.identity import PROJECT_ID, Credentials, IdentityStore, Token
from landb_simulator.kube_store import CONFIGMAPS, EVENTS, INGRESSES, NODES, PODS, SERVICES, KubeStore, Obj
from landb_simulator.manifests import FLAVOR_NAME, node_manifest, pod_manifest, service_manifest, set_ready
from landb_simulator.octavia_store import LoadBalancerStore

Api = Literal["keystone", "nova", "glance", "octavia", "neutron", "kubernetes"]
MetadataOperation = Literal["POST", "PUT", "PUT_KEY", "DELETE"]

DEFAULT_MAX_SERVER_META = 128
MAX_RECORDED_CALLS = 1_000_000

VM_STATES = frozenset(
    {
        "active",
        "building",
        "paused",
        "suspended",
        "stopped",
        "rescued",
        "resized",
        "soft-delete",
        "deleted",
        "error",
        "shelved",
        "shelved_offloaded",
    }
)
METADATA_WRITABLE_VM_STATES = frozenset({"active", "paused", "suspended", "stopped", "resized", "shelved"})
"""Nova's check_instance_state for metadata updates; any task_state is accepted."""

_SERVER_NAMESPACE = uuid.UUID("0d6e2a4c-96a4-4c1e-8f53-1c0f5b7a9e21")
IMAGE_ID = str(uuid.uuid5(_SERVER_NAMESPACE, "image:ALMA9 - x86_64"))
IMAGE_NAME = "ALMA9 - x86_64"


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class MetadataChange:
    """One successful metadata write, in global order across all servers."""

    seq: int
    server_id: str
    method: str
    """``POST`` (merge), ``PUT`` (replace all or one key), ``DELETE`` or ``direct`` (set by the test)."""
    key: str | None
    """The key in the URL for per-key calls, None for whole-dict calls."""
    metadata: dict[str, str]
    """The server's complete metadata after the change."""


@dataclass(frozen=True)
class ApiCall:
    api: str
    method: str
    path: str
    status: int
    query: str = ""


@dataclass(frozen=True)
class ServerInfo:
    id: str
    name: str
    metadata: dict[str, str]
    locked: bool
    locked_reason: str | None
    vm_state: str
    task_state: str | None
    ip: str | None
    created: str
    updated: str
    project_id: str
    user_id: str
    host_id: str
    image_id: str
    flavor_name: str


class NovaError(Exception):
    """A Nova fault: ``kind`` is the key of the JSON error body (badRequest, itemNotFound, ...)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class FaultAction:
    """What the HTTP layer does to a request a fault matched, in this order: wait ``delay``; invalidate
    every Keystone token if ``expire_tokens``; let the API handle the request first (its reply is lost)
    if ``after_processing``; then drop the connection without a reply if ``reset``, else answer
    ``status`` with ``body`` (a default error body when None) and ``headers``. With neither ``reset``
    nor ``status`` the request carries on normally."""

    status: int | None
    delay: float
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    reset: bool = False
    after_processing: bool = False
    expire_tokens: bool = False

    @property
    def replaces_reply(self) -> bool:
        return self.reset or self.status is not None


@dataclass
class _Fault:
    id: int
    api: str
    method: str | None
    path_pattern: re.Pattern[str] | None
    action: FaultAction
    remaining: int | None
    """Uses left; None means forever. A fault is dropped when this reaches 0."""
    probability: float = 1.0
    chance: random.Random | None = None
    """Decides, request by request, whether a fault with ``probability`` < 1 fires (seeded)."""

    def matches(self, api: str, method: str, path: str) -> bool:
        return (
            self.api == api
            and (self.method is None or self.method == method.upper())
            and (self.path_pattern is None or self.path_pattern.search(path) is not None)
        )

    def fires(self) -> bool:
        return self.chance is None or self.chance.random() < self.probability


class FaultHandle:
    """Returned by ``inject_fault``: how often the fault fired, and a way to withdraw it early."""

    def __init__(self, state: SimulatorState, fault_id: int) -> None:
        self._state = state
        self.id = fault_id

    @property
    def hits(self) -> int:
        """How many requests this fault has answered (or delayed) so far."""
        return self._state.fault_hits(self.id)

    @property
    def active(self) -> bool:
        """False once its uses are spent, it was cancelled, or the faults were cleared."""
        return self._state.fault_active(self.id)

    def cancel(self) -> None:
        self._state.cancel_fault(self.id)


@dataclass
class _Server:
    id: str
    name: str
    metadata: dict[str, str]
    locked: bool
    vm_state: str
    ip: str | None
    created: str
    updated: str
    user_id: str
    project_id: str = PROJECT_ID
    """The project that owns it: another project's server is seen only by an admin (as in Nova)."""
    locked_reason: str | None = None
    locked_by: str | None = None
    """``owner`` or ``admin``, as Nova records who locked the server; None when unlocked."""
    task_state: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def info(self) -> ServerInfo:
        return ServerInfo(
            id=self.id,
            name=self.name,
            metadata=dict(self.metadata),
            locked=self.locked,
            locked_reason=self.locked_reason,
            vm_state=self.vm_state,
            task_state=self.task_state,
            ip=self.ip,
            created=self.created,
            updated=self.updated,
            project_id=self.project_id,
            user_id=self.user_id,
            host_id=hashlib.sha224(f"{self.project_id}compute-{self.id[:2]}".encode()).hexdigest(),
            image_id=IMAGE_ID,
            flavor_name=FLAVOR_NAME,
        )


class SimulatorState:
    """The simulated cloud and cluster. Thread-safe; every method returns copies."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        """``clock`` (seconds, like time.time) decides token expiry; tests pass one they can advance."""
        self._lock = threading.RLock()
        self.identity = IdentityStore(self._lock, clock=clock)
        self.kube = KubeStore(self._lock)
        self.octavia = LoadBalancerStore(self._lock)
        """Octavia's load balancers and the floating IPs bound to their VIP ports."""
        self._servers: dict[str, _Server] = {}
        self._max_server_meta = DEFAULT_MAX_SERVER_META
        self._history: list[MetadataChange] = []
        self._change_observer: Callable[[MetadataChange], None] | None = None
        self._seq = itertools.count(1)
        self._calls: deque[ApiCall] = deque(maxlen=MAX_RECORDED_CALLS)
        self._in_flight: dict[str, int] = {}
        self._faults: list[_Fault] = []
        self._fault_hits: dict[int, int] = {}
        self._fault_ids = itertools.count(1)

    # -- identity --------------------------------------------------------------------------------------

    @property
    def credentials(self) -> Credentials:
        return self.identity.credentials

    @property
    def token_ttl(self) -> float:
        """Seconds a new Keystone token lives (default 3600)."""
        return self.identity.token_ttl

    @token_ttl.setter
    def token_ttl(self, seconds: float) -> None:
        self.identity.token_ttl = seconds

    def expire_tokens(self) -> int:
        """Invalidate every issued token: the next Nova call with one gets 401. Returns how many."""
        return self.identity.expire_tokens()

    # -- servers ---------------------------------------------------------------------------------------

    def add_server(
        self,
        name: str,
        metadata: Mapping[str, str] | None = None,
        *,
        server_id: str | None = None,
        locked: bool = False,
        vm_state: str = "active",
        ip: str | None = None,
        project_id: str = PROJECT_ID,
    ) -> str:
        """Create a server directly (no quota or schema checks) and return its id. ``project_id`` other
        than the simulator's project makes a server only an admin's token sees (by id, or listing with
        ``all_tenants``)."""
        _check_vm_state(vm_state)
        server_id = server_id or str(uuid.uuid4())
        now = _timestamp()
        with self._lock:
            if server_id in self._servers:
                raise ValueError(f"server {server_id} already exists")
            self._servers[server_id] = _Server(
                id=server_id,
                name=name,
                metadata=dict(metadata or {}),
                locked=locked,
                locked_by="owner" if locked else None,
                vm_state=vm_state,
                ip=ip,
                created=now,
                updated=now,
                user_id=self.identity.credentials.user_id,
                project_id=project_id,
            )
            if metadata:
                self._record_change(server_id, "direct", None)
        return server_id

    def delete_server(self, server_id: str) -> None:
        with self._lock:
            self._server(server_id)
            del self._servers[server_id]

    def server(self, server_id: str) -> ServerInfo:
        """The server's current view; KeyError if it does not exist."""
        with self._lock:
            return self._server(server_id).info()

    def servers(self) -> list[ServerInfo]:
        """Every server, in creation order."""
        with self._lock:
            return [server.info() for server in self._servers.values()]

    def metadata(self, server_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self._server(server_id).metadata)

    def set_metadata_direct(self, server_id: str, metadata: Mapping[str, str]) -> None:
        """Replace the whole metadata without any API check (seeding); recorded as ``direct``."""
        with self._lock:
            server = self._server(server_id)
            server.metadata = dict(metadata)
            server.updated = _timestamp()
            self._record_change(server_id, "direct", None)

    def set_locked(self, server_id: str, locked: bool, reason: str | None = None) -> None:
        """Seeding only, like ``add_server(locked=True)``: lock as the owner would, without a request.
        Tests of the webhook lock through Nova's API (``lock_server`` / ``openstack server lock``)."""
        with self._lock:
            server = self._server(server_id)
            server.locked = locked
            server.locked_by = "owner" if locked else None
            server.locked_reason = reason if locked else None

    def lock_server(self, caller: Token, server_id: str, reason: str | None = None) -> None:
        """Nova's lock action: server 404 -> policy 403 (member or admin) -> lock.

        Locking again as the owner changes nothing (the first reason stays), as in Nova; an admin of
        another project re-locks the server as ``admin``, which its owner then cannot undo.
        """
        with self._lock:
            server = self._action_target(caller, server_id, "lock")
            is_owner = caller.project_id == server.project_id
            if server.locked and is_owner:
                return
            server.locked = True
            server.locked_by = "owner" if is_owner else "admin"
            server.locked_reason = reason

    def unlock_server(self, caller: Token, server_id: str) -> None:
        """Nova's unlock action: 404 -> policy 403; a lock set by an admin of another project can only
        be lifted with ``unlock_override`` (admins). Unlocking an unlocked server is fine."""
        with self._lock:
            server = self._action_target(caller, server_id, "unlock")
            expected = "owner" if caller.project_id == server.project_id else "admin"
            if server.locked_by not in (None, expected) and not caller.is_admin():
                raise NovaError(
                    403,
                    "forbidden",
                    "Policy doesn't allow os_compute_api:os-lock-server:unlock:unlock_override "
                    "to be performed.",
                )
            server.locked = False
            server.locked_by = None
            server.locked_reason = None

    def visible_server(self, caller: Token, server_id: str) -> ServerInfo:
        """``GET /servers/{id}`` for ``caller``: 404 for a server that does not exist, or that belongs to
        another project and the caller is no admin (Nova reads it scoped to the caller's project)."""
        with self._lock:
            return self._visible(caller, server_id).info()

    def _visible(self, caller: Token, server_id: str) -> _Server:
        server = self._servers.get(server_id)
        if server is None or (server.project_id != caller.project_id and not caller.is_admin()):
            raise NovaError(404, "itemNotFound", f"Instance {server_id} could not be found.")
        return server

    def _action_target(self, caller: Token, server_id: str, action: str) -> _Server:
        server = self._visible(caller, server_id)
        if not caller.can_write():
            raise NovaError(
                403,
                "forbidden",
                f"Policy doesn't allow os_compute_api:os-lock-server:{action} to be performed.",
            )
        return server

    def set_vm_state(self, server_id: str, vm_state: str) -> None:
        _check_vm_state(vm_state)
        with self._lock:
            self._server(server_id).vm_state = vm_state

    def set_task_state(self, server_id: str, task_state: str | None) -> None:
        with self._lock:
            self._server(server_id).task_state = task_state

    def set_quota(self, max_server_meta: int) -> None:
        """The ``metadata_items`` quota: how many keys one server may hold (default 128)."""
        if max_server_meta < 0:
            raise ValueError("max_server_meta must not be negative")
        with self._lock:
            self._max_server_meta = max_server_meta

    @property
    def max_server_meta(self) -> int:
        with self._lock:
            return self._max_server_meta

    def _server(self, server_id: str) -> _Server:
        try:
            return self._servers[server_id]
        except KeyError:
            raise KeyError(f"no server {server_id}") from None

    def apply_metadata_write(
        self,
        caller: Token,
        server_id: str,
        operation: MetadataOperation,
        items: Mapping[str, str],
        key: str | None = None,
    ) -> dict[str, str]:
        """One Nova metadata call after schema validation, checked in Nova's order: server 404 ->
        key 404 (DELETE) -> policy 403 -> lock / vm_state 409 -> quota 403. Returns the new metadata."""
        action = {"POST": "create", "PUT": "update_all", "PUT_KEY": "update", "DELETE": "delete"}[operation]
        with self._lock:
            server = self._visible(caller, server_id)
            if operation == "DELETE" and key not in server.metadata:
                raise NovaError(404, "itemNotFound", "Metadata item was not found")
            if not caller.can_write():
                raise NovaError(
                    403,
                    "forbidden",
                    f"Policy doesn't allow os_compute_api:server-metadata:{action} to be performed.",
                )
            if server.locked and not caller.is_admin():
                raise NovaError(409, "conflictingRequest", f"Instance {server_id} is locked")
            if server.vm_state not in METADATA_WRITABLE_VM_STATES:
                verb = "delete metadata" if operation == "DELETE" else "update metadata"
                raise NovaError(
                    409,
                    "conflictingRequest",
                    f"Cannot '{verb}' instance {server_id} while it is in vm_state {server.vm_state}",
                )
            if operation == "PUT":
                updated = dict(items)
            else:
                updated = dict(server.metadata)
                if operation == "DELETE":
                    assert key is not None
                    del updated[key]
                else:
                    updated.update(items)
            if operation != "DELETE" and len(updated) > self._max_server_meta:
                raise NovaError(
                    403, "forbidden", f"Maximum number of metadata items exceeds {self._max_server_meta}"
                )
            server.metadata = updated
            server.updated = _timestamp()
            self._record_change(server_id, "PUT" if operation == "PUT_KEY" else operation, key)
            return dict(updated)

    # -- history ---------------------------------------------------------------------------------------

    def _record_change(self, server_id: str, method: str, key: str | None) -> None:
        metadata = dict(self._servers[server_id].metadata)
        change = MetadataChange(next(self._seq), server_id, method, key, metadata)
        self._history.append(change)
        if self._change_observer is not None:
            self._change_observer(change)

    def observe_metadata_changes(self, observer: Callable[[MetadataChange], None] | None) -> None:
        """Call ``observer`` with each metadata change as it lands, before its reply is sent, so a test
        can act at that exact moment (freeze the writer); None stops it."""
        with self._lock:
            self._change_observer = observer

    def metadata_history(self, server_id: str | None = None) -> list[MetadataChange]:
        """Every successful metadata change (optionally of one server), in global order."""
        with self._lock:
            return [change for change in self._history if server_id is None or change.server_id == server_id]

    def clear_metadata_history(self) -> None:
        with self._lock:
            self._history.clear()

    # -- API calls -------------------------------------------------------------------------------------

    def record_call(self, call: ApiCall) -> None:
        with self._lock:
            self._calls.append(call)

    def request_started(self, api: str) -> None:
        with self._lock:
            self._in_flight[api] = self._in_flight.get(api, 0) + 1

    def request_ended(self, api: str) -> None:
        with self._lock:
            self._in_flight[api] -= 1

    def in_flight(self, api: str) -> int:
        """Requests to ``api`` received and not yet answered (a delayed write still to land, a watch)."""
        with self._lock:
            return self._in_flight.get(api, 0)

    def api_calls(self, api: str | None = None) -> list[ApiCall]:
        """Every answered request (optionally of one API), oldest first."""
        with self._lock:
            return [call for call in self._calls if api is None or call.api == api]

    def reset_api_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    # -- faults ----------------------------------------------------------------------------------------

    def inject_fault(
        self,
        *,
        api: Api,
        method: str | None = None,
        path_pattern: str | None = None,
        status: int | None = 503,
        times: int | None = 1,
        delay: float = 0.0,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        reset: bool = False,
        after_processing: bool = False,
        expire_tokens: bool = False,
        probability: float = 1.0,
        seed: int | None = None,
    ) -> FaultHandle:
        """Make the next ``times`` matching requests (None: all of them) wait ``delay`` seconds and then
        fail with ``status`` (and ``body``, else the API's usual error body, and ``headers`` such as
        ``Retry-After``). ``status=None`` only delays. ``reset`` drops the connection instead of
        answering (the client sees a connection reset); ``after_processing`` lets the request take effect
        before its reply is replaced (a write that lands but whose answer is lost); ``expire_tokens``
        invalidates every Keystone token first (the request itself then meets a 401).
        ``probability`` < 1 fires the fault on that fraction of the matching requests only, decided by
        a random generator seeded with ``seed``; the others pass untouched and use up nothing.
        ``path_pattern`` is a regular expression searched in the request path. Faults are tried in the
        order they were injected; the first that fires is used."""
        if times is not None and times < 1:
            raise ValueError("times must be positive or None")
        if delay < 0:
            raise ValueError("delay must not be negative")
        if not 0 < probability <= 1:
            raise ValueError("probability must be in (0, 1]")
        if after_processing and not (reset or status is not None):
            raise ValueError("after_processing needs a status or a reset to replace the reply with")
        action = FaultAction(
            status=None if reset else status,
            delay=delay,
            body=body,
            headers=dict(headers or {}),
            reset=reset,
            after_processing=after_processing,
            expire_tokens=expire_tokens,
        )
        with self._lock:
            fault = _Fault(
                id=next(self._fault_ids),
                api=api,
                method=method.upper() if method else None,
                path_pattern=re.compile(path_pattern) if path_pattern is not None else None,
                action=action,
                remaining=times,
                probability=probability,
                chance=random.Random(seed) if probability < 1 else None,  # noqa: S311 (seeded on purpose)
            )
            self._faults.append(fault)
            return FaultHandle(self, fault.id)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def take_fault(self, api: str, method: str, path: str) -> FaultAction | None:
        """Consume one use of the first fault matching this request, if any."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(api, method, path) and fault.fires():
                    if fault.remaining is not None:
                        fault.remaining -= 1
                    self._fault_hits[fault.id] = self._fault_hits.get(fault.id, 0) + 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault.action
            return None

    def fault_hits(self, fault_id: int) -> int:
        with self._lock:
            return self._fault_hits.get(fault_id, 0)

    def fault_active(self, fault_id: int) -> bool:
        with self._lock:
            return any(fault.id == fault_id for fault in self._faults)

    def cancel_fault(self, fault_id: int) -> None:
        with self._lock:
            self._faults = [fault for fault in self._faults if fault.id != fault_id]

    # -- Kubernetes ------------------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        provider_id: str | None = None,
        internal_ips: Iterable[str] = (),
        ready: bool = True,
        finalizers: Iterable[str] = (),
    ) -> Obj:
        """Register a node as a kubelet would (emits ADDED); returns the stored object.

        ``finalizers`` hold the node after a delete: it then has a deletionTimestamp until they go.
        """
        manifest = node_manifest(name, labels, provider_id, tuple(internal_ips), ready)
        if finalizers:
            manifest["metadata"]["finalizers"] = list(finalizers)
        return self.kube.create(NODES, None, manifest)

    def label_node(self, name: str, key: str, value: str | None) -> Obj:
        """Set a label, or remove it with ``value=None`` (emits MODIFIED when something changed)."""

        def change(node: Obj) -> None:
            labels = node["metadata"].setdefault("labels", {})
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value

        return self.kube.mutate(NODES, None, name, change)

    def set_node_ready(
        self,
        name: str,
        ready: bool,
        *,
        status: Literal["False", "Unknown"] = "False",
        since: datetime | None = None,
    ) -> Obj:
        """Set the Ready condition (``status`` when not ready: ``Unknown`` is what the node lifecycle
        controller writes when the kubelet stops posting); its lastTransitionTime moves only on a change,
        to now or to ``since`` (a node that has been NotReady for a while, without waiting that long)."""
        condition = "True" if ready else status
        return self.kube.mutate(NODES, None, name, lambda node: set_ready(node, condition, since=since))

    def cordon_node(self, name: str, cordoned: bool = True) -> Obj:
        """``kubectl cordon`` / ``uncordon``: spec.unschedulable."""

        def change(node: Obj) -> None:
            if cordoned:
                node.setdefault("spec", {})["unschedulable"] = True
            else:
                node.setdefault("spec", {}).pop("unschedulable", None)

        return self.kube.mutate(NODES, None, name, change)

    def delete_node(self, name: str) -> None:
        """Delete the node; one with finalizers only gets its deletionTimestamp (see remove_finalizers)."""
        self.kube.delete(NODES, None, name)

    def remove_finalizers(self, name: str) -> None:
        """What the controllers holding a deleted node do when done: the node then goes."""
        self.kube.mutate(NODES, None, name, lambda node: node["metadata"].pop("finalizers", None))

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        labels: Mapping[str, str] | None = None,
        ready: bool = True,
    ) -> Obj:
        """A running pod bound to ``node`` (emits ADDED), Ready or not."""
        return self.kube.create(PODS, namespace, pod_manifest(name, node, labels, ready))

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> Obj:
        return self.kube.mutate(
            PODS,
            namespace,
            name,
            lambda pod: set_ready(pod, "True" if ready else "False", "ContainersReady"),
        )

    def delete_pod(self, namespace: str, name: str) -> None:
        self.kube.delete(PODS, namespace, name)

    def pods(self, namespace: str | None = None) -> list[Obj]:
        return self.kube.select(PODS, namespace)[0]

    def add_service(
        self,
        namespace: str,
        name: str,
        *,
        service_type: str = "LoadBalancer",
        ports: Iterable[int] = (80,),
        selector: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        """A Service as ``kubectl apply`` creates it (emits ADDED); a LoadBalancer one has no address yet."""
        manifest = service_manifest(name, service_type, tuple(ports), selector, annotations)
        return self.kube.create(SERVICES, namespace, manifest)

    def set_load_balancer_ingress(self, namespace: str, name: str, ips: Iterable[str]) -> Obj:
        """Write ``status.loadBalancer.ingress`` through the status subresource, as the cloud controller
        manager does once Octavia has built the load balancer (no ``ips``: the address is gone)."""
        status = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in ips]}}
        current = self.kube.get(SERVICES, namespace, name)
        if current is None:
            raise KeyError(f"no service {namespace}/{name}")
        return self.kube.update(SERVICES, namespace, name, {**current, "status": status}, status=True)

    def services(self, namespace: str | None = None) -> list[Obj]:
        return self.kube.select(SERVICES, namespace)[0]

    def add_ingress(self, namespace: str, name: str, hosts: Iterable[str]) -> Obj:
        """A networking.k8s.io/v1 Ingress routing ``hosts`` to a Service ``name`` on port 80 (emits ADDED)."""
        backend = {"service": {"name": name, "port": {"number": 80}}}
        rules = [
            {"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
            for host in hosts
        ]
        manifest = {"metadata": {"name": name}, "spec": {"rules": rules}}
        return self.kube.create(INGRESSES, namespace, manifest)

    # -- the Gateway API (kube_gateways.py): what a team writes, and what its controller answers --------

    def add_gateway_class(self, name: str, controller: str = kube_gateways.CONTROLLER) -> Obj:
        """A GatewayClass, accepted by its controller."""
        self.kube.create(
            kube_gateways.GATEWAY_CLASSES, None, kube_gateways.gateway_class_manifest(name, controller)
        )
        return self._set_status(kube_gateways.GATEWAY_CLASSES, None, name, kube_gateways.gateway_class_status)

    def add_gateway(
        self, namespace: str, name: str, gateway_class: str, addresses: Iterable[str] = ()
    ) -> Obj:
        """A Gateway with one HTTP listener open to routes of every namespace; with ``addresses``, the
        status its controller writes once its data plane listens there (``set_gateway_addresses``)."""
        manifest = kube_gateways.gateway_manifest(name, gateway_class)
        created = self.kube.create(kube_gateways.GATEWAYS, namespace, manifest)
        return self.set_gateway_addresses(namespace, name, addresses) if addresses else created

    def set_gateway_addresses(self, namespace: str, name: str, addresses: Iterable[str]) -> Obj:
        """The controller's status write: ``status.addresses`` (what external-dns makes the targets of the
        routes' names), Accepted and Programmed."""
        listed = list(addresses)
        return self._set_status(
            kube_gateways.GATEWAYS, namespace, name, lambda gw: kube_gateways.gateway_status(gw, listed)
        )

    def add_route(
        self,
        namespace: str,
        name: str,
        hosts: Iterable[str],
        gateway: tuple[str, str],
        *,
        resource: str = kube_gateways.HTTP_ROUTES,
        accepted: bool = True,
    ) -> Obj:
        """An HTTPRoute (or ``resource=kube_gateways.GRPC_ROUTES``) for ``hosts`` attached to the Gateway
        ``gateway`` (namespace, name); ``accepted``: its controller has accepted it (``accept_route``)."""
        gateway_namespace, gateway_name = gateway
        manifest = kube_gateways.route_manifest(
            name, hosts, gateway_name, None if gateway_namespace == namespace else gateway_namespace
        )
        created = self.kube.create(resource, namespace, manifest)
        return self.accept_route(namespace, name, resource=resource) if accepted else created

    def accept_route(self, namespace: str, name: str, *, resource: str = kube_gateways.HTTP_ROUTES) -> Obj:
        """The controller's status write on a route: ``status.parents[]``, each Accepted."""
        return self._set_status(resource, namespace, name, kube_gateways.accepted_parents)

    def routes(self, namespace: str | None = None, resource: str = kube_gateways.HTTP_ROUTES) -> list[Obj]:
        return self.kube.select(resource, namespace)[0]

    def _set_status(
        self, resource: str, namespace: str | None, name: str, status_of: Callable[[Obj], Obj]
    ) -> Obj:
        with self._lock:
            current = self.kube.get(resource, namespace, name)
            if current is None:
                raise KeyError(f"no {resource} {namespace}/{name}")
            updated = {**current, "status": status_of(current)}
            return self.kube.update(resource, namespace, name, updated, status=True)

    def events(self, namespace: str | None = None) -> list[Obj]:
        """The events.k8s.io/v1 Events, in the order of their last write."""
        found = self.kube.select(EVENTS, namespace)[0]
        return sorted(found, key=lambda event: int(event["metadata"]["resourceVersion"]))

    def node(self, name: str) -> Obj | None:
        return self.kube.get(NODES, None, name)

    def nodes(self) -> list[Obj]:
        return self.kube.select(NODES)[0]

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self.kube.get(CONFIGMAPS, namespace, name)

    def put_configmap(self, namespace: str, name: str, data: Mapping[str, str]) -> Obj:
        """Create the configmap, or replace its data (seeding; emits ADDED / MODIFIED)."""
        with self._lock:
            current = self.kube.get(CONFIGMAPS, namespace, name)
            if current is None:
                return self.kube.create(
                    CONFIGMAPS, namespace, {"metadata": {"name": name}, "data": dict(data)}
                )
            current["data"] = dict(data)
            return self.kube.update(CONFIGMAPS, namespace, name, current)

    def compact_watch_history(self) -> int:
        """Drop the watch event history: a watch resuming from an older resourceVersion gets 410 Gone."""
        return self.kube.compact()


def _check_vm_state(vm_state: str) -> None:
    if vm_state not in VM_STATES:
        raise ValueError(f"unknown vm_state {vm_state!r}; Nova's are {sorted(VM_STATES)}")
