"""external-dns' TXT ownership records: which alias names are claimed, by whom, and how a claim reads.

The record format is the TXT registry's (external-dns ``registry/txt``, ``endpoint/labels.go``): an A
record ``app.cern.ch`` is claimed by a TXT record ``a-app.cern.ch`` (the record type first in the first
label, unless ``--txt-prefix`` / ``--txt-suffix`` place it with ``%{record_type}``), whose one target is
``"heritage=external-dns,external-dns/owner=<id>[,external-dns/resource=<kind/ns/name>]"`` with the
labels sorted and the quotes included, and whose ``ownedRecord`` label names the A record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from landb_webhook.endpoint import Endpoint

OWNED_RECORD_LABEL = "ownedRecord"
HERITAGE = "heritage=external-dns"
LABEL_KEY_PREFIX = "external-dns/"
OWNER_LABEL = "owner"
RESOURCE_LABEL = "resource"
RECORD_TYPE_TEMPLATE = "%{record_type}"
_TYPE_PREFIXES = ("a-", "aaaa-", "cname-")
_OWNER_ID_FORBIDDEN = re.compile(r'[\s,"]')


class InvalidOwnerId(ValueError):
    """An owner id external-dns could not read back from the claim it is written into."""


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


def owner_of(txt: Endpoint) -> str | None:
    """The owner id a claim names; None when it is not a readable external-dns claim (say, encrypted)."""
    return _claim_label(txt, OWNER_LABEL)


def resource_of(txt: Endpoint) -> str | None:
    """What a claim says its name was published for (``ingress/<namespace>/<name>``), when it says."""
    return _claim_label(txt, RESOURCE_LABEL)


def _claim_label(txt: Endpoint, key: str) -> str | None:
    if not txt.targets:
        return None
    labels: dict[str, str] = {}
    for part in txt.targets[0].strip('"').split(","):
        label, found, value = part.partition("=")
        if found:
            labels[label] = value
    if f"heritage={labels.get('heritage')}" != HERITAGE:
        return None
    return labels.get(LABEL_KEY_PREFIX + key) or None


def validate_owner_id(owner_id: str) -> str:
    """Return ``owner_id`` if external-dns reads it back unchanged from a claim, else raise."""
    if not owner_id:
        raise InvalidOwnerId("the owner id is empty; use external-dns' --txt-owner-id")
    if _OWNER_ID_FORBIDDEN.search(owner_id):
        raise InvalidOwnerId(
            f"owner id {owner_id!r} contains a comma, a quote or white space, which a claim cannot hold"
        )
    return owner_id


def txt_record_name(dns_name: str, record_type: str, *, prefix: str = "", suffix: str = "") -> str:
    """Where the txt registry keeps the claim of ``dns_name``: ``a-app.cern.ch`` with no prefix or suffix.

    The prefix and suffix (lower-cased, as external-dns does) go around the first label; the record
    type goes in front of that label unless one of them places it with ``%{record_type}``.
    """
    if prefix and suffix:
        raise ValueError("a txt prefix and a txt suffix cannot both be set (external-dns refuses it too)")
    kind = record_type.lower()
    prefix, suffix = prefix.lower(), suffix.lower()
    first, dot, rest = dns_name.partition(".")
    if RECORD_TYPE_TEMPLATE not in prefix + suffix:
        first = f"{kind}-{first}"
    prefix = prefix.replace(RECORD_TYPE_TEMPLATE, kind)
    suffix = suffix.replace(RECORD_TYPE_TEMPLATE, kind)
    return f"{prefix}{first}{suffix}{dot}{rest}"


def claim_record(dns_name: str, owner_id: str, *, prefix: str = "", suffix: str = "") -> Endpoint:
    """The claim the txt registry writes for an A record of ``owner_id`` that names no resource.

    Adoption cannot know which Ingress will want a name, so its claims carry the owner only; external-dns
    does not compare labels when it plans, so it keeps such a claim until the record next changes, and
    then writes the resource in.
    """
    value = f'"{HERITAGE},{LABEL_KEY_PREFIX}{OWNER_LABEL}={validate_owner_id(owner_id)}"'
    return Endpoint(
        dns_name=txt_record_name(dns_name, "A", prefix=prefix, suffix=suffix),
        record_type="TXT",
        targets=(value,),
        labels=((OWNED_RECORD_LABEL, dns_name),),
    )
