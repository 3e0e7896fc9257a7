"""A body of more endpoints than LANDB_MAX_REQUEST_ENDPOINTS, cut to the limit instead of refused.

external-dns sends AdjustEndpoints every endpoint of every source, before its domain filter, and
abandons its whole loop when that call fails: one namespace's Ingress of 10,001 names must not stop every
other namespace's names. The endpoint limit is the memory bound (what the provider's work costs grows
with the names), so past it the body is cut before it is decoded:

1. names outside the domain filter the webhook announced go first, uncounted: external-dns drops them
   itself after AdjustEndpoints, and never plans a change of one;
2. then, if still over the limit, the excess of the largest requester (the ``resource`` label,
   ``ingress/<namespace>/<name>``; a TXT claim counts for the record it owns): the largest brought down
   to the next largest, and so on, until the request fits; a requester loses its last endpoints in the
   body's order. An update's old and new sides go together.

The body is walked element by element (``json.JSONDecoder.raw_decode``: one endpoint's dict at a time,
dropped at once), keeping each element's place in the body and its requester; the kept elements are then
joined into a body of their own, decoded as any other. The requester and the names kept per element are a
few small strings (~15 MiB for 100,000 endpoints); the body's text is held once beside its bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from landb_webhook.provider.ownership.tenancy import brought_down

_DECODER = json.JSONDecoder()
_LISTS = {"create": "create", "updateold": "updateOld", "updatenew": "updateNew", "delete": "delete"}
_WHITESPACE = " \t\n\r"


@dataclass(frozen=True)
class Cut:
    """What one requester lost (``""``: endpoints naming none)."""

    requester: str
    dropped: int
    reason: str
    """``outside_domain_filter`` or ``request_cap``."""


@dataclass(frozen=True, slots=True)
class _Element:
    start: int
    end: int
    name: str
    requester: str
    owns: str
    """The record a TXT claim owns (its ``ownedRecord`` label), else ``""``."""


class _Unreadable(ValueError):
    pass


def cut_body(body: bytes, limit: int, in_domain: Callable[[str], bool]) -> tuple[bytes, list[Cut]] | None:
    """``body`` cut to at most ``limit`` endpoints (module docstring), with what each requester lost; None
    when it holds no more than ``limit``, or is not JSON of an endpoint list or a Changes object (its
    decoder says why)."""
    try:
        text = body.decode()
        start = _skip(text, 0)
        if text.startswith("[", start):
            lists = {"": _elements(text, start)[0]}
        elif text.startswith("{", start):
            lists = _changes(text, start)
        else:
            return None
    except (_Unreadable, ValueError):
        return None
    if sum(len(elements) for elements in lists.values()) <= limit:
        return None  # within the limit: nothing cut, not even outside the domain filter
    cuts: list[Cut] = []
    outside: dict[str, int] = {}
    units: list[_Unit] = []
    for unit in _units(lists):
        if any(in_domain(e.owns or e.name) for e in unit.elements):
            units.append(unit)
        else:
            outside[unit.requester] = outside.get(unit.requester, 0) + len(unit.members)
    cuts += [Cut(r, n, "outside_domain_filter") for r, n in sorted(outside.items())]
    counts: dict[str, int] = {}
    for unit in units:
        counts[unit.requester] = counts.get(unit.requester, 0) + len(unit.members)
    allowed = brought_down(counts, limit)
    taken: dict[str, int] = {}
    kept: set[tuple[str, int]] = set()
    for unit in units:
        if taken.get(unit.requester, 0) + len(unit.members) <= allowed[unit.requester]:
            taken[unit.requester] = taken.get(unit.requester, 0) + len(unit.members)
            kept.update(unit.members)
    cuts += [
        Cut(requester, counts[requester] - taken.get(requester, 0), "request_cap")
        for requester in sorted(counts)
        if counts[requester] > taken.get(requester, 0)
    ]
    kept_lists = {
        key: [text[e.start : e.end] for index, e in enumerate(elements) if (key, index) in kept]
        for key, elements in lists.items()
    }
    if "" in kept_lists:
        return ("[" + ",".join(kept_lists[""]) + "]").encode(), cuts
    members = ",".join(f'"{key}":[{",".join(kept)}]' for key, kept in kept_lists.items())
    return ("{" + members + "}").encode(), cuts


@dataclass(frozen=True, slots=True)
class _Unit:
    """What is kept or dropped together: one endpoint, or an update's old and new sides."""

    requester: str
    members: tuple[tuple[str, int], ...]
    """(list, index) of each endpoint."""
    elements: tuple[_Element, ...]


