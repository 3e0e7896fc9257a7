"""external-dns' ``--registry`` (LANDB_REGISTRY), as the provider asks it: do records have owners, which
names are ours, what may Records show that we cannot remove.

external-dns keeps a Registry beside its provider (``registry/registry.go``). ``txt`` records each name's
owner in a TXT claim beside it (their format: ``provider/read/txt_registry.py``) and touches only the records
it owns; ``noop`` records no owner, so every record external-dns is shown is its own to change or delete.
The two names are read here and only here (``Registry.named``); everywhere else asks the value.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass


@dataclass(frozen=True)
class Registry:
    """One of external-dns' registries: ``TXT`` or ``NOOP``."""

    name: str
    """As external-dns' ``--registry`` and LANDB_REGISTRY spell it, and as lines that name it print it."""
    has_owners: bool
    """Whether a record has an owner, its TXT claim (``txt``): what has none is someone else's, and
    adoption has claims to write. With ``noop`` every alias on the cluster's nodes counts as managed."""

    @staticmethod
    def named(name: str) -> Registry:
        """The registry external-dns calls ``name``; a ValueError for any other."""
        for registry in (TXT, NOOP):
            if registry.name == name:
                return registry
        raise ValueError(f"unknown registry {name!r}: txt or noop")

    def owns(self, dns_name: str, claimed: Set[str]) -> bool:
        """Whether ``dns_name`` is external-dns' (so ours to change), ``claimed`` the DNS names with a claim:
        with owners, only a claimed one is; without, every one is."""
        return not self.has_owners or dns_name in claimed

    @property
    def spares_ownerless(self) -> bool:
        """Whether external-dns leaves alone a record Records reports without an owner, so a name we can
        never remove (a plain alias, an alias held only in a key or form we never edit) may be reported as
        taken. ``txt`` never updates or deletes such a record; ``noop`` owns every record, so with ``sync``
        it would ask every loop to delete one, and such names are not reported."""
        return self.has_owners


TXT = Registry("txt", has_owners=True)
NOOP = Registry("noop", has_owners=False)
