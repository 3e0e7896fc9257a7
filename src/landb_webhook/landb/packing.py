"""THE PACKING RULE: how tokens are laid out over ``landb-alias``, ``landb-alias2``, ...

A value holds at most ``max_length`` characters, commas included. The layout is edited, never rebuilt,
so that one alias more or less rewrites as few keys as possible:

- a removed token leaves its slot; the other tokens keep their place; a slot left empty is deleted;
- new tokens go, in sorted order, into the first slot where *all* of them fit; failing that each goes
  into the first slot with room, preferring slots this edit already rewrites; failing that into a new
  slot with the smallest free number -- never a number whose key already holds a value we must not
  edit (a per-interface ``landb-alias`` value, say);
- tokens that stay are never moved, even if the layout could be tighter;
- with a limit on new keys (the server's metadata quota), a token that would need one more key than
  the limit allows is left out, and the tokens after it still go wherever they fit: what fits is
  written, in sorted order, and only what does not is refused.

The cases (``1: a,b`` is ``landb-alias = a,b``, ``2:`` is ``landb-alias2``; ``max_length`` as given):

| slots before             | max | change     | slots after                 | why                    |
|--------------------------|-----|------------|-----------------------------|------------------------|
| 1: aa                    | 11  | + cc, bb   | 1: aa,bb,cc                 | all fit the first slot |
| 1: aa,bb,cc              | 11  | + dd, ee   | 1: aa,bb,cc,dd  2: ee       | dd fits, ee no longer  |
| 1: aa,bb  2: cc          | 8   | + dd, ee   | 1: aa,bb  2: cc,dd,ee       | the first slot fitting |
|                          |     |            |                             | them all               |
| 1: aaaaaaa  2: bbbb      | 9   | + cc, d    | 1: aaaaaaa  2: bbbb,cc,d    | d joins the slot cc    |
|                          |     |            |                             | rewrote, not slot 1    |
| 1: aaaaaaa  3: bbbbbbb   | 9   | + cc       | 1, 3 as they were  2: cc    | smallest free number   |
| (1 holds a per-interface | 11  | + aa       | 2: aa                       | never a frozen key's   |
| value, never edited)     |     |            |                             | number                 |
| 1: aa,bb  2: cc          | any | - aa       | 1: bb  2: cc                | the rest stay in place |
| 1: aa,bb  2: cc          | any | - cc       | 1: aa,bb                    | an empty slot is       |
|                          |     |            |                             | deleted                |
| anything                 | 5   | + abcdefgh | ValueTooLong                | can never be written   |
| 1: aaaaaaa, no new key   | 9   | + cc, d    | 1: aaaaaaa,d, cc left out   | over quota: what fits  |

tests/property/test_packing_rule.py checks these rows, and the rule against a straightforward packer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import NamedTuple

from landb_webhook.landb.metadata import Slots, join_tokens


class ValueTooLong(ValueError):
    """A single token longer than a whole value: it can never be written."""


class Packed(NamedTuple):
    layout: dict[int, tuple[str, ...]]
    left_out: tuple[str, ...]
    """Tokens that would have needed more new keys than allowed, in sorted order."""


def add_tokens(
    slots: Slots, new_tokens: Iterable[str], max_length: int, *, unavailable: Iterable[int] = ()
) -> dict[int, tuple[str, ...]]:
    """Lay ``new_tokens`` out over ``slots``; ``unavailable`` are slot numbers a new slot must not take."""
    return add_tokens_within(slots, new_tokens, max_length, unavailable=unavailable).layout


def add_tokens_within(
    slots: Slots,
    new_tokens: Iterable[str],
    max_length: int,
    *,
    unavailable: Iterable[int] = (),
    new_keys: int | None = None,
) -> Packed:
    """``add_tokens`` opening at most ``new_keys`` new slots (None: as many as needed)."""
    layout = {number: tuple(tokens) for number, tokens in slots.items()}
    taken = set(layout) | set(unavailable)
    pending = sorted(set(new_tokens))
    for token in pending:
        if len(token) > max_length:
            raise ValueTooLong(f"token {token!r} is longer than {max_length} characters")
    if not pending:
        return Packed(layout, ())

    # Each slot's joined length kept as tokens go in, and a slot that no pending token fits any more
    # leaves the search: a fresh join per try, or a scan of every full slot, made packing a whole
    # cluster's aliases quadratic in the tokens per server.
    length = {number: len(join_tokens(tokens)) for number, tokens in layout.items()}
    all_of_them = sum(map(len, pending)) + len(pending) - 1  # joined by commas
    for number in sorted(layout):
        if length[number] + (1 if layout[number] else 0) + all_of_them <= max_length:
            layout[number] = (*layout[number], *pending)
            return Packed(layout, ())

    shortest = min(map(len, pending))

    def room(number: int) -> int:
        return max_length - length[number] - (1 if layout[number] else 0)

    touched: list[int] = []
    untouched = [number for number in sorted(layout) if room(number) >= shortest]
    left_out: list[str] = []
    opened = 0
    most_room: int | None = None
    """Once no new key may be opened: the most room any slot has (None: to be worked out again). A
    server over its quota leaves out most of its tokens, each without a scan of its full slots."""
    for token in pending:
        if new_keys is not None and opened >= new_keys:
            if most_room is None:
                most_room = max((room(n) for n in itertools.chain(touched, untouched)), default=-1)
            if len(token) > most_room:
                left_out.append(token)
                continue
        fitting = next((n for n in itertools.chain(touched, untouched) if room(n) >= len(token)), None)
        if fitting is not None:
            number = fitting
            most_room = None
        elif new_keys is not None and opened >= new_keys:
            left_out.append(token)
            continue
        else:
            opened += 1
            number = next(n for n in range(1, len(taken) + 2) if n not in taken)
            taken.add(number)
            layout[number], length[number] = (), 0
        if number not in touched:
            touched.append(number)
            if number in untouched:
                untouched.remove(number)
        length[number] += (1 if layout[number] else 0) + len(token)
        layout[number] = (*layout[number], token)
        if room(number) < shortest:
            touched.remove(number)
    return Packed(layout, tuple(left_out))


def remove_tokens(slots: Slots, gone: Iterable[str]) -> dict[int, tuple[str, ...]]:
    drop = set(gone)
    layout: dict[int, tuple[str, ...]] = {}
    for number, tokens in slots.items():
        kept = tuple(t for t in tokens if t not in drop)
        if kept or not any(t in drop for t in tokens):
            layout[number] = kept
    return layout
