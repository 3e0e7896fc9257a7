"""The strategy worker's imports as in production: what only the development environment installs
cannot be imported.

The benchmark runs from the project's development virtualenv, which also holds the test and demo tools.
Some production dependencies import a package when it happens to be installed (structlog renders with
``rich`` when present), so a worker there would carry modules, and memory, the sidecar's image does not
have. Importing this module first makes every top-level module of a distribution outside the
``landb-webhook`` package's own requirements (its closure, without extras) unimportable, as it is in
production.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

PACKAGE = "landb-webhook"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def production_distributions(package: str = PACKAGE) -> frozenset[str]:
    """The distributions ``package`` needs, itself included, without any extra (canonical names). Not
    ``packaging``, which production does not have: a requirement with another marker is kept."""
    seen: set[str] = set()
    waiting = [package]
    while waiting:
        name = _canonical(waiting.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requirements:
            name_part, _, marker = text.partition(";")
            if not re.search(r"\bextra\b", marker):  # other markers kept: at worst a package too many
                waiting.append(_NAME.match(name_part.strip())[0])  # type: ignore[index]
    return frozenset(seen)


def hide_development_packages() -> list[str]:
    """Make the top-level modules that only development distributions provide unimportable (those
    already imported are left alone); returns their names."""
    production = production_distributions()
    hidden = []
    for module, distributions in metadata.packages_distributions().items():
        if module in sys.modules or module == "bench":
            continue
        if not any(_canonical(d) in production for d in distributions):
            sys.modules[module] = None  # type: ignore[assignment]  # the import system's "not importable"
            hidden.append(module)
    return sorted(hidden)


HIDDEN = hide_development_packages()
