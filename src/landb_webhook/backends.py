"""The provider's view of the outside world (the *ports* of design.md): small Protocols for the
backends it talks to, and the values that cross them.

Adapters (Kubernetes, OpenStack, ConfigMap, in memory) implement these; the provider and the domain
core never import a client library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from landb_webhook.endpoint import Endpoint
from landb_webhook.landb.propagation import Answer


@dataclass(frozen=True)
class Node:
    """A Kubernetes node as far as we care: where its server is and whether it takes ingress traffic."""

    name: str
    server_id: str | None
    """Nova server UUID from ``spec.providerID``; None when the node has none (match by name then)."""
    internal_ips: tuple[str, ...]
    """InternalIP addresses, IPv4 only, sorted."""
    is_ingress: bool
    ready: bool = True
    """The Ready condition's status is "True"; a node without the condition is not ready."""
    ready_changed_at: float | None = None
    """Epoch seconds of the Ready condition's lastTransitionTime; None when unknown."""
    deleting: bool = False
    """``metadata.deletionTimestamp`` is set: the node is on its way out (finalizers still hold it)."""
    deleting_since: float | None = None
    """Epoch seconds of ``metadata.deletionTimestamp``; None when not being deleted or unknown."""
    unschedulable: bool = False
    """``spec.unschedulable``: the node is cordoned."""
    controller_ready: bool | None = None
    """A Ready ingress-controller pod runs on the node; None when no pod selector is configured."""
    controller_changed_at: float | None = None
    """Epoch seconds since when the node has had no Ready controller pod; None when unknown."""


@dataclass(frozen=True)
class Server:
    id: str
    name: str
    metadata: Mapping[str, str] = field(default_factory=dict)


class UpstreamError(Exception):
    """A remote API (Nova, Keystone, Kubernetes) failed or timed out; the webhook answers 503."""

    def __init__(
        self, upstream: str, reason: str, *, retryable: bool = True, status: int | None = None
    ) -> None:
        super().__init__(f"{upstream}: {reason}")
        self.upstream = upstream
        self.reason = reason
        self.retryable = retryable
        self.status = status
        """The HTTP status the upstream answered, None when it answered none (a timeout, a refusal)."""


class NodeSource(Protocol):
    def nodes(self) -> Sequence[Node]:
        """Every node of the cluster (ingress or not). Raises UpstreamError until the first sync."""
        ...


class ServerStore(Protocol):
    def servers_for(self, nodes: Sequence[Node]) -> Mapping[str, Server]:
        """Map node name -> its Nova server, for the nodes whose server can be found unambiguously."""
        ...

    def server(self, server_id: str) -> Server | None:
        """The server with this id; None when Nova answers that it does not exist (404), or when it belongs
        to another project than the credential's (an admin's token reads every project's)."""
        ...

    def set_metadata(self, server_id: str, items: Mapping[str, str]) -> None:
        """Merge ``items`` into the server's metadata (one POST); other keys are kept."""
        ...

    def delete_metadata(self, server_id: str, key: str) -> None:
        """Delete one key; a key that is already gone counts as deleted."""
        ...

    def max_metadata_items(self) -> int:
        """The per-server metadata quota (``maxServerMeta``)."""
        ...

    def unavailable(self) -> str | None:
        """Why the cloud cannot be used, judged from recent calls (no remote call); None when it can."""
        ...


class OwnershipStore(Protocol):
    """Where external-dns' TXT ownership records live, since LanDB cannot hold them."""

    def records(self) -> Sequence[Endpoint]: ...

    def apply(self, upserts: Sequence[Endpoint], deletes: Sequence[Endpoint]) -> None:
        """Store ``upserts`` verbatim (keyed by :func:`ownership_key`) and drop ``deletes``.

        Deleting a missing record succeeds; upserting a missing one creates it.
        """
        ...


def ownership_key(record: Endpoint) -> tuple[str, str]:
    """The identity of an ownership record in every OwnershipStore: (lower-case name, setIdentifier);
    its type is always TXT."""
    return (record.dns_name.lower(), record.set_identifier)


class StateStore(Protocol):
    """A few facts the provider must not forget at a restart (the webhook's state ConfigMap): text by key.

    Written by ApplyChanges only, by the one writer; read at start and before each apply."""

    def load(self) -> Mapping[str, str]: ...

    def save(self, data: Mapping[str, str]) -> None:
        """Replace what is stored with ``data``."""
        ...


class WriterLease(Protocol):
    """Which one of several webhook replicas may write (adapters.lease: a Kubernetes Lease)."""

    def held(self) -> bool:
        """True while this replica may write; may wait briefly for the first election round."""
        ...

    def holder(self) -> str:
        """The replica that may write, as far as this one knows (for the refusal message)."""
        ...

    def tenure(self) -> int | None:
        """This replica's current unbroken stretch of holding, or None when it may not write now."""
        ...

    def held_until(self, tenure: int) -> float:
        """The ``time.monotonic()`` moment until which ``tenure`` surely lasts (minus infinity once it
        has ended): a write sent before it cannot meet another replica's."""
        ...


