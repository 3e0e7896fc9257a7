"""THE INDEX RULE: which ``N`` each carrier of an alias gets in ``<alias>--load-N-``.

N is a discriminator, not a position, and it must be unique per alias across LanDB. So:

1. *Pinned first*: an N held in a form we never edit (a frozen key or value) cannot move. A wanted
   carrier holding one keeps it, and no other carrier may keep or take it.
2. *Sticky*: a wanted carrier that already holds the alias keeps its N (the smallest it holds, if a
   hand edit left several). Adding or removing another carrier never renumbers it.
3. *Unique*: if two wanted carriers hold the same N, the first in (server name, server id) order keeps it
   and the other is treated as new.
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
) -> dict[str, int]:
    """Map each wanted carrier (server ids, in tie-break order) to its N for one alias.

    ``held`` gives the Ns each visible server carries for the alias (in any key, ours or frozen);
    ``pinned`` the subset of those a server holds in a form we never edit; ``preferred`` the N a
    server that holds none would like back.
    """
    pinned = pinned or {}
    used: set[int] = set()
    for indices in (*held.values(), *pinned.values()):
        used.update(indices)

    assigned: dict[str, int] = {}
    claimed: set[int] = set()

    def keep_one(server: str, candidates: Iterable[int]) -> None:
        kept = min((n for n in candidates if n not in claimed), default=None)
        if kept is not None:
            assigned[server] = kept
            claimed.add(kept)

    for server in wanted:
        keep_one(server, pinned.get(server, ()))
    for indices in pinned.values():
        claimed.update(indices)
    for server in wanted:
        if server not in assigned:
            keep_one(server, held.get(server, ()))

    holders = {server for server, indices in held.items() for _ in indices}
    for server in wanted:  # a returning carrier (one holding no N): its last N, if still free
        again = (preferred or {}).get(server)
        if server in holders or server in assigned or again is None:
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
