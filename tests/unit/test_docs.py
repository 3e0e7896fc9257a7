"""The operator's documents stay true to the code as settings are added."""

from __future__ import annotations

import re
from pathlib import Path

from landb_webhook.config import Settings
from support.alert_rules import rules

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


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_documents_lands_on_a_file_and_a_heading() -> None:
    documents = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
    broken = []
    for document in documents:
        text = document.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path).resolve() if path else document
            if not linked.exists():
                broken.append(f"{document.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)
                if anchor not in {github_anchor(h) for h in headings}:
                    broken.append(f"{document.name}: {target} (no such heading)")
    assert broken == []


def test_every_file_the_documents_and_deploy_files_name_exists() -> None:
    """A comment or a paragraph naming a test or a source file that was renamed misleads the reader."""
    named_in = [README, *(REPO_ROOT / "docs").glob("*.md"), *(REPO_ROOT / "deploy").rglob("*.yaml")]
    missing = {
        f"{document.relative_to(REPO_ROOT)}: {path}"
        for document in named_in
        for path in re.findall(
            r"\b((?:tests|src|packages|deploy|scripts|bench)/[\w./-]*\.\w+)", document.read_text()
        )
        if not (REPO_ROOT / path).exists()
    }
    assert missing == set()


def test_every_alert_is_named_in_the_readme_and_has_a_section_in_operations_saying_what_to_do() -> None:
    """An alert nobody can act on at 3 a.m. is noise: each one of deploy/prometheus-rules.yaml has a
    ``### `Name` `` section in docs/operations.md with a **Do:** paragraph, and the README names it."""
    alerts = [rule["alert"] for rule in rules()]
    operations = (REPO_ROOT / "docs" / "operations.md").read_text()
    sections = dict(re.findall(r"^### `(\w+)`\n(.*?)(?=^#)", operations, flags=re.MULTILINE | re.DOTALL))
    readme = README.read_text()

    assert alerts
    assert [alert for alert in alerts if "**Do:**" not in sections.get(alert, "")] == []
    assert [alert for alert in alerts if f"`{alert}`" not in readme] == []
