"""What has one place stays in it: each check reads the product's source, as test_layers.py reads its imports.

- ``refused_changes_total`` is counted in provider/refusals.py only (metrics.py defines it): every other
  module adds its refusals to the apply's ``Refusals``, so the metric, the log, the events and the 503
  cannot disagree;
- external-dns' registry names, ``"txt"`` and ``"noop"``, are compared in provider/registry.py only (config.py
  spells them once, as the setting's type); everywhere else asks the ``Registry`` value;
- a provider module is read in one sitting: at most ``PROVIDER_MODULE_LINES`` lines (a room's job grows by a
  module, not by a longer one).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import landb_webhook

SOURCE = Path(landb_webhook.__file__).parent
PROVIDER_MODULE_LINES = 400


def modules_where(found: type[ast.AST], matches: Callable[[Any], bool]) -> set[str]:
    """The product's modules (paths under the package) holding a node of type ``found`` that ``matches``."""
    places = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, found) and matches(node):
                places.add(path.relative_to(SOURCE).as_posix())
    return places


def test_refused_changes_are_counted_in_one_module() -> None:
    places = modules_where(ast.Attribute, lambda node: node.attr == "refused_changes_total")

    assert places == {"metrics.py", "provider/refusals.py"}


def test_the_registry_names_are_compared_in_one_module() -> None:
    places = modules_where(ast.Constant, lambda node: node.value in ("txt", "noop"))

    assert places == {"config.py", "provider/registry.py"}


def test_no_provider_module_is_longer_than_one_sitting() -> None:
    lengths = {
        path.relative_to(SOURCE).as_posix(): len(path.read_text().splitlines())
        for path in (SOURCE / "provider").rglob("*.py")
    }

    assert len(lengths) > 30  # the rooms' modules were read
    assert {path: n for path, n in lengths.items() if n > PROVIDER_MODULE_LINES} == {}
