"""Markdown tables that would not render as the writer meant: found in a page's Markdown
before it is built, so the strict build fails instead of showing ``| a | b |`` as text.

Python-Markdown renders a table only when its header row and separator row have the same
number of cells, and it silently drops the cells of a body row beyond the header's (and
pads a short row with empty ones). :func:`malformed_tables` reports each of these, and a
run of ``|`` lines with no separator row under its first line, by line number. Lines in
fenced code blocks are not Markdown and are skipped; a ``|`` inside inline code or
escaped as ``\\|`` does not separate cells, as in Python-Markdown.
"""

from __future__ import annotations

import re

#: A separator row: cells of dashes with optional alignment colons.
_SEPARATOR = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def cells(row: str) -> list[str]:
    """The cells of one table row: split at ``|`` outside inline code and not escaped,
    the outer pipes dropped."""
    text = row.strip()
    if text.startswith("|"):
        text = text[1:]
    out: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if char == "`":
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            closing = text.find("`" * run, i + run)
            if closing >= 0:
                current.append(text[i : closing + run])
                i = closing + run
                continue
        if char == "|":
            out.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    last = "".join(current).strip()
    if last or not row.strip().endswith("|"):
        out.append(last)
    return out


def _code_lines(lines: list[str]) -> set[int]:
    """The indices of lines inside fenced code blocks (the fences included)."""
    inside: set[int] = set()
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        match = _FENCE.match(stripped)
        if fence is None and match:
            fence = match.group(1)
            inside.add(i)
        elif fence is not None:
            inside.add(i)
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                fence = None
    return inside


def malformed_tables(markdown: str) -> list[str]:
    """``line N: what is wrong`` for every table in ``markdown`` that would not render as
    written (lines counted from 1)."""
    lines = markdown.splitlines()
    code = _code_lines(lines)
    problems: list[str] = []
    i = 0
    while i < len(lines):
        if i in code or not lines[i].strip().startswith("|"):
            i += 1
            continue
        start = i
        while i < len(lines) and i not in code and lines[i].strip().startswith("|"):
            i += 1
        block = [line.strip() for line in lines[start:i]]
        if len(block) < 2 or not _SEPARATOR.match(block[1]):
            problems.append(
                f"line {start + 1}: rows starting with '|' but no separator row "
                "('|---|---|') under the first: it renders as text"
            )
            continue
        header, separator = len(cells(block[0])), len(cells(block[1]))
        if header != separator:
            problems.append(
                f"line {start + 1}: the header row has {header} cells and the separator row "
                f"{separator}: the table renders as text"
            )
            continue
        for offset, row in enumerate(block[2:], start=2):
            found = len(cells(row))
            if found != header:
                problems.append(
                    f"line {start + offset + 1}: {found} cells in a table of {header} "
                    "columns: " + ("cells are dropped" if found > header else "cells are missing")
                )
    return problems
