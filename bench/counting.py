"""What the benchmark counts, from what the simulator recorded, and the physical minimum it compares to.

Every figure here is derived from the simulator's own records (``SimulatorState.api_calls`` and
``metadata_history``), never from what a strategy says it did.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from landb_simulator import ApiCall, MetadataChange
from landb_webhook.landb.metadata import is_alias_key, read_aliases, split_tokens
from landb_webhook.landb.names import parse_token

NOVA_PAGE = 1000
"""The most servers one Nova listing returns (``limit`` <= 1000)."""

Metadata = Mapping[str, str]


def is_metadata_write(call: ApiCall) -> bool:
    return call.api == "nova" and call.method in {"POST", "PUT", "DELETE"} and "/metadata" in call.path


def is_lease(call: ApiCall) -> bool:
    """The writer Lease (leader election): renewed on its own clock, every few seconds, not per loop."""
    return call.api == "kubernetes" and "/leases" in call.path


def is_watch(call: ApiCall) -> bool:
    return call.api == "kubernetes" and any(
        part in {"watch=true", "watch=True", "watch=1"} for part in call.query.split("&")
    )


@dataclass(frozen=True)
class CallCounts:
    """Requests the simulator answered, by kind."""

    nova_reads: int = 0
    nova_writes: int = 0
    """Metadata POST / PUT / DELETE."""
    keystone: int = 0
    kubernetes: int = 0
    """Every Kubernetes request but the opening of a watch stream and the writer Lease's."""
    watches: int = 0
    leases: int = 0
    """Writer Lease requests that fell in the window (two per renewal, one every 2 s)."""

    @classmethod
    def of(cls, calls: Iterable[ApiCall]) -> CallCounts:
        kinds: Counter[str] = Counter()
        for call in calls:
            if is_metadata_write(call):
                kinds["nova_writes"] += 1
            elif call.api == "nova":
                kinds["nova_reads"] += 1
            elif call.api == "keystone":
                kinds["keystone"] += 1
            elif is_watch(call):
                kinds["watches"] += 1
            elif is_lease(call):
                kinds["leases"] += 1
            elif call.api == "kubernetes":
                kinds["kubernetes"] += 1
        return cls(**kinds)

    def __add__(self, other: CallCounts) -> CallCounts:
        return CallCounts(
            self.nova_reads + other.nova_reads,
            self.nova_writes + other.nova_writes,
            self.keystone + other.keystone,
            self.kubernetes + other.kubernetes,
            self.watches + other.watches,
            self.leases + other.leases,
        )

    @property
    def total(self) -> int:
        return self.nova_reads + self.nova_writes + self.keystone + self.kubernetes


def is_event_request(call: ApiCall) -> bool:
    """The event emitter's: it reads the Ingress, Service or route a name belongs to and writes its Event,
    on its own thread, off the request path (provider.watch.event_emitter)."""
    return call.api == "kubernetes" and any(
        part in call.path
        for part in ("/events", "/ingresses/", "/services/", "/httproutes/", "/grpcroutes/", "/tlsroutes/")
    )


def request_rounds(calls: Sequence[ApiCall]) -> int:
    """The fewest round trips an apply's requests other than its metadata writes take when the requests of
    a phase go out together (provider.together), as the design has them:

    - the reads an apply plans on (Nova's listing, the metadata quota, the state and the claims) are one
      round, as long as the longest chain in it: the pages of Nova's listing, each needing the one before;
    - the Kubernetes writes after the metadata writes (the claims dropped, the state stored) are one round;
    - every other request is a round of its own: a Keystone token (needed before anything), a Nova read
      that is neither the listing nor the quota (a departed server looked up once the state said which,
      an API version document), a Kubernetes write before the metadata writes (the claims stored).

    ``calls`` in the order they were answered. The writer Lease, the opening of a watch and the event
    emitter's requests are not an apply's."""
    first_write = next((i for i, call in enumerate(calls) if is_metadata_write(call)), len(calls))
    listing_pages = 0
    reads_together = writes_after = False
    alone = 0
    for position, call in enumerate(calls):
        if is_metadata_write(call) or is_lease(call) or is_watch(call) or is_event_request(call):
            continue
        if call.api not in {"nova", "keystone", "kubernetes"}:
            continue  # Octavia and Neutron: no latency injected, not counted (CallCounts)
        if (
            call.api == "nova"
            and call.method == "GET"
            and call.path.endswith(("/servers", "/servers/detail"))
        ):
            listing_pages += 1
        elif call.method == "GET" and (call.api == "kubernetes" or call.path.endswith("/limits")):
            reads_together = True
        elif call.api == "kubernetes" and position > first_write:
            writes_after = True
        else:
            alone += 1
    return max(listing_pages, int(reads_together)) + int(writes_after) + alone


