"""The operator's documents stay true to the code as settings are added."""

from __future__ import annotations

from pathlib import Path

from landb_webhook.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
CONFIGURATION = REPO_ROOT / "docs" / "configuration.md"


def test_every_setting_is_documented_with_its_variable_and_flag() -> None:
    text = CONFIGURATION.read_text()
    missing = [
        name
        for name in Settings.model_fields
        if f"`LANDB_{name.upper()}` (`--{name.replace('_', '-')}`)" not in text
    ]
    assert missing == []


def test_the_quick_start_is_the_two_make_targets_ci_runs() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
