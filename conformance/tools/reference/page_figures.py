"""Figures typed into a page by hand: the docs test that every measured figure on a page
comes from a record (rendered by a ``<!-- kvpool:NAME -->`` fragment from a file under
``docs/data``, with the command and commit that produced it) or from a console example the
docs tests re-run, never from someone's memory of a run.

A figure is a number with a unit of time, rate, share or ratio (``4.2 s``, ``920 µs``,
``12%``, a ratio, ``9,500 a CPU second``), a number grouped in thousands (``64,000``), a
count of outcomes (``6 of 16``) or a decimal (``0.83``), in a page's prose or in a
fenced block the docs tests do not compare with what its command prints today (a block of
made-up numbers, such as a file format's example, says so in a ``<!-- figures: REASON -->``
line before its fence).
Text in backticks (a command, a commit, an option's value), a version (``0.33.0``) and a
marker are not figures. The pages checked are :data:`PAGES`; a page joins the list once
its figures are all rendered.
"""

from __future__ import annotations

import re
from pathlib import Path

from .examples import find_fences

#: The pages held to it (paths under ``docs/``).
PAGES = (
    "guide/levels.md",
    "workflow/bench.md",
    "guide/formal-checks.md",
    "targets.md",
    "workflow/fuzz.md",
    "workflow/monitor-soak.md",
    "guide/kv-events-contract.md",
)

_UNIT = (
    r"(?:s|ms|µs|us|ns|min|minutes?|seconds?|hours?|%|\u00d7|x|MB|GB|KB|/s|"
    r"a (?:CPU )?second|per (?:CPU )?second)"
)
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
#: A figure anywhere: a number with its unit, a number grouped in thousands, a range of
#: decimals (``1.69`` to ``2.03``, with an en dash or a hyphen), a count of a run's outcomes
#: (``6 of 16``).
FIGURE = re.compile(
    rf"(?<![\w.`/-]){_NUMBER}(?:\s?[\u2013-]\s?{_NUMBER})?\s?{_UNIT}(?!\w|\.\d)"
    r"|(?<![\w.,/-])\d{1,3}(?:,\d{3})+(?!\w|\.\d)"
    r"|(?<![\w./-])\d+\.\d+\s?[\u2013-]\s?\d+\.\d+(?!\w|\.\d)"
    r"|(?<![\w.,/-])\d+ of \d[\d,]*(?!\w|\.\d)"
)
#: A figure in a block's output, or a table cell that is a number alone: any decimal too
#: (``1.416``), which in a sentence is more often a release (``vLLM 0.30``).
CELL_FIGURE = re.compile(FIGURE.pattern + r"|(?<![\w./-])\d+\.\d+(?!\w|\.\d)")
_ALONE_IN_A_CELL = re.compile(r"(?<=\|)\s*(\d+\.\d+(?:\s?[\u2013-]\s?\d+\.\d+)?)\s*(?=\|)")
#: The comment before a fence that holds numbers but no measurement (a format's example),
#: with the reason: ``<!-- figures: a format example, not a measurement -->``.
NOT_FIGURES = re.compile(r"<!--\s*figures:\s*\S.*?-->")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_COMMENT = re.compile(r"<!--.*?-->")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")


def _not_figures(lines: list[str], fence_line: int) -> bool:
    """Whether the fence opening at ``fence_line`` (1-based) is marked as holding no
    measurement (:data:`NOT_FIGURES`, blank lines between allowed)."""
    before = fence_line - 2
    while before >= 0 and not lines[before].strip():
        before -= 1
    return before >= 0 and NOT_FIGURES.fullmatch(lines[before].strip()) is not None


def _fenced_lines(text: str, page: str) -> tuple[set[int], set[int]]:
    """The lines (1-based) of fenced blocks the docs tests compare with what their command
    prints today (or marked as holding no measurement), and of those shown as typed."""
    compared: set[int] = set()
    shown: set[int] = set()
    lines = text.split("\n")
    for fence in find_fences(text, page):
        span = range(fence.line, fence.line + fence.body.count("\n") + 3)
        runs = fence.language == "console" and fence.runs and fence.varies is None
        (compared if runs or _not_figures(lines, fence.line) else shown).update(span)
    return compared, shown


def typed_figures(text: str, page: str) -> list[str]:
    """``page:line: figure`` for each figure of ``text`` not rendered from a record."""
    compared, shown = _fenced_lines(text, page)
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        if number in compared:
            continue
        if number in shown:
            found += [f"{page}:{number}: {m.group(0)}" for m in CELL_FIGURE.finditer(line)]
            continue
        line = _LINK_TARGET.sub("]", _COMMENT.sub("", _INLINE_CODE.sub("", line)))
        found += [f"{page}:{number}: {m.group(0)}" for m in FIGURE.finditer(line)]
        if line.lstrip().startswith("|"):
            found += [f"{page}:{number}: {m.group(1)}" for m in _ALONE_IN_A_CELL.finditer(line)]
    return found


def page_figures(docs_dir: Path) -> list[str]:
    """Every typed figure on :data:`PAGES` under ``docs_dir``."""
    found: list[str] = []
    for page in PAGES:
        found += typed_figures((docs_dir / page).read_text(encoding="utf-8"), page)
    return found
