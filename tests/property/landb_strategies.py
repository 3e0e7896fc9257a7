"""Hypothesis strategies for the landb domain: labels, token texts, server metadata, fleets, wanted maps.

The generated metadata is deliberately messy, the way hand-edited servers are: odd-case tokens
(``App--LOAD-3-``), plain CNAME aliases, unknown forms, spaces and trailing commas, empty values, keys
LanDB reads that we must never edit (``landb-alias1``, ``landb-alias-extra``, per-interface values), and
foreign keys (``landb-mainuser``, ``cern-*``, user keys).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from landb_webhook.landb.metadata import slot_key
from landb_webhook.landb.names import LOAD_MARKER, LoadToken
from landb_webhook.landb.plan import Plan, ServerState, plan_changes

DOMAIN = "cern.ch"

VALID_LABEL_PATTERN = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
valid_labels = st.from_regex(VALID_LABEL_PATTERN, fullmatch=True).filter(
    lambda label: LOAD_MARKER not in label
)

LABEL_POOL = ("app", "web", "db-1", "x9", "a-very-long-alias-name")
"""Few labels, so that servers collide on them; the longest decides the smallest usable max_length."""

LONGEST_TOKEN = len("a-very-long-alias-name--load-999-")

PLAIN_ALIASES = ("plain", "app", "someone-else")
"""Plain (CNAME) aliases; ``app`` is also in the label pool, so a name is sometimes held both ways."""
NOT_LOAD_TOKENS = (*PLAIN_ALIASES, "weird--load-x-", "app--load-", "-bad--load-1-")
"""Texts LanDB may find in a value that are not ``<label>--load-N-``: CNAME aliases and unknown forms."""

FOREIGN_KEYS = (
    "landb-mainuser",
    "landb-responsible",
    "landb-os",
    "landb-set",
    "cern-services",
    "cern-activity",
    "owner",
    "Landb-Alias",
)
FROZEN_KEYS = ("landb-alias1", "landb-alias-extra", "landb-alias02", "landb-alias ")
"""Keys LanDB reads aliases from but that are not slots: we read them and never write them."""

INTERFACES = ("host.cern.ch", "host-eth1.cern.ch", "host-ipv6.cern.ch")
NODE_NAMES = ("node-a", "node-b", "node-c")
"""Few names, so that the (server name, server id) tie-break is exercised."""


# Strategies built once: building them inside a composite on every draw dominates the run time.
_spellings = st.sampled_from((str.lower, str.upper, str.capitalize))
_infixes = st.sampled_from(("load", "LOAD", "Load"))
_separators = st.sampled_from((",", ", ", " , "))
_trailing_comma = st.sampled_from(("", ","))
_not_load_tokens = st.sampled_from(NOT_LOAD_TOKENS)
_pool_labels = st.sampled_from(LABEL_POOL)
_small_indices = st.integers(0, 3)
_one_in_four = st.integers(0, 3).map(lambda n: n == 0)
_one_in_three = st.integers(0, 2).map(lambda n: n == 0)
_interfaces = st.lists(st.sampled_from(INTERFACES), min_size=1, max_size=2, unique=True)
_foreign_keys = st.sets(st.sampled_from(FOREIGN_KEYS), max_size=3)
_foreign_values = st.sampled_from(("", "jdoe", "app--load-0-", "host.cern.ch:x", "a,b"))
_slot_numbers = st.sets(st.integers(1, 5), max_size=3)
_frozen_keys = st.sets(st.sampled_from(FROZEN_KEYS), max_size=2)


@st.composite
def load_tokens(
    draw: st.DrawFn,
    labels: st.SearchStrategy[str] | None = None,
    indices: st.SearchStrategy[int] | None = None,
) -> LoadToken:
    """Tokens of the label pool with small indices, so that servers collide on them."""
    label = draw(_pool_labels if labels is None else labels)
    return LoadToken(label, draw(_small_indices if indices is None else indices))


def spell(draw: st.DrawFn, token: LoadToken) -> str:
    """How a hand edit may spell ``token``: ``app--load-3-``, ``APP--LOAD-3-``, ``App--Load-3-``..."""
    return f"{draw(_spellings)(token.label)}--{draw(_infixes)}-{token.index}-"


def value_text(draw: st.DrawFn, tokens: Sequence[str]) -> str:
    """A comma-separated value holding ``tokens``, with the separators people actually type."""
    trailing = draw(_trailing_comma) if tokens else ""
    return draw(_separators).join(tokens) + trailing


def alias_list(
    draw: st.DrawFn, tokens: st.SearchStrategy[LoadToken], *, min_size: int = 0, max_size: int = 4
) -> tuple[list[str], list[LoadToken]]:
    """Token texts (load tokens and other forms, mixed) and the load tokens they stand for."""
    texts: list[str] = []
    expected: list[LoadToken] = []
    for _ in range(draw(st.integers(min_size, max_size))):
        if draw(_one_in_four):
            texts.append(draw(_not_load_tokens))
        else:
            token = draw(tokens)
            texts.append(spell(draw, token))
            expected.append(token)
    return texts, expected


def per_interface_value(draw: st.DrawFn, tokens: st.SearchStrategy[LoadToken]) -> tuple[str, list[LoadToken]]:
    """``host.cern.ch:a--load-0-,b;host-eth1.cern.ch:c--load-2-`` and the load tokens it holds."""
    parts: list[str] = []
    expected: list[LoadToken] = []
    for interface in draw(_interfaces):
        texts, found = alias_list(draw, tokens, min_size=1, max_size=3)
        parts.append(f"{interface}:{','.join(texts)}")
        expected.extend(found)
    return ";".join(parts), expected


@st.composite
def per_interface_values(
    draw: st.DrawFn, tokens: st.SearchStrategy[LoadToken]
) -> tuple[str, list[LoadToken]]:
    return per_interface_value(draw, tokens)


def frozen_value(draw: st.DrawFn, tokens: st.SearchStrategy[LoadToken]) -> tuple[str, list[LoadToken]]:
    if draw(st.booleans()):
        return per_interface_value(draw, tokens)
    texts, expected = alias_list(draw, tokens)
    return value_text(draw, texts), expected


_pool_tokens = load_tokens()


@dataclass(frozen=True)
class GeneratedMetadata:
    metadata: dict[str, str]
    expected_tokens: tuple[LoadToken, ...]
    """Every load token written into an alias key, in any form: what LanDB will publish."""

    def expected_plain_aliases(self) -> list[str]:
        """Every plain alias written into an alias key, in any form (they are spelled only one way)."""
        return [
            text
            for key, value in self.metadata.items()
            if key.startswith("landb-alias")
            for text in value.replace(";", ",").replace(":", ",").split(",")
            if text.strip() in PLAIN_ALIASES
        ]


@st.composite
def server_metadata(
    draw: st.DrawFn,
    *,
    slot_tokens: st.SearchStrategy[LoadToken] | None = None,
    frozen_tokens: st.SearchStrategy[LoadToken] | None = None,
) -> GeneratedMetadata:
    return metadata_of(
        draw,
        _pool_tokens if slot_tokens is None else slot_tokens,
        _pool_tokens if frozen_tokens is None else frozen_tokens,
    )


def metadata_of(
    draw: st.DrawFn, slot_tokens: st.SearchStrategy[LoadToken], frozen_tokens: st.SearchStrategy[LoadToken]
) -> GeneratedMetadata:
    metadata: dict[str, str] = {}
    expected: list[LoadToken] = []

    for key in draw(_foreign_keys):
        metadata[key] = draw(_foreign_values)

    for number in draw(_slot_numbers):
        if draw(_one_in_three):
            # A per-interface value in a key that is otherwise a slot: frozen too.
            value, found = per_interface_value(draw, frozen_tokens)
        else:
            texts, found = alias_list(draw, slot_tokens)
            value = value_text(draw, texts)
        metadata[slot_key(number)] = value
        expected.extend(found)

    for key in draw(_frozen_keys):
        value, found = frozen_value(draw, frozen_tokens)
        metadata[key] = value
        expected.extend(found)
    return GeneratedMetadata(metadata, tuple(expected))


@st.composite
def fleets(draw: st.DrawFn, *, max_servers: int = 5, clean_frozen: bool = False) -> list[ServerState]:
    """Servers with messy metadata, listed in a random order.

    ``clean_frozen`` gives each server's frozen tokens indices no other token uses (100 + 10 * i ...):
    a frozen token can never be moved, so a collision with it is one no plan can repair.
    """
    count = draw(st.integers(0, max_servers))
    servers: list[ServerState] = []
    for i in range(count):
        frozen = _frozen_tokens_of_server(i) if clean_frozen else _pool_tokens
        generated = metadata_of(draw, _pool_tokens, frozen)
        name = draw(_node_names)
        servers.append(ServerState(f"id-{i}", name, name, generated.metadata))
    return draw(st.permutations(servers))


_node_names = st.sampled_from(NODE_NAMES)


@functools.cache
def _frozen_tokens_of_server(i: int) -> st.SearchStrategy[LoadToken]:
    return load_tokens(indices=st.integers(100 + 10 * i, 104 + 10 * i))


GENEROUS_QUOTA = 128
"""Nova's default ``maxServerMeta``: far above any generated server."""