def keys_rewritten(before: Mapping[str, Metadata], history: Sequence[MetadataChange]) -> int:
    """``landb-alias*`` keys whose value a write changed or removed, summed over the writes in
    ``history``; ``before`` is every server's metadata when the history starts."""
    current = {server: dict(metadata) for server, metadata in before.items()}
    count = 0
    for change in history:
        if change.method == "direct":
            continue
        old = current.get(change.server_id, {})
        new = change.metadata
        count += sum(
            1 for key in old.keys() | new.keys() if is_alias_key(key) and old.get(key) != new.get(key)
        )
        current[change.server_id] = dict(new)
    return count


def labels_of(metadata: Metadata) -> frozenset[str]:
    return frozenset(token.label for token in read_aliases(metadata).load_tokens())


def _indices(metadata: Metadata) -> dict[str, int]:
    return {token.label: token.index for token in read_aliases(metadata).load_tokens()}


def renumbered(before: Mapping[str, Metadata], after: Mapping[str, Metadata]) -> int:
    """Tokens kept by a server across the loop whose ``N`` changed."""
    count = 0
    for server, metadata in before.items():
        old, new = _indices(metadata), _indices(after.get(server, {}))
        count += sum(1 for label, index in old.items() if label in new and new[label] != index)
    return count


@dataclass(frozen=True)
class Minimum:
    writes: int
    """Requests: one merge POST per server that must hold a new value, one DELETE per key that must go."""
    keys: int
    """Keys whose value must change or disappear."""


def minimum_writes(before: Metadata, wanted: frozenset[str], *, max_length: int = 254) -> Minimum:
    """The fewest metadata writes that make one server carry exactly ``wanted`` (labels), keeping the
    ``N`` of every token it keeps (any N is valid, so keeping it costs nothing).

    A key whose tokens all go must be deleted (Nova has no multi-key delete short of replacing the
    whole metadata); a key that loses some must be rewritten; new tokens need at least
    ``ceil(length / max_length)`` keys written. With additions, an emptied key might be refilled
    instead of deleted, so emptied keys are then counted as rewritten, not deleted: a lower bound.
    """
    tokens_of = {key: split_tokens(value) for key, value in before.items() if is_alias_key(key)}
    held = labels_of(before)
    gone = held - wanted
    added = wanted - held
    touched = emptied = 0
    for tokens in tokens_of.values():
        labels = {parsed.label if (parsed := parse_token(t)) else t.lower() for t in tokens}
        if labels & gone:
            touched += 1
            if labels <= gone:
                emptied += 1
    added_length = sum(len(f"{label}--load-0-") + 1 for label in added) - 1 if added else 0
    added_keys = math.ceil(added_length / max_length) if added else 0
    if added:
        return Minimum(writes=1, keys=max(touched, added_keys) if touched else added_keys)
    kept_but_changed = touched - emptied
    return Minimum(writes=(1 if kept_but_changed else 0) + emptied, keys=touched)


def minimum_for(
    before: Mapping[str, Metadata], wanted: Mapping[str, frozenset[str]], *, max_length: int = 254
) -> Minimum:
    """Summed over servers: ``wanted`` maps each server that must carry something to its labels;
    every other server in ``before`` must carry none of the aliases in play."""
    writes = keys = 0
    for server, metadata in before.items():
        needed = minimum_writes(metadata, wanted.get(server, frozenset()), max_length=max_length)
        writes += needed.writes
        keys += needed.keys
    return Minimum(writes, keys)


