"""Kubernetes field selectors, parsed the way the API server reads ``fieldSelector``.

Label selectors are not here: the API server parses ``labelSelector`` with
:class:`landb_webhook.selector.LabelSelector`, the parser the webhook itself uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class InvalidFieldSelector(ValueError):
    """The field selector cannot be parsed or names an unsupported field; the API server answers 400."""


FieldGetter = Callable[[Mapping[str, Any]], str]


def _metadata_field(name: str) -> FieldGetter:
    return lambda obj: str(obj.get("metadata", {}).get(name) or "")


def _unschedulable(obj: Mapping[str, Any]) -> str:
    return "true" if obj.get("spec", {}).get("unschedulable") else "false"


def _pod_field(section: str, name: str) -> FieldGetter:
    return lambda obj: str(obj.get(section, {}).get(name) or "")


SUPPORTED_FIELDS: dict[str, dict[str, FieldGetter]] = {
    "nodes": {"metadata.name": _metadata_field("name"), "spec.unschedulable": _unschedulable},
    "pods": {
        "metadata.name": _metadata_field("name"),
        "metadata.namespace": _metadata_field("namespace"),
        "spec.nodeName": _pod_field("spec", "nodeName"),
        "status.phase": _pod_field("status", "phase"),
    },
    "configmaps": {
        "metadata.name": _metadata_field("name"),
        "metadata.namespace": _metadata_field("namespace"),
    },
    "leases": {
        "metadata.name": _metadata_field("name"),
        "metadata.namespace": _metadata_field("namespace"),
    },
    "services": {
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
            raise InvalidFieldSelector(f"invalid selector: {part.strip()!r}")
        field, operator, value = match.groups()
        if field not in fields:
            raise InvalidFieldSelector(f"field label not supported: {field}")
        terms.append((fields[field], operator != "!=", value))
    return FieldSelector(tuple(terms))