GHOST_ID = "id-not-visible"
"""A wanted server id that is not among the servers: the planner must ignore it."""


@st.composite
def wanted_maps(draw: st.DrawFn, servers: Sequence[ServerState]) -> dict[str, frozenset[str]]:
    """label -> the server ids that must carry it; an empty set withdraws the label."""
    ids = [s.server_id for s in servers] + [GHOST_ID]
    labels = [label for label in LABEL_POOL if draw(st.booleans())]
    return {label: frozenset(sid for sid in ids if draw(st.booleans())) for label in sorted(labels)}


@dataclass(frozen=True)
class Scenario:
    servers: list[ServerState]
    wanted: dict[str, frozenset[str]]
    floor: int
    max_length: int
    quota: int

    def plan(self, servers: Sequence[ServerState] | None = None) -> Plan:
        return plan_changes(
            self.servers if servers is None else servers,
            self.wanted,
            floor=self.floor,
            max_length=self.max_length,
            quota=self.quota,
        )

    def visible_ids(self) -> set[str]:
        return {s.server_id for s in self.servers}


@st.composite
def scenarios(draw: st.DrawFn, *, clean_frozen: bool = False, quota: str = "generous") -> Scenario:
    """A fleet, what it should carry, and the planner's limits.

    ``quota``: ``generous`` is far above any generated server, so only frozen forms refuse; ``tight``
    lies between the smallest and the largest server's key count; ``any`` is either.
    """
    servers = draw(fleets(clean_frozen=clean_frozen))
    wanted = draw(wanted_maps(servers))
    floor = draw(st.integers(0, 10))
    max_length = draw(st.one_of(st.integers(LONGEST_TOKEN + 2, 80), st.just(254)))
    sizes = [len(s.metadata) for s in servers] or [0]
    tight = st.integers(min(sizes), max(sizes) + 2)
    quotas = {
        "generous": st.just(GENEROUS_QUOTA),
        "tight": tight,
        "any": st.one_of(tight, st.just(GENEROUS_QUOTA)),
    }
    return Scenario(servers, wanted, floor, max_length, draw(quotas[quota]))