def minimum_reads(cluster_servers: int) -> int:
    """Nova requests needed to know the metadata of the cluster's servers: one filtered listing per
    page of ``NOVA_PAGE`` (a filter naming exactly them fits one request at these sizes)."""
    return max(1, math.ceil(cluster_servers / NOVA_PAGE))


def converged(after: Mapping[str, Metadata], wanted: Mapping[str, frozenset[str]]) -> bool:
    """Every server carries exactly its wanted labels, and no two carriers of a label share an ``N``."""
    seen: set[tuple[str, int]] = set()
    for server, metadata in after.items():
        if labels_of(metadata) != wanted.get(server, frozenset()):
            return False
        for label, index in _indices(metadata).items():
            if (label, index) in seen:
                return False
            seen.add((label, index))
    return True


@dataclass(frozen=True)
class ServerWrites:
    """One server's metadata writes in one phase of an apply: a merge POST (or none), then DELETEs."""

    posts: int
    deletes: int


@dataclass(frozen=True)
class ApplyWrites:
    """The metadata writes of one apply, by phase: the phases cannot overlap (leave, then make before
    break: provider.apply)."""

    make: tuple[ServerWrites, ...] = ()
    brk: tuple[ServerWrites, ...] = ()
    leave: tuple[ServerWrites, ...] = ()
    """Writes before the first make write that add nothing: the removals of aliases leaving DNS, written
    first so that the room they free serves the apply's additions."""

    @property
    def phases(self) -> tuple[tuple[ServerWrites, ...], ...]:
        return (self.leave, self.make, self.brk)


def _tokens(metadata: Metadata) -> set[str]:
    return {token for key, value in metadata.items() if is_alias_key(key) for token in split_tokens(value)}


def apply_writes(before: Mapping[str, Metadata], history: Sequence[MetadataChange]) -> ApplyWrites:
    """Split the writes in ``history`` into leave, make and break phases, per server.

    A make write adds tokens the server did not hold; the others add none (they remove tokens, or move a
    kept one out of a key about to be deleted), and every DELETE is one of them: a leave write before the
    first make write, a break write after it (phases end before the next starts, so the order the writes
    landed in tells them apart). An apply that adds nothing has break writes only.
    """
    current = {server: dict(metadata) for server, metadata in before.items()}
    phases: dict[str, dict[str, list[int]]] = {"leave": {}, "make": {}, "brk": {}}
    made = False
    for change in history:
        if change.method == "direct":
            continue
        old = current.get(change.server_id, {})
        adds = change.method != "DELETE" and bool(_tokens(change.metadata) - _tokens(old))
        made = made or adds
        phase = "make" if adds else "brk" if made else "leave"
        counts = phases[phase].setdefault(change.server_id, [0, 0])
        counts[change.method == "DELETE"] += 1
        current[change.server_id] = dict(change.metadata)
    if not phases["make"]:
        phases["leave"], phases["brk"] = {}, phases["leave"]
    leave, make, brk = (tuple(ServerWrites(*c) for c in phases[p].values()) for p in ("leave", "make", "brk"))
    return ApplyWrites(make=make, brk=brk, leave=leave)


def phase_rounds(servers: Sequence[ServerWrites], concurrency: int) -> int:
    """The fewest rounds of ``concurrency`` simultaneous requests that carry out one phase, when a
    server's DELETEs may only start once its POST has landed.

    Greedy is optimal here (unit requests, trees of depth two): POSTs first, those that release the
    most DELETEs first, then any released DELETE.
    """
    waiting = sorted(servers, key=lambda s: s.deletes, reverse=True)
    posts = [s.deletes for s in waiting if s.posts]
    released = sum(s.deletes for s in waiting if not s.posts) + sum(s.posts - 1 for s in waiting if s.posts)
    rounds = 0
    while posts or released:
        rounds += 1
        now = posts[:concurrency]
        posts = posts[concurrency:]
        released -= min(released, concurrency - len(now))
        released += sum(now)
    return rounds
