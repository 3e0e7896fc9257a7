"""The case tables of the rules' docstrings (landb/packing.py, landb/indices.py, ...), read as data, so
that a test restating them one ``parametrize`` entry per row can check that no row went missing."""

from __future__ import annotations

import re


def table_rows(doc: str | None, *, starts_row: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``doc``, each as column heading -> cell text.

    A wrapped row goes on over the lines below it whose ``starts_row`` cell is empty (a column every row
    fills on its first line): their cells' text is appended, one space apart. ``\\`\\``` marks are
    dropped and runs of spaces are one space, so a row reads as it renders."""
    lines = [line.strip() for line in (doc or "").splitlines()]
    first = next(n for n, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append([_plain(cell) for cell in line.strip("|").split("|")])
    headings, body = table[0], table[2:]  # table[1]: the |---| rule
    column = headings.index(starts_row)
    rows: list[dict[str, str]] = []
    for cells in body:
        if cells[column] or not rows:
            rows.append(dict(zip(headings, cells, strict=True)))
            continue
        for heading, cell in zip(headings, cells, strict=True):
            if cell:
                rows[-1][heading] = f"{rows[-1][heading]} {cell}".strip()
    return rows


def _plain(cell: str) -> str:
    return re.sub(r"\s+", " ", cell.replace("``", "")).strip()
