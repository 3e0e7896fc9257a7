"""THE INDEX RULE: which ``N`` each carrier of an alias gets in ``<alias>--load-N-``.

N is a discriminator, not a position, and it must be unique per alias across LanDB. So:

1. *Sticky*: a wanted carrier that already holds the alias keeps its N (the smallest it holds, if a
   hand edit left several). Adding or removing another carrier never renumbers it.
2. *Unique*: if two wanted carriers hold the same N, the first in (server name, server id) order keeps it
   and the other is treated as new.
3. *New carriers* take the smallest N >= ``floor`` that no visible server holds for that alias -- not even
   a server that is about to lose it, because during make-before-break both exist at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def assign_indices(
    wanted: Sequence[str],
    held: Mapping[str, Iterable[int]],
    *,
    taken_elsewhere: Iterable[int] = (),
    floor: int = 0,
) -> dict[str, int]:
    """Map each wanted carrier (server ids, in tie-break order) to its N for one alias.

    ``held`` gives the Ns each visible server carries for the alias (in any key, ours or frozen);
    ``taken_elsewhere`` are further Ns known to be in use for the alias.
    """
    used: set[int] = set(taken_elsewhere)
    for indices in held.values():
        used.update(indices)

    assigned: dict[str, int] = {}
    claimed: set[int] = set()
    newcomers: list[str] = []
    for server in wanted:
        kept = min((n for n in held.get(server, ()) if n not in claimed), default=None)
        if kept is None:
            newcomers.append(server)
        else:
            assigned[server] = kept
            claimed.add(kept)

    candidate = floor
    for server in newcomers:
        while candidate in used or candidate in claimed:
            candidate += 1
        assigned[server] = candidate
        claimed.add(candidate)
    return assigned
