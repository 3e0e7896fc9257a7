"""THE INDEX RULE: which ``N`` each carrier of an alias gets in ``<alias>--load-N-``.

N is a discriminator, not a position, and it must be unique per alias across LanDB. Every carrier
that does not keep an N it already holds, or that holds more than one, is a metadata write; so:

1. *Pinned first*: an N held in a form we never edit (a frozen key or value) cannot move. A wanted
   carrier holding one keeps it, and no other carrier may keep or take it.
2. *Sticky*: a wanted carrier keeps an N it already holds. Adding or removing another carrier never
   renumbers it.
3. *Unique, repaired with the fewest writes*: when wanted carriers hold the same N (a hand edit),
   a carrier holding only that N keeps it before one holding others too -- that one is written
   anyway, to drop its extras, so it keeps another of its own -- and among carriers holding only
   that N the first in (server name, server id) order keeps it. Carriers holding several Ns keep as
   many of them as possible; among such outcomes the first carrier in order keeps its smallest N.
4. *New carriers* take the smallest N >= ``floor`` that no visible server holds for that alias -- not even
   a server that is about to lose it, because during make-before-break both exist at once. A carrier
   coming back (a node healthy again) first gets the N it last held, its ``preferred`` one, if that is
   still free.

The cases, and the N each carrier ends with (``N`` a number, ``*N`` held in a form we never edit):

| carriers now                      | wanted       | result                                 | rule |
|-----------------------------------|--------------|----------------------------------------|------|
| a:0 b:1                           | a b c        | a:0 b:1 c:2 (only c is written)        | 4    |
| a:0 b:1 c:2                       | a c          | a:0 c:2 (only b is written)            | 2    |
| a:0 c:2                           | a b c        | a:0 b:1 c:2 (the gap is filled)        | 4    |
| none, ``floor`` 1                 | a b          | a:1 b:2                                | 4    |
| a:*3                              | a b          | a:3 (no token of ours) b:0             | 1    |
| a:0 b:*0 (a hand edit)            | a b          | b:0 (pinned), a:1                      | 1    |
| a:0 b:0                           | a b          | a:0 b:1 (first in order keeps it)      | 3    |
| a:0,1 b:0                         | a b          | b:0 (one N only), a:1 (drops its 0)    | 3    |
| a:0,1                             | a            | a:0 (its smallest; the 1 is dropped)   | 3    |
| a:0, b lost 1 and comes back      | a b          | a:0 b:1 (its last N, still free)       | 4    |
| a:1, b lost 1 and comes back      | a b          | a:1 b:0 (taken: the smallest free)     | 4    |
| x:0 (about to lose it)            | a            | a:1 (x's 0 is not reused)              | 4    |

*Fast path*: when every holder of an alias holds exactly one N, each its own, and none is pinned, rule 2
keeps every wanted holder where it is, so only the carriers arriving and leaving are worked out
(``indices_for_alias``): a node joining touches every alias, and working out every carrier of each made
planning O(aliases x nodes). Both paths give the same answer (tests/property/test_plan_reference.py
plans with the full rule only). tests/property/test_index_rule.py checks the rows above.

The N a carrier loses is remembered (``LostIndices``) so that, coming back, it is given that N again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence, Set

HeldIndex = tuple[str, str, int]
"""(alias label, server id, N): one carrier's token of an alias, as ``LostIndices.record`` takes it."""


def assign_indices(
    wanted: Sequence[str],
    held: Mapping[str, Iterable[int]],
    *,
    pinned: Mapping[str, Iterable[int]] | None = None,
    floor: int = 0,
    preferred: Mapping[str, int] | None = None,
    taken: Iterable[int] = (),
) -> dict[str, int]:
    """Map each wanted carrier (server ids, in tie-break order) to its N for one alias.

    ``held`` gives the Ns each visible server carries for the alias (in any key, ours or frozen);
    ``pinned`` the subset of those a server holds in a form we never edit; ``preferred`` the N a
    server that holds none would like back. ``taken`` are more Ns visible servers hold, for a caller
    that has them as one set: only rule 4 looks at them, so a server neither wanted nor pinned may be
    given there rather than in ``held``.
    """
    pins = {server: set(indices) for server, indices in (pinned or {}).items()}
    holds = {server: set(indices) for server, indices in held.items()}
    for server, indices in pins.items():
        holds.setdefault(server, set()).update(indices)
    used = {n for indices in holds.values() for n in indices}.union(taken)

    assigned: dict[str, int] = {}
    for server in wanted:  # rule 1
        if server in pins:
            kept = min(pins[server] - set(assigned.values()), default=None)
            if kept is not None:
                assigned[server] = kept
    claimed = set(assigned.values()).union(*pins.values())

    holders = [server for server in wanted if holds.get(server)]  # rules 1-3 concern only these
    for server in holders:  # rule 3: a carrier holding one N only
        mine = holds[server]
        if server not in assigned and len(mine) == 1 and not mine <= claimed:
            (assigned[server],) = mine
            claimed |= mine

    several = [s for s in holders if s not in assigned and holds[s] - claimed]
    assigned.update(_keep_most(several, {s: holds[s] - claimed for s in several}))
    claimed |= set(assigned.values())

    returning = preferred or {}
    for server in wanted if returning else ():  # rule 4: a returning carrier gets its last N, if still free
        again = returning.get(server)
        if server in assigned or holds.get(server) or again is None:
            continue
        if again >= floor and again not in used | claimed:
            assigned[server] = again
            claimed.add(again)

    candidate = floor
    for server in wanted:
        if server in assigned:
            continue
        while candidate in used or candidate in claimed:
            candidate += 1
        assigned[server] = candidate
        claimed.add(candidate)
    return assigned


