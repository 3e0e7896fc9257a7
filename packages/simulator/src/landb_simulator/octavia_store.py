"""Octavia load balancers (and the Neutron floating IPs that point at their VIP ports), with Octavia's rules.

The rules whose order matters run here, under the simulator's lock, as Octavia runs them: body schema (400)
-> load balancer exists (404) -> policy, another project's load balancer included (403) -> mutable state
(409 while ``PENDING_*``) -> write. A PUT, even one that changes nothing, leaves the load balancer in
``PENDING_UPDATE``; it becomes ``ACTIVE`` again after ``settle_requests`` more requests that touch it
(show, list, update, delete), or when a test releases a hold. Counting requests, not seconds, keeps retry
tests deterministic.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from landb_simulator.identity import PROJECT_ID, Token

PROVISIONING_STATUSES = frozenset(
    {"ACTIVE", "DELETED", "ERROR", "PENDING_CREATE", "PENDING_UPDATE", "PENDING_DELETE"}
)
OPERATING_STATUSES = frozenset({"ONLINE", "DRAINING", "OFFLINE", "DEGRADED", "ERROR", "NO_MONITOR"})
MAX_TAG_LENGTH = 255
MAX_NAME_LENGTH = 255

_NAMESPACE = uuid.UUID("3f9c8e1a-5b7d-4c2e-9a6f-8d1b0e4c7a52")
VIP_NETWORK_ID = str(uuid.uuid5(_NAMESPACE, "network:CERN_NETWORK"))
VIP_SUBNET_ID = str(uuid.uuid5(_NAMESPACE, "subnet:CERN_NETWORK"))
FLOATING_NETWORK_ID = str(uuid.uuid5(_NAMESPACE, "network:CERN_EXTERNAL"))

_POLICY_REFUSED = "Policy does not allow this request to be performed."


def _timestamp() -> str:
    """Octavia's timestamps: seconds, no zone suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")


class OctaviaError(Exception):
    """An Octavia (or Neutron) fault with its HTTP status; the HTTP layer renders the API's error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class LoadBalancerInfo:
    id: str
    name: str
    description: str
    project_id: str
    vip_address: str
    vip_port_id: str
    vip_subnet_id: str
    vip_network_id: str
    provisioning_status: str
    operating_status: str
    admin_state_up: bool
    tags: tuple[str, ...]
    """Sorted, without duplicates, as Octavia returns them."""
    created_at: str
    updated_at: str | None
    provider: str = "amphora"
    flavor_id: str | None = None
    availability_zone: str | None = None


@dataclass(frozen=True)
class TagChange:
    """One successful change of a load balancer's tags, in global order across load balancers."""

    seq: int
    load_balancer_id: str
    method: str
    """``PUT`` (through the API) or ``direct`` (set by a test)."""
    tags: tuple[str, ...]
    """The load balancer's complete tag list after the change."""


@dataclass(frozen=True)
class FloatingIpInfo:
    id: str
    floating_ip_address: str
    port_id: str | None
    fixed_ip_address: str | None
    project_id: str
    status: str
    floating_network_id: str = FLOATING_NETWORK_ID


@dataclass
class _LoadBalancer:
    info: LoadBalancerInfo
    pending_left: int | None = 0
    """While ``PENDING_*``: how many more requests touching it still see that; None: until released."""


class PendingHold:
    """Returned by ``hold_pending``: ``release()`` ends the hold (the load balancer is ``ACTIVE`` again)."""

    def __init__(self, store: LoadBalancerStore, load_balancer_id: str) -> None:
        self._store = store
        self.load_balancer_id = load_balancer_id

    def release(self) -> None:
        self._store.release_pending(self.load_balancer_id)


_FILTERABLE = (
    "id",
    "name",
    "description",
    "project_id",
    "provisioning_status",
    "operating_status",
    "vip_address",
    "vip_port_id",
    "vip_subnet_id",
    "vip_network_id",
    "provider",
    "flavor_id",
    "availability_zone",
)
TAG_FILTERS = ("tags", "tags-any", "not-tags", "not-tags-any")


@dataclass(frozen=True)
class LoadBalancerQuery:
    """The filters of ``GET /v2/lbaas/loadbalancers`` after parsing: exact matches, then the tag rules."""

    equals: Mapping[str, str] = field(default_factory=dict)
    admin_state_up: bool | None = None
    tags: frozenset[str] = frozenset()
    tags_any: frozenset[str] = frozenset()
    not_tags: frozenset[str] = frozenset()
    not_tags_any: frozenset[str] = frozenset()

    def matches(self, lb: LoadBalancerInfo) -> bool:
        if any(getattr(lb, key) != value for key, value in self.equals.items()):
            return False
        if self.admin_state_up is not None and lb.admin_state_up != self.admin_state_up:
            return False
        held = set(lb.tags)
        if not self.tags <= held:
            return False
        if self.tags_any and not self.tags_any & held:
            return False
        if self.not_tags and self.not_tags <= held:
            return False
        return not self.not_tags_any & held


