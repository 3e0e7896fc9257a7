"""A tiny model of Nova applying a plan, and views of a fleet the properties compare.

``apply_write`` has Nova's semantics and nothing more: one merge POST (the given keys are set, every
other key is kept), then one DELETE per key, which would be a 404 if the key were missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from landb_webhook.landb.metadata import read_aliases
from landb_webhook.landb.names import LoadToken, parse_token
from landb_webhook.landb.plan import MetadataWrite, Plan, ServerState

Step = tuple[str, MetadataWrite]
"""(server id, write): one server's make or break write."""


def apply_write(metadata: Mapping[str, str], write: MetadataWrite) -> dict[str, str]:
    merged = {**metadata, **write.upserts}
    for key in write.deletes:
        assert key in merged, f"DELETE of missing key {key!r} would be a 404"
        del merged[key]
    return merged


def leave_steps(plan: Plan) -> list[Step]:
    return [(p.server.server_id, p.leave_write) for p in plan.servers if p.leave_write]


def make_steps(plan: Plan) -> list[Step]:
    return [(p.server.server_id, p.make_write) for p in plan.servers if p.make_write]


def break_steps(plan: Plan) -> list[Step]:
    return [(p.server.server_id, p.break_write) for p in plan.servers if p.break_write]


def replay(servers: Sequence[ServerState], steps: Iterable[Step]) -> Iterator[list[ServerState]]:
    """The fleet after each step, in order."""
    current = {s.server_id: s for s in servers}
    for server_id, write in steps:
        server = current[server_id]
        current[server_id] = replace(server, metadata=apply_write(server.metadata, write))
        yield list(current.values())


def apply_plan(servers: Sequence[ServerState], plan: Plan) -> list[ServerState]:
    """Every leave write, every make write, then every break write: the executor's order."""
    states = list(replay(servers, [*leave_steps(plan), *make_steps(plan), *break_steps(plan)]))
    return states[-1] if states else list(servers)


def by_id(servers: Iterable[ServerState]) -> dict[str, ServerState]:
    return {s.server_id: s for s in servers}


def slot_texts(server: ServerState) -> dict[int, tuple[str, ...]]:
    return dict(read_aliases(server.metadata).slots)


def editable_texts(server: ServerState, label: str) -> list[str]:
    """The token texts of ``label`` in the server's slots, in slot order."""
    return [
        text for _, text, token in read_aliases(server.metadata).editable_tokens() if token.label == label
    ]


def frozen_holders(servers: Iterable[ServerState], label: str) -> set[str]:
    return {
        s.server_id
        for s in servers
        if any(t.label == label for t in read_aliases(s.metadata).frozen_tokens())
    }


def plain_holders(servers: Iterable[ServerState], label: str) -> set[str]:
    """Servers holding ``label`` as a plain (CNAME) alias, in any key or form."""
    return {
        s.server_id for s in servers if any(p == label for p, _ in read_aliases(s.metadata).plain_aliases())
    }


def indices_by_server(servers: Iterable[ServerState], label: str) -> dict[str, set[int]]:
    """server id -> every N it carries ``label`` with, in any key or form."""
    return {
        s.server_id: {t.index for t in read_aliases(s.metadata).load_tokens() if t.label == label}
        for s in servers
    }


def all_tokens(server: ServerState) -> Counter[LoadToken]:
    return Counter(read_aliases(server.metadata).load_tokens())


def is_token_of(text: str, labels: Iterable[str]) -> bool:
    token = parse_token(text)
    return token is not None and token.label in set(labels)


def non_alias_items(server: ServerState) -> dict[str, str]:
    return {k: v for k, v in server.metadata.items() if not k.startswith("landb-alias")}


def smallest_free(taken: Iterable[int], floor: int, count: int) -> list[int]:
    """The ``count`` smallest integers >= ``floor`` not in ``taken`` (the spec of a new N)."""
    used = set(taken)
    found: list[int] = []
    candidate = floor
    while len(found) < count:
        if candidate not in used:
            found.append(candidate)
        candidate += 1
    return found


def refusals_of(plan: Plan, *kinds: str) -> set[tuple[str, str]]:
    return {(r.label, r.server.server_id) for r in plan.refusals if r.kind in kinds}


def blocked_by_a_plain_alias(plan: Plan) -> set[str]:
    """Labels that needed a carrier added while the name is a plain alias: nothing of them moves."""
    return {label for label, _ in refusals_of(plan, "plain_alias")}
