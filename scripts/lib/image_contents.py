"""What an environment holds, checked against the locked production requirements (scripts/build-image.sh).

Run with the environment's own interpreter (inside the image: its venv's python) as
``python image_contents.py REQUIREMENTS``, where REQUIREMENTS is ``uv export --no-dev`` of the lock.
Prints the distributions by size and exits 1 if the environment holds anything the requirements do not
(a test or dev tool, a stray install), the simulator, or uv itself. Only the standard library: the image
has nothing else to spare.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import sys
from pathlib import Path

PROJECT = "landb-webhook"
TOP = 12


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_names(requirements: str) -> set[str]:
    """The distribution names of a requirements file: ``name==version ; marker`` lines, comments aside."""
    names = {PROJECT}
    for line in requirements.splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line)
        if match:
            names.add(normalized(match[1]))
    return names


def installed_size(distribution: importlib.metadata.Distribution) -> int:
    """Bytes on disk of the files its RECORD lists (files removed after install count nothing)."""
    total = 0
    for file in distribution.files or ():
        path = Path(str(distribution.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def main(requirements_file: str) -> int:
    allowed = locked_names(Path(requirements_file).read_text())
    distributions = {normalized(d.metadata["Name"]): d for d in importlib.metadata.distributions()}
    sizes = {name: installed_size(d) for name, d in distributions.items()}
    total = sum(sizes.values())
    print(f"{len(distributions)} distributions in {sys.prefix}, {total / 1e6:.0f} MB; the largest:")
    for name, size in sorted(sizes.items(), key=lambda item: -item[1])[:TOP]:
        print(f"  {size / 1e6:6.1f} MB  {name} {distributions[name].version}")
    print("all: " + ", ".join(f"{name}=={distributions[name].version}" for name in sorted(distributions)))

    problems = [
        f"{name} is installed but not a locked production requirement (a test or dev tool?)"
        for name in sorted(set(distributions) - allowed)
    ]
    if PROJECT not in distributions:
        problems.append(f"{PROJECT} itself is not installed")
    if importlib.util.find_spec("landb_simulator") is not None:
        problems.append("the simulator is installed (tests and the demo only)")
    if shutil.which("uv") is not None:
        problems.append(f"uv is on PATH at {shutil.which('uv')} (the build stage's tool)")
    for problem in problems:
        print(f"image_contents: {problem}", file=sys.stderr)
    if not problems:
        print("nothing but the locked production requirements: no simulator, no test or dev tool, no uv")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
