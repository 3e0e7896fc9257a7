"""THE NAME POLICY: which names a namespace may publish (LANDB_NAME_POLICY, LANDB_RESERVED_NAMES).

On a cluster shared by several teams any of them can ask for any name; the policy says which ones each may
take. A pattern is an alias label (``www``) or a prefix ending in ``*`` (``team-a-*``); ``{namespace}`` in a
pattern is the asking namespace's name. The rules, in order:

1. a reserved name (LANDB_RESERVED_NAMES, patterns separated by commas) is refused, whoever asks;
2. a label starting with ``xn--`` (an internationalised name: it can look like another) is refused unless
   the asking namespace's rule allows it with a pattern that itself starts with ``xn--``;
3. a namespace with a rule (its own, else the ``*`` rule) may publish only the names its patterns match;
4. a namespace without one, and a name of no namespace (no ``resource``), may publish any other name.

LANDB_NAME_POLICY is rules separated by ``;``, each ``<namespace or *>=<patterns separated by commas>``:
``*={namespace}-*;web=www,www-*`` lets every namespace publish names starting with its own name, and
namespace ``web`` ``www`` and names starting with ``www-`` instead. A policy that does not read that way
is refused at start-up (InvalidPolicy, exit 2), naming the part that is wrong.

| name         | namespace | policy               | reserved | verdict | rule                            |
|--------------|-----------|----------------------|----------|---------|---------------------------------|
| login        | team-a    | (none)               | login    | refused | 1: reserved, whoever asks       |
| cern-portal  | (none)    | (none)               | cern-*   | refused | 1: a reserved prefix            |
| xn--80ak6aa9 | team-a    | (none)               |          | refused | 2: xn-- not allowed             |
| xn--80ak6aa9 | team-a    | team-a=xn--*         |          | allowed | 2: its rule names xn--          |
| xn--80ak6aa9 | team-a    | team-a=*             |          | refused | 2: ``*`` alone names no xn--    |
| team-a-shop  | team-a    | *={namespace}-*      |          | allowed | 3: its namespace's prefix       |
| team-b-shop  | team-a    | *={namespace}-*      |          | refused | 3: another namespace's prefix   |
| www          | web       | *={namespace}-*;     |          | allowed | 3: its own rule wins over ``*`` |
|              |           | web=www              |          |         |                                 |
| shop         | team-a    | web=www              |          | allowed | 4: no rule for team-a           |
| shop         | (none)    | *={namespace}-*      |          | allowed | 4: a name of no namespace       |

tests/unit/test_name_policy.py restates these rows and checks the rule on generated names and policies.
Pure: strings in, a verdict out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

ANY_NAMESPACE = "*"
NAMESPACE_PLACEHOLDER = "{namespace}"
IDN_PREFIX = "xn--"
_PATTERN = re.compile(r"^(?:[a-z0-9-]|\{namespace\})+\*?$|^\*$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class InvalidPolicy(ValueError):
    """A policy or a list of reserved names that does not read as the module docstring says."""


def _matches(pattern: str, label: str, namespace: str) -> bool:
    wanted = pattern.replace(NAMESPACE_PLACEHOLDER, namespace)
    if wanted.endswith("*"):
        return label.startswith(wanted[:-1])
    return label == wanted


@dataclass(frozen=True)
class NamePolicy:
    rules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Namespace (or ``*``) -> the patterns of the names it may publish."""
    reserved: tuple[str, ...] = ()
    """Patterns of the names no namespace may publish."""

    @classmethod
    def parse(cls, policy: str = "", reserved: str = "") -> NamePolicy:
        """Read LANDB_NAME_POLICY and LANDB_RESERVED_NAMES; raise InvalidPolicy naming what is wrong."""
        rules: dict[str, tuple[str, ...]] = {}
        for part in (p.strip() for p in policy.split(";")):
            if not part:
                continue
            namespace, equals, patterns = (piece.strip() for piece in part.partition("="))
            if not equals:
                raise InvalidPolicy(f"{part!r}: a rule is <namespace or *>=<patterns>")
            if namespace != ANY_NAMESPACE and not _NAMESPACE.match(namespace):
                raise InvalidPolicy(f"{part!r}: {namespace!r} is not a namespace name nor *")
            if namespace in rules:
                raise InvalidPolicy(f"{part!r}: namespace {namespace} has two rules")
            rules[namespace] = _patterns(patterns, part)
        return cls(rules, _patterns(reserved, "reserved names", allow_empty=True))

    def refusal(self, label: str, namespace: str) -> str | None:
        """Why ``namespace`` may not publish ``label`` (a sentence), or None when it may (``""``: no
        namespace)."""
        reserved = next((p for p in self.reserved if _matches(p, label, namespace)), None)
        if reserved is not None:  # rule 1
            return f"the name is reserved (LANDB_RESERVED_NAMES: {reserved})"
        rule = self.rules.get(namespace, self.rules.get(ANY_NAMESPACE)) if namespace else None
        if label.startswith(IDN_PREFIX) and not any(  # rule 2
            p.startswith(IDN_PREFIX) and _matches(p, label, namespace) for p in rule or ()
        ):
            return "an internationalised (xn--) name is refused unless the name policy allows it"
        if rule is not None and not any(_matches(p, label, namespace) for p in rule):  # rule 3
            allowed = ", ".join(p.replace(NAMESPACE_PLACEHOLDER, namespace) for p in rule)
            return f"namespace {namespace} may publish only {allowed} (LANDB_NAME_POLICY)"
        return None  # rule 4


def _patterns(text: str, where: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    found = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    if not found and not allow_empty:
        raise InvalidPolicy(f"{where!r}: no pattern")
    for pattern in found:
        if not _PATTERN.match(pattern):
            raise InvalidPolicy(
                f"{where!r}: {pattern!r} is not a pattern (an alias label, or a prefix ending in *, "
                "{namespace} standing for the namespace)"
            )
    return found
