"""The image recipe: pinned base, numeric non-root user, and a build context that carries nothing local.

No docker daemon can pull the base here, so these check the recipe itself; the README says what a real
build was not run for.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_every_stage_starts_from_a_base_pinned_by_digest() -> None:
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    stages = re.findall(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE)

    assert re.fullmatch(r"python:3\.11[\w.-]*@sha256:[0-9a-f]{64}", base)
    assert stages == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_the_user_is_the_numeric_one_the_chart_values_run_as() -> None:
    [user] = re.findall(r"^USER (\d+):(\d+)$", DOCKERFILE, re.MULTILINE)
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())
    context = values["provider"]["webhook"]["securityContext"]

    assert (int(user[0]), int(user[1])) == (context["runAsUser"], context["runAsGroup"]) != (0, 0)


def test_the_build_context_is_exactly_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    allowed = {line.removeprefix("!").rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.MULTILINE)
        for source in sources.split()
    }

    assert lines[0] == "*"  # everything else (.venv, .tools, state/, .git, caches) stays out
    assert allowed == copied == {"pyproject.toml", "uv.lock", "README.md", "src"}
