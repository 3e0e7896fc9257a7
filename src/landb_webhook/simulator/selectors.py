"""Kubernetes label and field selectors, parsed the way the API server reads ``labelSelector``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = rf"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_REQUIREMENT = re.compile(
    rf"""
    \s*(?:
        !\s*(?P<absent>{_KEY})
      | (?P<key>{_KEY})\s*(?:
            (?P<op>==|=|!=)\s*(?P<value>{_VALUE})
          | \s(?P<setop>in|notin)\s*\(\s*(?P<values>[^()]*)\)
          | (?P<cmp>[<>])\s*(?P<number>-?\d+)
        )?
    )\s*""",
    re.VERBOSE,
)
_VALUE_RE = re.compile(_VALUE)
LABEL_KEY_RE = re.compile(rf"^{_KEY}$")
LABEL_VALUE_RE = re.compile(rf"^{_VALUE}$")


class SelectorError(ValueError):
    """The selector cannot be parsed; the API server answers 400 BadRequest."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """One of ``exists``, ``!exists``, ``=``, ``!=``, ``in``, ``notin``, ``<``, ``>``."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "exists":
                return present
            case "!exists":
                return not present
            case "=" | "in":
                return value in self.values
            case "!=" | "notin":
                return value not in self.values
            case "<" | ">":
                if value is None or not re.fullmatch(r"-?\d+", value):
                    return False
                (bound,) = self.values
                return int(value) < int(bound) if self.operator == "<" else int(value) > int(bound)
        raise AssertionError(self.operator)


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(requirement.matches(labels) for requirement in self.requirements)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``(...)``."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_label_selector(text: str | None) -> LabelSelector:
    if text is None or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for part in _split_top_level(text):
        match = _REQUIREMENT.fullmatch(part)
        if match is None:
            raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
        if match["absent"]:
            requirements.append(Requirement(match["absent"], "!exists"))
        elif match["op"]:
            operator = "!=" if match["op"] == "!=" else "="
            requirements.append(Requirement(match["key"], operator, frozenset({match["value"]})))
        elif match["setop"]:
            values = [value.strip() for value in match["values"].split(",")]
            if not all(_VALUE_RE.fullmatch(value) for value in values):
                raise SelectorError(f"invalid label value in {part.strip()!r}")
            requirements.append(Requirement(match["key"], match["setop"], frozenset(values)))
        elif match["cmp"]:
            requirements.append(Requirement(match["key"], match["cmp"], frozenset({match["number"]})))
        else:
            requirements.append(Requirement(match["key"], "exists"))
    return LabelSelector(tuple(requirements))


FieldGetter = Callable[[Mapping[str, Any]], str]


def _metadata_field(name: str) -> FieldGetter:
    return lambda obj: str(obj.get("metadata", {}).get(name) or "")


def _unschedulable(obj: Mapping[str, Any]) -> str:
    return "true" if obj.get("spec", {}).get("unschedulable") else "false"


SUPPORTED_FIELDS: dict[str, dict[str, FieldGetter]] = {
    "nodes": {"metadata.name": _metadata_field("name"), "spec.unschedulable": _unschedulable},
    "configmaps": {
        "metadata.name": _metadata_field("name"),
        "metadata.namespace": _metadata_field("namespace"),
    },
}


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[FieldGetter, bool, str], ...] = ()
    """(getter, wanted equal, value) triples, all of which must hold."""

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((getter(obj) == value) == equal for getter, equal, value in self.terms)


def parse_field_selector(resource: str, text: str | None) -> FieldSelector:
    if text is None or not text.strip():
        return FieldSelector()
    fields = SUPPORTED_FIELDS[resource]
    terms: list[tuple[FieldGetter, bool, str]] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if match is None:
            raise SelectorError(f"invalid selector: {part.strip()!r}")
        field, operator, value = match.groups()
        if field not in fields:
            raise SelectorError(f"field label not supported: {field}")
        terms.append((fields[field], operator != "!=", value))
    return FieldSelector(tuple(terms))
