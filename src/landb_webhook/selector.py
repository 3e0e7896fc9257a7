"""Kubernetes label selectors, parsed once and matched locally against a node's labels.

The node cache holds every node of the cluster (the provider also needs the non-ingress ones), so the
ingress selector cannot be handed to the API server; this is the same grammar ``kubectl -l`` accepts:
``k=v`` / ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``, ``k<n``, ``k>n``, joined
by commas (AND). The empty selector matches every node, as in Kubernetes. The simulator's API server
parses ``labelSelector`` with this same code, so the two can never disagree.

Clusters label their ingress nodes differently (``role=ingress``, ``node-role.kubernetes.io/ingress``), so
the webhook's settings also accept several selectors separated by ``;``, any of which may match (OR).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum


class InvalidSelector(ValueError):
    """The configured label selector is not valid Kubernetes syntax; the message says where."""


class Operator(Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    LESS_THAN = "<"
    GREATER_THAN = ">"


_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
_MAX_PREFIX_LENGTH = 253
_INTEGER = re.compile(r"-?[0-9]+")

_SET_FORM = re.compile(r"(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")
_EQUALITY_FORM = re.compile(r"(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)")
_COMPARISON_FORM = re.compile(r"(?P<key>[^=!<>\s]+)\s*(?P<op>[<>])\s*(?P<value>\S*)")
_EXISTS_FORM = re.compile(r"(?P<negated>!?)\s*(?P<key>[^=!\s()]+)")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case Operator.EXISTS:
                return present
            case Operator.DOES_NOT_EXIST:
                return not present
            case Operator.EQUALS | Operator.IN:
                return present and labels[self.key] in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case Operator.LESS_THAN | Operator.GREATER_THAN:
                # Kubernetes compares as integers; a label that is not one never matches.
                if not present or not _INTEGER.fullmatch(labels[self.key]):
                    return False
                (bound,) = self.values
                value = int(labels[self.key])
                return value < int(bound) if self.operator is Operator.LESS_THAN else value > int(bound)


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()
    """All must hold; none (the empty selector) selects everything."""

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parse ``text`` or raise InvalidSelector naming the offending part."""
        return cls(tuple(_parse_requirement(part, text) for part in _split_top_level(text)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


ALTERNATIVES = ";"


@dataclass(frozen=True)
class AnySelector:
    """Selectors separated by ``;``: labels match when any one of them matches (OR)."""

    alternatives: tuple[LabelSelector, ...]

    @classmethod
    def parse(cls, text: str) -> AnySelector:
        """Parse ``a=b;c`` or raise InvalidSelector; one selector alone is the plain Kubernetes grammar."""
        parts = text.split(ALTERNATIVES)
        if len(parts) > 1 and any(not part.strip() for part in parts):
            raise InvalidSelector(f"label selectors {text!r}: empty alternative (stray ';'?)")
        return cls(tuple(LabelSelector.parse(part) for part in parts))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return any(selector.matches(labels) for selector in self.alternatives)


def _split_top_level(text: str) -> list[str]:
    """Split on the commas that separate requirements, not on those inside ``in (a,b)``."""
    if not text.strip():
        return []
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise InvalidSelector(f"label selector {text!r}: unbalanced ')'")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise InvalidSelector(f"label selector {text!r}: unbalanced '('")
    parts.append("".join(current))
    return parts


def _parse_requirement(part: str, selector: str) -> Requirement:
    part = part.strip()
    if not part:
        raise InvalidSelector(f"label selector {selector!r}: empty requirement (stray comma?)")
    if found := _SET_FORM.fullmatch(part):
        values = [value.strip() for value in found["values"].split(",")]
        operator = Operator.IN if found["op"] == "in" else Operator.NOT_IN
        return Requirement(
            _checked_key(found["key"], selector),
            operator,
            frozenset(_checked_value(value, selector) for value in values),
        )
    if found := _EQUALITY_FORM.fullmatch(part):
        operator = Operator.NOT_EQUALS if found["op"] == "!=" else Operator.EQUALS
        return Requirement(
            _checked_key(found["key"], selector),
            operator,
            frozenset({_checked_value(found["value"], selector)}),
        )
    if found := _COMPARISON_FORM.fullmatch(part):
        if not _INTEGER.fullmatch(found["value"]):
            raise InvalidSelector(f"label selector {selector!r}: {found['value']!r} is not an integer")
        operator = Operator.LESS_THAN if found["op"] == "<" else Operator.GREATER_THAN
        return Requirement(_checked_key(found["key"], selector), operator, frozenset({found["value"]}))
    if found := _EXISTS_FORM.fullmatch(part):
        operator = Operator.DOES_NOT_EXIST if found["negated"] else Operator.EXISTS
        return Requirement(_checked_key(found["key"], selector), operator)
    raise InvalidSelector(f"label selector {selector!r}: cannot parse {part!r}")


def is_valid_label_key(key: str) -> bool:
    """An optional DNS-subdomain prefix (at most 253 characters) and ``/``, then a name of at most 63."""
    prefix, _, _ = key.rpartition("/")
    return bool(_KEY.fullmatch(key)) and len(prefix) <= _MAX_PREFIX_LENGTH


def is_valid_label_value(value: str) -> bool:
    """Empty, or at most 63 alphanumerics, ``-``, ``_`` and ``.``, beginning and ending alphanumeric."""
    return bool(_VALUE.fullmatch(value))


def _checked_key(key: str, selector: str) -> str:
    if not is_valid_label_key(key):
        raise InvalidSelector(f"label selector {selector!r}: {key!r} is not a valid label key")
    return key


def _checked_value(value: str, selector: str) -> str:
    if not is_valid_label_value(value):
        raise InvalidSelector(f"label selector {selector!r}: {value!r} is not a valid label value")
    return value