@dataclass(frozen=True)
class LoadBalancer:
    """An Octavia load balancer of the project: where its traffic arrives and its tags."""

    id: str
    name: str
    vip_address: str
    floating_ips: tuple[str, ...] = ()
    """The floating IPs on the VIP's port (Neutron)."""
    tags: tuple[str, ...] = ()
    description: str = ""
    """What its maker wrote about it: the cloud controller manager names the Service it serves
    (provider.ownership.tenancy ``service_of``)."""

    @property
    def addresses(self) -> tuple[str, ...]:
        """The VIP and its floating IPs: what a LoadBalancer Service's status may show."""
        return (self.vip_address, *self.floating_ips) if self.vip_address else self.floating_ips


class LoadBalancerStore(Protocol):
    """The project's Octavia load balancers (adapters.octavia)."""

    def load_balancers(self) -> Sequence[LoadBalancer]:
        """Every load balancer of the credential's project (never another project's, whatever the
        credential's role), with its VIP, the VIP's floating IPs of that project and its tags."""
        ...

    def update_tags(self, load_balancer_id: str, add: Sequence[str], remove: Sequence[str]) -> None:
        """Add the ``landb-alias=`` tags of ``add`` and remove those of ``remove``, reading the tags
        afresh first and keeping every other tag (Octavia replaces the whole list)."""
        ...


class NameLookup(Protocol):
    """What DNS answers for a name (adapters.dns), asked before a name's first write (provider.first_look)."""

    where: str
    """The resolvers asked, for log lines."""

    def resolve(self, dns_name: str) -> Answer:
        """The name's A records, a CNAME, no such name, or ``NoAnswer`` when the resolvers failed or did
        not answer within the adapter's timeout: never raises. Thread-safe, no cache."""
        ...


@dataclass(frozen=True)
class Ports:
    """The backends the provider talks to, typed by their Protocols, passed whole: what the provider and
    ``status`` may ask of them, whatever implements them (wiring.Adapters holds the configured adapters by
    their concrete types, for the start-up and shut-down work, and hands them over as Ports)."""

    nodes: NodeSource
    servers: ServerStore
    ownership: OwnershipStore
    state: StateStore | None = None
    """Where what must survive a restart is kept; None: in memory only."""
    load_balancers: LoadBalancerStore | None = None
    """None: every name is published on the ingress nodes (provider.loadbalancers)."""
    writer_lease: WriterLease | None = None
    """None: this is the only replica, it always writes; the one-shot commands never hold one."""
    names: NameLookup | None = None
    """DNS, asked before a name's first write; None (LANDB_DNS_WATCH=false): names are written unasked."""


@dataclass(frozen=True)
class ObjectRef:
    """A Kubernetes object an event is about: an Ingress, a Service or a Gateway API route."""

    kind: str
    """``Ingress``, ``Service``, ``HTTPRoute``, ``GRPCRoute`` or ``TLSRoute``."""
    namespace: str
    name: str


@dataclass(frozen=True)
class KubeEvent:
    """One events.k8s.io/v1 Event as the provider decides it (provider.events); the sink adds the
    reporting controller and instance and the object's uid."""

    name: str
    """The Event's own name, in the object's namespace (``<object>.<hex>``, as client-go names them)."""
    regarding: ObjectRef
    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    action: str
    note: str
    """At most 1 KiB of UTF-8."""
    first_at: float
    """Epoch seconds of the first occurrence (``eventTime``)."""
    last_at: float
    """Epoch seconds of the last occurrence (``series.lastObservedTime`` when ``count`` > 1)."""
    count: int
    """1: a new event, to create; more: a repeat, whose series is updated."""


class EventWriteFailed(Exception):
    """An event was not written. ``kind`` is a fixed word for the metric: ``forbidden`` (RBAC),
    ``object_gone`` (the object the event is about no longer exists), ``event_gone`` (the event to update
    expired), ``unavailable`` (the API failed or did not answer), ``invalid`` (the API refused it)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class EventSink(Protocol):
    """Where events are written (adapters.events: the Kubernetes events.k8s.io/v1 API)."""

    def write(self, event: KubeEvent) -> None:
        """Create the event (``count`` 1), or PATCH its series (count, last observed time). Raises
        EventWriteFailed, never anything else; a series update of an event that is gone raises it with
        ``event_gone``. A new event names the object by the uid it had when last read; ``forget`` makes
        the next one read it again."""
        ...

    def forget(self, regarding: ObjectRef) -> None:
        """``regarding`` may have been deleted or re-created since it was last read: its next new event
        reads it again (its uid, or that it is gone). Never a request, never an exception."""
        ...
