"""Reading the ``landb-alias*`` keys of one server.

LanDB reads every key that starts with ``landb-alias``. We write only the conventional ones, which we
call *slots*: slot 1 is ``landb-alias``, slot k >= 2 is ``landb-alias<k>`` (there is no ``landb-alias1``).
A value in a slot is a comma-separated list of tokens. Anything else that LanDB reads -- a
``landb-alias1`` or ``landb-alias-extra`` key, or a value in the per-interface form
``IFACE_FQDN:a,b;IFACE2_FQDN:c`` -- is *frozen*: we read the aliases in it, so that they are reported and
their indices are never reused, but we never rewrite or delete it.
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from landb_webhook.landb.names import (
    LOAD_MARKER,
    LoadToken,
    parse_plain_alias,
    parse_token,
    parse_token_parts,
)

ALIAS_KEY_PREFIX = "landb-alias"
_SLOT_KEY = re.compile(r"landb-alias(?:(?P<number>[2-9]|[1-9][0-9]+))?")

Slots = Mapping[int, tuple[str, ...]]
"""Slot number -> the token texts it holds, in order."""


def slot_key(number: int) -> str:
    if number < 1:
        raise ValueError(f"slot numbers start at 1, got {number}")
    return ALIAS_KEY_PREFIX if number == 1 else f"{ALIAS_KEY_PREFIX}{number}"


def slot_number(key: str) -> int | None:
    """The slot a key is, or None if it is not one of the keys we may write."""
    match = _SLOT_KEY.fullmatch(key)
    if match is None:
        return None
    return int(match["number"]) if match["number"] else 1


def is_alias_key(key: str) -> bool:
    """Every key LanDB reads aliases from (ours or not)."""
    return key.startswith(ALIAS_KEY_PREFIX)


def is_per_interface_form(value: str) -> bool:
    return ":" in value or ";" in value


def split_tokens(value: str) -> tuple[str, ...]:
    return tuple(token.strip() for token in value.split(",") if token.strip())


def join_tokens(tokens: tuple[str, ...]) -> str:
    return ",".join(tokens)


def _per_interface_tokens(value: str) -> Iterator[tuple[str | None, str]]:
    """(interface, token text) for every token of a per-interface value."""
    for part in value.split(";"):
        interface, _, aliases = part.rpartition(":")
        for text in split_tokens(aliases):
            yield interface.strip() or None, text


@dataclass(frozen=True, slots=True, weakref_slot=True)
class SlotValue:
    """One slot value read once: its token texts, and what each load token and plain alias stands for.

    Plain tuples of strings and numbers only: the garbage collector stops tracking those, so thousands
    of kept values do not lengthen its full collections."""

    texts: tuple[str, ...]
    load: tuple[tuple[str, str, int], ...]
    """(token text, label, index) for every load-balanced token, in order."""
    labels: tuple[str, ...]
    """The label of each of ``load``."""
    plain: tuple[str, ...]
    """The label of every plain (CNAME) alias, in order."""


_LOAD_ALIAS = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?--load-[0-9]+-"
_AS_WE_WRITE_IT = re.compile(f"(?:{_LOAD_ALIAS},)*+{_LOAD_ALIAS}")
"""A value as the planner writes it: lower-case load tokens with valid labels, commas, nothing else."""


def _parse_as_we_write_it(value: str) -> SlotValue:
    """A value ``_AS_WE_WRITE_IT`` matched: each token splits at its last ``--load-``, as
    ``parse_token_parts`` splits it, without a regular expression per token (a 500-node cluster holds
    half a million tokens)."""
    texts = value.split(",")
    parts = [text.rpartition(LOAD_MARKER) for text in texts]
    labels = tuple([sys.intern(label) for label, _, _ in parts])
    load = tuple(zip(texts, labels, [int(index[:-1]) for _, _, index in parts], strict=True))
    return SlotValue(tuple(texts), load, labels, ())


def _parse(value: str) -> SlotValue:
    if _AS_WE_WRITE_IT.fullmatch(value):
        return _parse_as_we_write_it(value)
    texts = split_tokens(value)
    load: list[tuple[str, str, int]] = []
    plain: list[str] = []
    for text in texts:
        if (parts := parse_token_parts(text)) is not None:
            load.append((text, *parts))  # a load token ends with "-": it is never a plain alias
        elif (label := parse_plain_alias(text)) is not None:
            plain.append(label)
    return SlotValue(texts, tuple(load), tuple(label for _, label, _ in load), tuple(plain))


class ParsedValues:
    """Slot values parsed once each, kept exactly as long as something (a server's aliases as read) still
    holds them.

    Parsing is a pure function of the text, and Records reads every alias token of the cluster every loop.
    A cache of fixed size thrashes as soon as the cluster holds more distinct values than it (a 500-node
    cluster with 1,000 aliases holds 52,000, every one different: N differs per server), and Records reads
    them in a cycle: every entry is dropped just before it is needed again. Kept by weak reference, the
    values are the cluster's own, whatever its size, and vanish with the last server state holding them.
    """

    def __init__(self) -> None:
        self._kept: weakref.WeakValueDictionary[str, SlotValue] = weakref.WeakValueDictionary()
        self.parsed = 0
        """Values parsed so far (a value found kept is not parsed again)."""

    def __len__(self) -> int:
        return len(self._kept)

    def read(self, value: str) -> SlotValue:
        found = self._kept.get(value)
        if found is None:
            found = _parse(value)
            self._kept[value] = found
            self.parsed += 1
        return found


PARSED_VALUES = ParsedValues()
read_slot_value = PARSED_VALUES.read


@dataclass(frozen=True)
class ServerAliases:
    """The alias content of one server's metadata, split into what we may edit and what we never touch."""

    values: Mapping[int, SlotValue] = field(default_factory=dict)
    """Slot number -> its value, read."""
    frozen: Mapping[str, str] = field(default_factory=dict)
    """Alias-bearing keys we never edit, verbatim."""

    @functools.cached_property
    def slots(self) -> Slots:
        return {number: value.texts for number, value in self.values.items()}

    def frozen_slot_numbers(self) -> frozenset[int]:
        """Slot numbers whose key holds a frozen value: a new slot must never take them."""
        return frozenset(number for key in self.frozen if (number := slot_number(key)) is not None)

    def editable_tokens(self) -> Iterator[tuple[int, str, LoadToken]]:
        """(slot, token text, parsed token) for every load-balanced token in a slot."""
        for number in sorted(self.values):
            for text, label, index in self.values[number].load:
                yield number, text, LoadToken(label, index)

    def editable_load(self) -> Iterator[tuple[str, str, int]]:
        """(token text, label, index) for every load-balanced token in a slot, in slot order, without
        building the tokens (planning looks at every token of the cluster)."""
        for number in sorted(self.values):
            yield from self.values[number].load

    def _frozen_texts(self) -> Iterator[tuple[str, str | None, str]]:
        """(key, interface, token text) for every token in a frozen key or form; interface None: the
        server."""
        for key in sorted(self.frozen):
            value = self.frozen[key]
            if is_per_interface_form(value):
                yield from ((key, interface, text) for interface, text in _per_interface_tokens(value))
            else:
                yield from ((key, None, text) for text in split_tokens(value))

    def frozen_tokens(self) -> Iterator[LoadToken]:
        for _, token in self.frozen_tokens_by_key():
            yield token

    def frozen_tokens_by_key(self) -> Iterator[tuple[str, LoadToken]]:
        """(key, parsed token) for every load-balanced token in a key or form we never edit."""
        for key, _, text in self._frozen_texts():
            token = parse_token(text)
            if token is not None:
                yield key, token

    def plain_aliases(self) -> Iterator[tuple[str, str | None]]:
        """(label, interface) for every plain (CNAME) alias, in any key or form: LanDB points it at the
        interface a per-interface value names, else (interface None) at the server itself."""
        for number in sorted(self.values):
            yield from ((label, None) for label in self.values[number].plain)
        for _, interface, text in self._frozen_texts():
            label = parse_plain_alias(text)
            if label is not None:
                yield label, interface

    def load_tokens(self) -> Iterator[LoadToken]:
        """Every load-balanced alias LanDB will publish for this server."""
        for _, _, token in self.editable_tokens():
            yield token
        yield from self.frozen_tokens()

    def load_labels(self) -> list[str]:
        """The label of each of ``load_tokens``, without building the tokens (Records asks for every
        alias of every server)."""
        labels = [label for number in sorted(self.values) for label in self.values[number].labels]
        if self.frozen:
            labels += self.frozen_labels()
        return labels

    @functools.cached_property
    def label_set(self) -> frozenset[str]:
        """The labels of ``load_tokens``, each once."""
        return frozenset(itertools.chain.from_iterable(value.labels for value in self.values.values())).union(
            self.frozen_labels()
        )

    def frozen_labels(self) -> Iterator[str]:
        return (token.label for token in self.frozen_tokens())


def read_aliases(metadata: Mapping[str, str]) -> ServerAliases:
    values: dict[int, SlotValue] = {}
    frozen: dict[str, str] = {}
    for key, value in metadata.items():
        if not is_alias_key(key):
            continue
        number = slot_number(key)
        if number is None or is_per_interface_form(value):
            frozen[key] = value
        else:
            values[number] = read_slot_value(value)
    return ServerAliases(values=values, frozen=frozen)
