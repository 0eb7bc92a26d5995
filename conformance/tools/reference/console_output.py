"""What a console example on a page says a command prints, against what it prints today.

Both sides are masked the same way before they are compared, so only what changes from run
to run is left out: durations (``0.6s``, ``(1.5s)``, ``12 ms``), the cells of a table column
that holds a rate or a time (:data:`VOLATILE_COLUMNS`), commits (``commit 3c0093d``, a
version's ``+g4ba787ec9``) and the scratch folder the example runs in. Then each side is
read as a sequence of words, the tables' box-drawing characters and the spacing left out,
each table column one word (:func:`words`): a table whose columns got wider or narrower
because a masked value did, or whose cells wrap elsewhere, still reads the same.

A page may leave lines out of an output with a line of its own that is just ``...``: the
words before it must open the output, the words after it must follow somewhere later, and
so on, in order. A boxed table reads as one piece (its columns joined down its rows), so
an elision leaves out whole tables or lines outside them, never some rows of a table.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

#: Table columns whose cells change from run to run.
VOLATILE_COLUMNS = frozenset({"steps/s", "time", "actions/s", "rate"})
#: A line of a page's output that stands for lines left out.
ELISION = "..."
#: What a masked value reads as.
MASK = "<volatile>"

_DURATION = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?\s?(?:s|ms|µs|us|min)(?![\w])")
#: A commit: after the word "commit", or a version's local part (``0.34.0.dev118+g4ba787ec9``).
_COMMIT = re.compile(r"(?<=commit )[0-9a-f]{7,40}\b|(?<=\+g)[0-9a-f]{7,40}\b")
_BOX = re.compile(r"[\u2500-\u257f]")
_HEADER_EDGE = "┃"
_ROW_EDGE = "│"


def _cells(line: str, edge: str) -> list[str] | None:
    """The cells of a table line drawn with ``edge`` between them, or None."""
    stripped = line.strip()
    if not (stripped.startswith(edge) and stripped.endswith(edge)):
        return None
    return stripped[1:-1].split(edge)


def mask_columns(lines: Sequence[str]) -> list[str]:
    """``lines`` with every cell under a :data:`VOLATILE_COLUMNS` header masked."""
    out: list[str] = []
    volatile: set[int] = set()
    for line in lines:
        header = _cells(line, _HEADER_EDGE)
        if header is not None:
            volatile |= {i for i, cell in enumerate(header) if cell.strip() in VOLATILE_COLUMNS}
            out.append(line)
            continue
        row = _cells(line, _ROW_EDGE)
        if row is not None and volatile:
            row = [f" {MASK} " if i in volatile and c.strip() else c for i, c in enumerate(row)]
            out.append(_ROW_EDGE + _ROW_EDGE.join(row) + _ROW_EDGE)
            continue
        if line.lstrip().startswith(("└", "┗")):
            volatile = set()
        out.append(line)
    return out


def masked(text: str, scratch: str | None = None) -> list[str]:
    """``text``'s lines with the volatile parts masked."""
    if scratch:
        text = text.replace(scratch, "<scratch>")
    lines = mask_columns(text.split("\n"))
    return [_COMMIT.sub(MASK, _DURATION.sub(MASK, line)) for line in lines]


def words(lines: Sequence[str]) -> list[str]:
    """What ``lines`` say, as a list of words: box-drawing characters and spacing left
    out, and the body (or the header) of a boxed table read as one word per column, the
    column's text down all its lines joined with no spacing at all, so a table whose cells
    wrap, or fold inside a word, at other widths still reads the same."""
    out: list[str] = []
    columns: list[str] | None = None
    kind = ""  # the edge of the lines being joined: a header's or a body's
    for line in lines:
        edge = _ROW_EDGE if _cells(line, _ROW_EDGE) is not None else _HEADER_EDGE
        cells = _cells(line, edge)
        if cells is not None and len(cells) >= 2:
            parts = ["".join(_BOX.sub(" ", cell).split()) for cell in cells]
            if columns is not None and len(columns) == len(parts) and kind == edge:
                columns = [a + b for a, b in zip(columns, parts, strict=True)]
            else:
                out += columns or []
                columns, kind = parts, edge
            continue
        out += columns or []
        columns = None
        out += _BOX.sub(" ", line).split()
    out += columns or []
    return [w for w in out if w]


def _find(needle: list[str], haystack: list[str], start: int) -> int:
    """Where ``needle`` occurs in ``haystack`` at or after ``start``, or -1."""
    for i in range(start, len(haystack) - len(needle) + 1):
        if haystack[i : i + len(needle)] == needle:
            return i
    return -1


def matches(expected: str, actual: str, scratch: str | None = None) -> bool:
    """Whether ``actual`` reads as ``expected`` once both are masked (``...`` lines of
    ``expected`` standing for any lines)."""
    segments: list[list[str]] = [[]]
    for line in masked(expected, scratch):
        if line.strip() == ELISION:
            segments.append([])
        else:
            segments[-1].append(line)
    got = words(masked(actual, scratch))
    wanted = [words(s) for s in segments]
    if len(wanted) == 1:
        return wanted[0] == got
    first, *middle, last = wanted
    if got[: len(first)] != first:
        return False
    at = len(first)
    for segment in middle:
        found = _find(segment, got, at)
        if found < 0:
            return False
        at = found + len(segment)
    return len(got) - at >= len(last) and (not last or got[len(got) - len(last) :] == last)


def difference(expected: str, actual: str, scratch: str | None = None) -> str:
    """A diff of the two outputs, masked and with their spacing collapsed, for a message."""

    def lines(text: str) -> list[str]:
        return [" ".join(words([line])) for line in masked(text, scratch)]

    diff = difflib.unified_diff(
        lines(expected), lines(actual), "the page", "the command today", lineterm="", n=1
    )
    return "\n".join(diff)