def filterable_fields() -> tuple[str, ...]:
    return (*_FILTERABLE, "admin_state_up")


class LoadBalancerStore:
    """Load balancers and floating IPs, guarded by the simulator's lock. Every accessor returns a copy."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._load_balancers: dict[str, _LoadBalancer] = {}
        self._floating_ips: dict[str, FloatingIpInfo] = {}
        self._history: list[TagChange] = []
        self._seq = itertools.count(1)
        self._settle_requests = 0
        self._observer: Callable[[TagChange], None] | None = None

    # -- test hooks ------------------------------------------------------------------------------------

    def add_load_balancer(
        self,
        name: str,
        vip_address: str,
        *,
        tags: Iterable[str] = (),
        project_id: str = PROJECT_ID,
        load_balancer_id: str | None = None,
        vip_port_id: str | None = None,
        description: str = "",
        provisioning_status: str = "ACTIVE",
        operating_status: str = "ONLINE",
        floating_ip: str | None = None,
    ) -> str:
        """Create a load balancer as if Octavia had built it (no quota, no network checks); returns its id.

        ``floating_ip`` also creates a Neutron floating IP bound to the VIP port. ``project_id`` other
        than the simulator's project makes a load balancer the webhook's users cannot see.
        """
        _check_status(provisioning_status, PROVISIONING_STATUSES, "provisioning_status")
        _check_status(operating_status, OPERATING_STATUSES, "operating_status")
        _check_tags(list(tags))
        lb_id = load_balancer_id or str(uuid.uuid4())
        port_id = vip_port_id or str(uuid.uuid5(_NAMESPACE, f"vip-port:{lb_id}"))
        info = LoadBalancerInfo(
            id=lb_id,
            name=name,
            description=description,
            project_id=project_id,
            vip_address=vip_address,
            vip_port_id=port_id,
            vip_subnet_id=VIP_SUBNET_ID,
            vip_network_id=VIP_NETWORK_ID,
            provisioning_status=provisioning_status,
            operating_status=operating_status,
            admin_state_up=True,
            tags=_normalised(tags),
            created_at=_timestamp(),
            updated_at=None,
        )
        with self._lock:
            if lb_id in self._load_balancers:
                raise ValueError(f"load balancer {lb_id} already exists")
            pending = None if provisioning_status.startswith("PENDING_") else 0
            self._load_balancers[lb_id] = _LoadBalancer(info, pending_left=pending)
            if info.tags:
                self._record(lb_id, "direct")
            if floating_ip is not None:
                self.add_floating_ip(floating_ip, port_id=port_id, fixed_ip_address=vip_address)
        return lb_id

    def delete_load_balancer(self, load_balancer_id: str) -> None:
        """Remove it at once (and unbind floating IPs from its VIP port), as a finished delete leaves it."""
        with self._lock:
            lb = self._require(load_balancer_id)
            del self._load_balancers[load_balancer_id]
            self._unbind_port(lb.info.vip_port_id)

    def load_balancer(self, load_balancer_id: str) -> LoadBalancerInfo:
        """The current view, without counting as a request; KeyError if there is none."""
        with self._lock:
            return self._require(load_balancer_id).info

    def load_balancers(self) -> list[LoadBalancerInfo]:
        """Every load balancer of every project, in creation order."""
        with self._lock:
            return [lb.info for lb in self._load_balancers.values()]

    def set_tags_direct(self, load_balancer_id: str, tags: Iterable[str]) -> None:
        """Replace the tags without any API rule (seeding, another tool's write); recorded as ``direct``."""
        tags = list(tags)
        _check_tags(tags)
        with self._lock:
            lb = self._require(load_balancer_id)
            lb.info = replace(lb.info, tags=_normalised(tags), updated_at=_timestamp())
            self._record(load_balancer_id, "direct")

    def set_status(
        self, load_balancer_id: str, *, provisioning: str | None = None, operating: str | None = None
    ) -> None:
        """Set a status for good (``ERROR``, ``OFFLINE``); a ``PENDING_*`` set here holds until released."""
        with self._lock:
            lb = self._require(load_balancer_id)
            if provisioning is not None:
                _check_status(provisioning, PROVISIONING_STATUSES, "provisioning_status")
                lb.info = replace(lb.info, provisioning_status=provisioning)
                lb.pending_left = None if provisioning.startswith("PENDING_") else 0
            if operating is not None:
                _check_status(operating, OPERATING_STATUSES, "operating_status")
                lb.info = replace(lb.info, operating_status=operating)

    def hold_pending(
        self, load_balancer_id: str, *, requests: int | None = None, status: str = "PENDING_UPDATE"
    ) -> PendingHold:
        """Put the load balancer in ``status`` now: the next ``requests`` requests touching it see that
        (a PUT or DELETE among them answers 409), then it is ``ACTIVE``; None holds until released."""
        if not status.startswith("PENDING_") or status not in PROVISIONING_STATUSES:
            raise ValueError(f"status must be a PENDING_* provisioning status, not {status!r}")
        if requests is not None and requests < 1:
            raise ValueError("requests must be positive or None")
        with self._lock:
            lb = self._require(load_balancer_id)
            lb.info = replace(lb.info, provisioning_status=status)
            lb.pending_left = requests
        return PendingHold(self, load_balancer_id)

    def release_pending(self, load_balancer_id: str) -> None:
        """End a hold (or a PUT's settling): the load balancer is ``ACTIVE`` again."""
        with self._lock:
            lb = self._require(load_balancer_id)
            if lb.info.provisioning_status.startswith("PENDING_"):
                lb.info = replace(lb.info, provisioning_status="ACTIVE")
            lb.pending_left = 0

    @property
    def settle_requests(self) -> int:
        """How many requests touching a load balancer still see it ``PENDING_UPDATE`` after a PUT (0: the
        PUT's own reply shows ``PENDING_UPDATE``, the next request ``ACTIVE``)."""
        with self._lock:
            return self._settle_requests

    @settle_requests.setter
    def settle_requests(self, count: int) -> None:
        if count < 0:
            raise ValueError("settle_requests must not be negative")
        with self._lock:
            self._settle_requests = count

    def add_floating_ip(
        self,
        address: str,
        *,
        port_id: str | None = None,
        fixed_ip_address: str | None = None,
        project_id: str = PROJECT_ID,
    ) -> str:
        """A Neutron floating IP, bound to ``port_id`` (a VIP port) or unbound; returns its id."""
        fip_id = str(uuid.uuid5(_NAMESPACE, f"floating-ip:{address}"))
        with self._lock:
            if any(fip.floating_ip_address == address for fip in self._floating_ips.values()):
                raise ValueError(f"floating IP {address} already exists")
            self._floating_ips[fip_id] = FloatingIpInfo(
                id=fip_id,
                floating_ip_address=address,
                port_id=port_id,
                fixed_ip_address=fixed_ip_address if port_id else None,
                project_id=project_id,
                status="ACTIVE" if port_id else "DOWN",
            )
        return fip_id

    def floating_ips(self) -> list[FloatingIpInfo]:
        with self._lock:
            return list(self._floating_ips.values())

    # -- history ---------------------------------------------------------------------------------------

    def tag_history(self, load_balancer_id: str | None = None) -> list[TagChange]:
        """Every successful tag change (optionally of one load balancer), in global order."""
        with self._lock:
            return [c for c in self._history if load_balancer_id in (None, c.load_balancer_id)]

    def clear_tag_history(self) -> None:
        with self._lock:
            self._history.clear()

    def observe_tag_changes(self, observer: Callable[[TagChange], None] | None) -> None:
        """Call ``observer`` with each tag change as it lands, before its reply is sent; None stops it."""
        with self._lock:
            self._observer = observer

    def _record(self, load_balancer_id: str, method: str) -> None:
        tags = self._load_balancers[load_balancer_id].info.tags
        change = TagChange(next(self._seq), load_balancer_id, method, tags)
        self._history.append(change)
        if self._observer is not None:
            self._observer(change)

    # -- the API's rules -------------------------------------------------------------------------------

    def show(self, caller: Token, load_balancer_id: str) -> LoadBalancerInfo:
        """``GET /v2/lbaas/loadbalancers/{id}``: 404 -> 403 (policy, another project)."""
        with self._lock:
            lb = self._visible(caller, load_balancer_id, write=False)
            self._touch(lb)
            return lb.info

    def select(
        self, caller: Token, query: LoadBalancerQuery, project_id: str | None
    ) -> list[LoadBalancerInfo]:
        """``GET /v2/lbaas/loadbalancers``: the caller's project (every project for an admin that names
        none), filtered, oldest first. A member asking for another project gets 403."""
        if not caller.can_read():
            raise OctaviaError(403, _POLICY_REFUSED)
        if project_id is not None and project_id != caller.project_id and not caller.is_admin():
            raise OctaviaError(403, _POLICY_REFUSED)
        scope = project_id if project_id is not None or caller.is_admin() else caller.project_id
        with self._lock:
            selected = []
            for lb in self._load_balancers.values():
                if scope is not None and lb.info.project_id != scope:
                    continue
                if query.matches(self._as_touched(lb)):
                    # Only what the list returns counts as touched: a hold on one load balancer is not
                    # used up by lists that never show it.
                    self._touch(lb)
                    selected.append(lb.info)
            return selected

    def update(self, caller: Token, load_balancer_id: str, changes: Mapping[str, object]) -> LoadBalancerInfo:
        """``PUT /v2/lbaas/loadbalancers/{id}`` after schema validation: 404 -> 403 -> 409 -> write.

        ``tags`` replaces the whole list; a PUT that changes nothing still moves to ``PENDING_UPDATE``.
        """
        with self._lock:
            lb = self._visible(caller, load_balancer_id, write=True)
            self._touch(lb)
            self._require_mutable(lb)
            updated = lb.info
            if "name" in changes:
                updated = replace(updated, name=str(changes["name"] or ""))
            if "description" in changes:
                updated = replace(updated, description=str(changes["description"] or ""))
            if "admin_state_up" in changes:
                updated = replace(updated, admin_state_up=bool(changes["admin_state_up"]))
            tags = changes.get("tags")
            if tags is not None:
                assert isinstance(tags, Sequence)
                updated = replace(updated, tags=_normalised(str(tag) for tag in tags))
            lb.info = replace(updated, provisioning_status="PENDING_UPDATE", updated_at=_timestamp())
            lb.pending_left = self._settle_requests
            if tags is not None:
                self._record(load_balancer_id, "PUT")
            return lb.info

    def delete(self, caller: Token, load_balancer_id: str) -> None:
        """``DELETE /v2/lbaas/loadbalancers/{id}``: 404 -> 403 -> 409; then gone at once."""
        with self._lock:
            lb = self._visible(caller, load_balancer_id, write=True)
            self._touch(lb)
            self._require_mutable(lb)
            del self._load_balancers[load_balancer_id]
            self._unbind_port(lb.info.vip_port_id)

    def visible_floating_ips(self, caller: Token) -> list[FloatingIpInfo]:
        """What Neutron lists for this caller: its project's floating IPs (every project's for an admin)."""
        if not caller.can_read():
            raise OctaviaError(403, "rule:get_floatingip is disallowed by policy")
        with self._lock:
            return [
                fip
                for fip in self._floating_ips.values()
                if caller.is_admin() or fip.project_id == caller.project_id
            ]

    def _visible(self, caller: Token, load_balancer_id: str, *, write: bool) -> _LoadBalancer:
        lb = self._load_balancers.get(load_balancer_id)
        if lb is None:
            raise OctaviaError(404, f"Load Balancer {load_balancer_id} not found.")
        allowed = caller.can_write() if write else caller.can_read()
        if not allowed or (lb.info.project_id != caller.project_id and not caller.is_admin()):
            raise OctaviaError(403, _POLICY_REFUSED)
        return lb

    @staticmethod
    def _as_touched(lb: _LoadBalancer) -> LoadBalancerInfo:
        """What a request reaching the load balancer now would show (``_touch`` without the change)."""
        if lb.info.provisioning_status.startswith("PENDING_") and lb.pending_left == 0:
            return replace(lb.info, provisioning_status="ACTIVE")
        return lb.info

    def _touch(self, lb: _LoadBalancer) -> None:
        """A request reaches the load balancer: one more step towards the end of its ``PENDING_*``."""
        if not lb.info.provisioning_status.startswith("PENDING_") or lb.pending_left is None:
            return
        if lb.pending_left == 0:
            lb.info = replace(lb.info, provisioning_status="ACTIVE")
        else:
            lb.pending_left -= 1

    @staticmethod
    def _require_mutable(lb: _LoadBalancer) -> None:
        status = lb.info.provisioning_status
        if status.startswith("PENDING_"):
            raise OctaviaError(409, f"Invalid state {status} of loadbalancer resource {lb.info.id}")

    def _require(self, load_balancer_id: str) -> _LoadBalancer:
        try:
            return self._load_balancers[load_balancer_id]
        except KeyError:
            raise KeyError(f"no load balancer {load_balancer_id}") from None

    def _unbind_port(self, port_id: str) -> None:
        for fip_id, fip in list(self._floating_ips.items()):
            if fip.port_id == port_id:
                self._floating_ips[fip_id] = replace(fip, port_id=None, fixed_ip_address=None, status="DOWN")


def _normalised(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(tags)))


def _check_tags(tags: Sequence[object]) -> None:
    for tag in tags:
        if not isinstance(tag, str) or len(tag) > MAX_TAG_LENGTH:
            raise ValueError(f"a tag is a string of at most {MAX_TAG_LENGTH} characters, not {tag!r}")


def _check_status(status: str, known: frozenset[str], what: str) -> None:
    if status not in known:
        raise ValueError(f"unknown {what} {status!r}; Octavia's are {sorted(known)}")
