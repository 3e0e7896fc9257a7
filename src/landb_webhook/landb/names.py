"""Alias names and ``--load-N-`` tokens.

LanDB publishes a value ``app`` as ``app.cern.ch`` (a CNAME to the server) and ``app--load-N-`` as an A
record; several servers carrying ``app--load-<distinct N>-`` give round-robin A records. The suffix is
case-insensitive. We only ever write the load-balanced form.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass

MAX_LABEL_LENGTH = 63
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_LOAD_TOKEN = re.compile(r"(?P<label>.+)--load-(?P<index>[0-9]+)-", re.IGNORECASE)
LOAD_MARKER = "--load-"


class InvalidName(ValueError):
    """A DNS name that cannot be a LanDB alias; the message says why, for the operator.

    ``kind`` is a short fixed word for metrics labels (the message names the input, a label must not).
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def validate_label(label: str) -> str:
    """Return ``label`` if it is one lower-case DNS label LanDB accepts as an alias, else raise."""
    if not label:
        raise InvalidName("empty label", "empty")
    if len(label) > MAX_LABEL_LENGTH:
        raise InvalidName(
            f"label {label!r} is {len(label)} characters, more than {MAX_LABEL_LENGTH}", "too_long"
        )
    if not _LABEL.fullmatch(label):
        raise InvalidName(
            f"label {label!r} must use only a-z, 0-9 and '-', and neither start nor end with '-'",
            "invalid_characters",
        )
    if LOAD_MARKER in label:
        # Written as x--load-7--load-0-, a token LanDB and every reader would have to guess how to split.
        raise InvalidName(
            f"label {label!r} contains {LOAD_MARKER!r}, which LanDB reads as a load-balancing suffix",
            "load_marker",
        )
    return label


LABELS_REMEMBERED = 4_096
"""Names ``label_for`` keeps the answer of: one ApplyChanges asks it of each name at each of its stages,
every loop (an invalid name raises, and is judged again)."""


@functools.lru_cache(maxsize=LABELS_REMEMBERED)
def label_for(dns_name: str, domain: str) -> str:
    """``app.cern.ch`` -> ``app``: the alias LanDB publishes as this name, or InvalidName saying why not."""
    name = dns_name.strip().rstrip(".")
    if not name.isascii():
        # Checked before lower-casing, which maps some non-ASCII letters to ASCII ones (KELVIN SIGN -> k).
        raise InvalidName(
            f"{dns_name!r} is not ASCII; an alias uses only a-z, 0-9 and '-'", "invalid_characters"
        )
    name = name.lower()
    suffix = "." + domain
    if not name.endswith(suffix):
        raise InvalidName(f"{dns_name!r} is not in the {domain} zone", "other_zone")
    label = name[: -len(suffix)]
    if label.startswith("*"):
        raise InvalidName(f"{dns_name!r} is a wildcard; LanDB aliases cannot be wildcards", "wildcard")
    if "." in label:
        raise InvalidName(
            f"{dns_name!r} has more than one label before {domain}; an alias is a single label", "multi_label"
        )
    try:
        return validate_label(label)
    except InvalidName as exc:
        raise InvalidName(f"{dns_name!r}: {exc}", exc.kind) from None


def dns_name_for(label: str, domain: str) -> str:
    return f"{label}.{domain}"


@dataclass(frozen=True, order=True, slots=True)
class LoadToken:
    """``app--load-3-``: alias ``app`` published with discriminator 3 (an identity, not a position)."""

    label: str
    index: int

    def render(self) -> str:
        return f"{self.label}--load-{self.index}-"


def parse_plain_alias(text: str) -> str | None:
    """The label of a plain (CNAME) alias such as ``app``; None for a load token or anything unknown.

    LanDB publishes it as a CNAME to the host; a load token never is one (it ends with ``-``).
    """
    label = text.strip()
    if not label.isascii():
        return None
    label = label.lower()
    return label if _LABEL.fullmatch(label) and len(label) <= MAX_LABEL_LENGTH else None


def parse_token(text: str) -> LoadToken | None:
    """The load-balanced alias a token stands for; None for a plain (CNAME) alias or anything unknown."""
    parts = parse_token_parts(text)
    return None if parts is None else LoadToken(*parts)


def parse_token_parts(text: str) -> tuple[str, int] | None:
    """``parse_token`` as (label, index), without building the token (a cluster's values hold tens of
    thousands)."""
    if not text.isascii():
        # Checked before lower-casing, which maps some non-ASCII letters to ASCII ones (KELVIN SIGN -> k):
        # LanDB would not publish such a token as the alias it would lower-case to.
        return None
    match = _LOAD_TOKEN.fullmatch(text.strip())
    if match is None:
        return None
    label = match["label"].lower()
    if not _LABEL.fullmatch(label) or len(label) > MAX_LABEL_LENGTH:
        return None
    # Interned: every carrier of an alias holds the same label, and parsed values are kept (metadata.py).
    return sys.intern(label), int(match["index"])
