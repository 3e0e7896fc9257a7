"""Which alias names external-dns' TXT registry has claimed."""

from __future__ import annotations

from collections.abc import Iterable

from landb_webhook.endpoint import Endpoint

OWNED_RECORD_LABEL = "ownedRecord"
_TYPE_PREFIXES = ("a-", "aaaa-", "cname-")


def is_ownership_record(endpoint: Endpoint) -> bool:
    return endpoint.record_type.upper() == "TXT"


def owned_name(txt: Endpoint) -> str:
    """The record a TXT claim protects: its ``ownedRecord`` label (always set by the txt registry), else
    the default naming ``a-<name>`` / ``cname-<name>`` / ``<name>`` read backwards."""
    labelled = txt.label(OWNED_RECORD_LABEL)
    if labelled:
        return labelled.rstrip(".").lower()
    name = txt.dns_name.rstrip(".").lower()
    for prefix in _TYPE_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def claimed_names(records: Iterable[Endpoint]) -> set[str]:
    return {owned_name(r) for r in records if is_ownership_record(r)}
