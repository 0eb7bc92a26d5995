"""Small helpers for writing the generated Markdown: tables, inline code, fenced blocks."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence

from kvpool.spec import ALL_ACTIONS

#: The note every generated page starts with, so nobody edits it by hand.
GENERATED = (
    "<!-- generated from the spec by kvpool.conformance.tools.reference at build time; "
    "do not edit -->\n\n"
)


def code(text: str) -> str:
    """``text`` as inline code, with a fence long enough for any backticks inside."""
    ticks = "`"
    while ticks in text:
        ticks += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def cell(text: str) -> str:
    """``text`` made safe for one table cell: no line breaks, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; cells are escaped, so pass plain text or inline Markdown."""
    lines = [
        "| " + " | ".join(cell(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def fence(text: str, language: str = "text") -> str:
    """A fenced block, its fence longer than any run of backticks in ``text``."""
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{language}\n{text.rstrip()}\n{ticks}\n"


def summary(obj: object) -> str:
    """The first paragraph of an object's docstring, joined into one line."""
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    return " ".join(doc.split("\n\n", 1)[0].split())


_FIRST_WORD = re.compile(r"[^\s(`]*")

#: The pool's operation names: a text opening with one (``touch takes ...``) names the call.
OPERATIONS = frozenset(action.operation for action in ALL_ACTIONS)


def sentence(text: str) -> str:
    """``text`` starting with a capital letter, unless its first word is an identifier
    (``get_new_blocks(n) needs ...``, ``block_size must ...``, ``touch takes ...``): a
    quoted name keeps its case, so it reads exactly as it is written in the code."""
    word = _FIRST_WORD.match(text)
    first = word.group(0) if word else ""
    after = text[len(first) : len(first) + 1]
    if not first or "_" in first or after == "(" or first in OPERATIONS or not first.isalpha():
        return text
    return text[0].upper() + text[1:]


def paragraphs(text: str) -> str:
    """Docstring prose as Markdown: paragraphs kept, lines inside a paragraph joined."""
    blocks = [" ".join(block.split()) for block in text.split("\n\n")]
    return "\n\n".join(b for b in blocks if b) + "\n"


def bullets(items: Iterable[str]) -> str:
    """A bullet list (an empty string when there are no items)."""
    lines = [f"- {item}" for item in items]
    return "\n".join(lines) + "\n" if lines else ""


_ROLE = re.compile(r":(?:class|func|mod|data|meth|attr|exc):`~?([^`<]+?)(?:\s*<([^>]+)>)?`")


def prose(text: str) -> str:
    """Docstring text as Markdown: Sphinx roles (``:class:`~a.B```) become inline code of
    the name shown; the ``~`` form keeps only the last part."""

    def shown(match: re.Match[str]) -> str:
        title, target = match.group(1).strip(), match.group(2)
        if target is not None:
            return f"{title} ({code(target)})"
        name = title.rsplit(".", 1)[-1] if match.group(0).find("`~") >= 0 else title
        return code(name)

    return _ROLE.sub(shown, text)