def _units(lists: dict[str, list[_Element]]) -> list[_Unit]:
    """The units in body order; a TXT claim counts for the requester of the record it owns when the body
    has it."""
    requesters = {e.name: e.requester for elements in lists.values() for e in elements if e.requester}
    old, new = lists.get("updateOld", []), lists.get("updateNew", [])
    paired = bool(old) and len(old) == len(new)
    units: list[_Unit] = []
    for key, elements in lists.items():
        if key == "updateOld" and paired:
            continue  # with updateNew's
        for index, element in enumerate(elements):
            requester = element.requester or requesters.get(element.owns, "")
            if key == "updateNew" and paired:
                units.append(_Unit(requester, (("updateOld", index), (key, index)), (old[index], element)))
            else:
                units.append(_Unit(requester, ((key, index),), (element,)))
    return units


def _skip(text: str, position: int) -> int:
    while position < len(text) and text[position] in _WHITESPACE:
        position += 1
    return position


def _elements(text: str, position: int) -> tuple[list[_Element], int]:
    """The endpoints of the array at ``position`` (``null`` elements skipped), and where it ends."""
    found: list[_Element] = []
    position = _skip(text, position + 1)
    if text.startswith("]", position):
        return found, position + 1
    while True:
        value, end = _DECODER.raw_decode(text, position)
        if isinstance(value, dict):
            found.append(_element(value, position, end))
        elif value is not None:
            raise _Unreadable("an endpoint is not an object")
        position = _skip(text, end)
        if text.startswith("]", position):
            return found, position + 1
        if not text.startswith(",", position):
            raise _Unreadable("expected , or ]")
        position = _skip(text, position + 1)


def _element(value: dict[str, object], start: int, end: int) -> _Element:
    fields = {str(key).lower(): item for key, item in value.items()}
    labels = fields.get("labels")
    labels = {str(k).lower(): v for k, v in labels.items()} if isinstance(labels, dict) else {}
    name = fields.get("dnsname")
    resource, owns = labels.get("resource"), labels.get("ownedrecord")
    return _Element(
        start,
        end,
        name.strip().rstrip(".").lower() if isinstance(name, str) else "",
        resource if isinstance(resource, str) else "",
        owns.strip().rstrip(".").lower() if isinstance(owns, str) else "",
    )


def _changes(text: str, position: int) -> dict[str, list[_Element]]:
    """Changes' four lists (keys matched as Go matches them; a ``null`` list is empty)."""
    lists: dict[str, list[_Element]] = {}
    position = _skip(text, position + 1)
    while not text.startswith("}", position):
        key, position = _DECODER.raw_decode(text, position)
        position = _skip(text, position)
        if not isinstance(key, str) or not text.startswith(":", position):
            raise _Unreadable("expected a key")
        position = _skip(text, position + 1)
        canonical = _LISTS.get(key.lower())
        if canonical is not None and text.startswith("[", position):
            lists[canonical], position = _elements(text, position)
        else:
            _, position = _DECODER.raw_decode(text, position)
            if canonical is not None:
                lists[canonical] = []
        position = _skip(text, position)
        if text.startswith(",", position):
            position = _skip(text, position + 1)
    return {key: lists.get(key, []) for key in _LISTS.values()}
