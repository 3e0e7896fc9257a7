"""The operator's documents stay true to the code as settings are added."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from landb_webhook.config import Settings
from support.prometheus import rules

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


# -- the log lines the documents quote --------------------------------------------------------------------

SOURCES = [REPO_ROOT / "src" / "landb_webhook", REPO_ROOT / "packages" / "simulator" / "src"]
WILD = None
"""In a template, where a formatted value goes: it matches any text."""
ELIDED = re.compile(r"…|\.\.\.|<[^<>`]+>")
"""In a quote, what the document left out: ``…``, ``...``, ``<name>``."""
NOT_OURS = {"RESP BODY", "All records are already up to date"}
"""Lines the documents quote from other programs: openstacksdk's debug output, external-dns' own log."""
COMMANDS = ("kubectl ", "landb-webhook ", "openstack ", "curl ", "helm ")


def message_templates() -> list[list[str | None]]:
    """Every string the code can emit: each literal, an f-string's formatted values as WILD."""
    templates: list[list[str | None]] = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.JoinedStr):
                    parts: list[str | None] = []
                    for value in node.values:
                        if isinstance(value, ast.Constant) and isinstance(value.value, str):
                            parts += list(value.value)
                        else:
                            parts.append(WILD)
                    templates.append(parts)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    templates.append(list(node.value))
    return templates


LITERAL_SHARE = 0.4
"""How much of a quoted fragment must be the template's own text, not its formatted values: ``f"{error}"``
renders anything, and ``change refused: the alias exists without ownership record`` matched against
``f"change refused: {reason}"`` is a third its text."""


def occurs_in(fragment: str, template: list[str | None]) -> bool:
    """Whether ``fragment`` is part of some text the template renders, starting and ending anywhere, each
    WILD standing for any text, with at least LITERAL_SHARE of it the template's own characters. An
    automaton over the template's positions, each state keeping the most literal characters matched."""
    size = len(template)

    def closed(states: dict[int, int]) -> dict[int, int]:
        """A WILD may also stand for nothing."""
        found = dict(states)
        for start in sorted(states):
            literal, at = found[start], start
            while at < size and template[at] is WILD:
                at += 1
                found[at] = max(found.get(at, -1), literal)
        return found

    states = closed(dict.fromkeys(range(size + 1), 0))
    for char in fragment:
        following: dict[int, int] = {}
        for at, literal in states.items():
            if at < size and template[at] == char:
                following[at + 1] = max(following.get(at + 1, -1), literal + 1)
            elif at < size and template[at] is WILD:
                following[at] = max(following.get(at, -1), literal)
        if not following:
            return False
        states = closed(following)
    return max(states.values()) >= LITERAL_SHARE * len(fragment)


JOINTS = re.compile(r": |; | \(")
"""Where the code joins one string to another: ``changes refused: {error}`` with an error ``not the
writer: ...``, ``{state} ({answer})``, ``{error}; {hint}``."""


WORD = re.compile(r"[A-Za-z]{3,}")


class Emitted:
    """The strings the code emits, indexed by word so that a fragment is tried against few of them."""

    def __init__(self, templates: list[list[str | None]]) -> None:
        self.templates = [t for t in {tuple(t): t for t in templates}.values() if len(t) > 1]
        self.texts = ["".join("\0" if c is WILD else c for c in template) for template in self.templates]
        self.by_word: dict[str, set[int]] = {}
        for number, text in enumerate(self.texts):
            for word in set(WORD.findall(text)):
                self.by_word.setdefault(word, set()).add(number)

    def __contains__(self, fragment: object) -> bool:
        """Part of one string the code emits, or of several at their JOINTS. A fragment without a word
        (``503``, ``A``, ``)``) says too little to check."""
        assert isinstance(fragment, str)
        words = set(WORD.findall(fragment))
        if not words:
            return True
        hits: dict[int, int] = {}
        for word in words:
            for number in self.by_word.get(word, ()):
                hits[number] = hits.get(number, 0) + 1
        if any(fragment in self.texts[n] for n in hits):
            return True
        # Half its text is the template's own, so a good part of its words are too.
        likely = sorted(n for n, count in hits.items() if 3 * count >= len(words))
        if any(occurs_in(fragment, self.templates[n]) for n in likely):
            return True
        pieces = [piece for piece in JOINTS.split(fragment) if piece.strip()]
        return pieces != [fragment] and all(piece in self for piece in pieces)


def quoted_log_lines() -> list[tuple[str, int, str]]:
    """(file, line, quote) of each log line the README and docs quote. Their conventions: a backticked
    message followed by ``line(s)`` or by its level (``(warning``), after ``log's``, ``logs``,
    ``log line,`` or ``logged (``; every multi-word quote in the first column of the README's
    troubleshooting table; and any backticked ``<event>: <detail>`` whose event is the head of a
    message the code emits (how docs/operations.md quoted ``change refused: the alias exists without
    ownership record``)."""
    heads = {
        text.split(": ")[0]
        for template in message_templates()
        if ": " in (text := "".join(c for c in template if c is not None)) and " " in text.split(": ")[0]
    }
    around = re.compile(
        r"(?:(?:log's|log's warning|logs|logged \(|logs, at \w+,|log line,) `([^`]+)`)"
        r"|(?:`([^`]+)`(?= lines?\b| \((?:warning|error|info)))"
    )
    found = []
    for document in [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        in_troubleshooting = False
        for number, line in enumerate(document.read_text().splitlines(), 1):
            if line.startswith("## "):
                in_troubleshooting = document == README and line == "## Troubleshooting"
            quotes = {a or b for a, b in around.findall(line)}
            if in_troubleshooting and line.startswith("| "):
                quotes |= set(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
            quotes |= {q for q in re.findall(r"`([^`]+)`", line) if q.split(": ")[0] in heads and ": " in q}
            found += [
                (f"{document.relative_to(REPO_ROOT)}", number, quote)
                for quote in sorted(quotes)
                if " " in quote.strip() and not quote.startswith(COMMANDS) and quote not in NOT_OURS
            ]
    return found


def test_every_log_line_the_documents_quote_is_one_the_code_emits() -> None:
    """An operator greps the log for what the docs quote: a quote the code never prints finds nothing.
    Each part of a quote between elisions (``…``, ``<name>``) must be part of a string the code emits."""
    emitted = Emitted(message_templates())
    quotes = quoted_log_lines()
    drifted = [
        f"{path}:{number}: `{quote}`"
        for path, number, quote in quotes
        if not all(fragment in emitted for fragment in (p.strip() for p in ELIDED.split(quote)) if fragment)
    ]
    assert len(quotes) > 30  # the conventions above still find the quotes
    assert drifted == [], "quoted in the docs, emitted by no code:\n" + "\n".join(drifted)
