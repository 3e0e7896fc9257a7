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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


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