def indices_for_alias(
    wanted: Collection[str],
    editable: Mapping[str, Sequence[int]],
    pinned: Mapping[str, Sequence[int]],
    position: Mapping[str, int],
    *,
    floor: int = 0,
    preferred: Mapping[str, int] | None = None,
    held_once: Collection[int] | None = None,
) -> dict[str, int | None]:
    """One alias: each server whose tokens of it may change -> the N it carries afterwards (None: none).

    ``wanted``: its carriers to be; ``editable`` and ``pinned``: the Ns each visible server holds in our
    slots and in forms we never edit; ``position``: each visible server's place in tie-break order (a
    wanted server not in it is not visible, and gets nothing). A wanted holder that keeps its only N
    may be left out: nothing about it changes. ``held_once``: the Ns ``editable`` holds, from a caller
    that knows every holder holds one, each its own (``landb.holders``): the fast path then looks only
    at the servers arriving and leaving, not at every holder.
    """
    ordered = position.__getitem__
    if pinned or (held_once is None and not _one_distinct_index_each(editable)):
        held = {sid: list(indices) for sid, indices in editable.items()}
        for sid, indices in pinned.items():
            held.setdefault(sid, []).extend(indices)
        targets = sorted((sid for sid in wanted if sid in position), key=ordered)
        assigned = assign_indices(targets, held, pinned=pinned, floor=floor, preferred=preferred)
        return {sid: assigned.get(sid) for sid in assigned.keys() | held.keys()}
    # The fast path: every holder holds one N, no two the same, none pinned.
    # Set differences, not a look at every holder: a node joining asks this of every alias.
    wanted_set = wanted if isinstance(wanted, Set) else frozenset(wanted)
    arriving = sorted((sid for sid in wanted_set - editable.keys() if sid in position), key=ordered)
    taken = held_once if held_once is not None else [indices[0] for indices in editable.values()]
    assigned = assign_indices(arriving, {}, taken=taken, floor=floor, preferred=preferred) if arriving else {}
    leaving: dict[str, int | None] = dict.fromkeys(editable.keys() - wanted_set)
    return {**assigned, **leaving}


def _one_distinct_index_each(editable: Mapping[str, Sequence[int]]) -> bool:
    """Whether every server in ``editable`` holds exactly one N of the alias, each its own."""
    if sum(map(len, editable.values())) != len(editable):  # each listed server holds one or more: one each
        return False
    return len({indices[0] for indices in editable.values()}) == len(editable)


class LostIndices:
    """The N each server last held for each alias it lost, so that a node coming back gets it again.

    Kept in memory only, and small (one entry per alias a server lost, dropped when it regains the alias
    or the alias is withdrawn). After a restart a returning node takes the smallest free N like any
    newcomer, which is its old one whenever it was the only carrier to leave.
    """

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._last: dict[tuple[str, str], int] = {}
        """(alias label, server id) -> N, oldest first."""

    def preferred(self) -> dict[str, dict[str, int]]:
        """Alias label -> server id -> the N it last held: ``plan_changes``' ``preferred``."""
        found: dict[str, dict[str, int]] = {}
        for (label, server_id), index in self._last.items():
            found.setdefault(label, {})[server_id] = index
        return found

    def record(
        self, added: Iterable[HeldIndex], removed: Iterable[HeldIndex], withdrawn: Iterable[str]
    ) -> None:
        """Remember the Ns ``removed`` takes off their servers, forget those ``added`` gives back and the
        ``withdrawn`` aliases. (A plan's tokens, not the plan: the index rule knows nothing of the
        planner, which uses it.)"""
        for label, server_id, _ in added:
            self._last.pop((label, server_id), None)
        for label, server_id, index in removed:
            self._last.pop((label, server_id), None)
            self._last[(label, server_id)] = index
        gone = set(withdrawn)
        for key in [key for key in self._last if key[0] in gone]:
            del self._last[key]
        while len(self._last) > self._limit:
            del self._last[next(iter(self._last))]


def _keep_most(servers: Sequence[str], candidates: Mapping[str, set[int]]) -> dict[str, int]:
    """As many servers as possible keep one of their candidate Ns, all distinct; among such outcomes,
    the first server in order gets its smallest, then the next (a lexicographically first maximum
    matching: each choice is fixed only if a maximum matching still exists with it)."""
    best = _matching_size(servers, candidates, {})
    fixed: dict[str, int] = {}
    for server in servers:
        for n in sorted(candidates[server] - set(fixed.values())):
            trial = {**fixed, server: n}
            if len(trial) + _matching_size(servers, candidates, trial) == best:
                fixed = trial
                break
    return fixed


def _matching_size(
    servers: Sequence[str], candidates: Mapping[str, set[int]], fixed: Mapping[str, int]
) -> int:
    """Size of a maximum matching of the servers not in ``fixed`` to Ns ``fixed`` does not use
    (augmenting paths; a handful of carriers per alias)."""
    owner: dict[int, str] = {}
    taken = set(fixed.values())

    def augment(server: str, seen: set[int]) -> bool:
        for n in sorted(candidates[server] - taken - seen):
            seen.add(n)
            if n not in owner or augment(owner[n], seen):
                owner[n] = server
                return True
        return False

    return sum(augment(server, set()) for server in servers if server not in fixed)
