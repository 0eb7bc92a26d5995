"""Console examples that no longer show what their command prints, found and (on request)
rewritten with what it prints today.

A page's console examples are run as the docs tests run them (:class:`.examples.PageRun`:
the page's files written, its Python run, every ``$ kvpool`` command in an 80-column
terminal); each command whose shown output does not read as what it printed
(:func:`.console_output.matches`) has drifted. Refreshing replaces the drifted output with
the printed one, trailing spaces dropped; a block whose command ends with another status
than the page expects is left as it is and reported, since its output is not the one the
page means. An output the page had cut with ``...`` lines is replaced whole, and the
report says so, so the cut can be made again by hand.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from .console_output import ELISION, difference, matches
from .examples import (
    ExampleFailed,
    ExampleSkipped,
    PageRun,
    console_commands,
    expected_status,
    find_fences,
)


@dataclass(frozen=True)
class Drift:
    """One command of a page whose shown output is not what it prints."""

    #: ``page:line`` of the command.
    where: str
    command: str
    #: The shown output against the printed one, masked (a unified diff).
    diff: str
    #: The printed output, as the page would show it, or None when it is not to be
    #: written (the command ended with another status than the page expects).
    printed: str | None
    note: str = ""


def _as_shown(output: str, scratch: Path) -> list[str]:
    text = output.replace(str(scratch), "<scratch>").strip("\n")
    return [line.rstrip() for line in text.split("\n")]


def drifts(page: Path, name: str, kvpool: click.Command) -> tuple[list[Drift], list[str]]:
    """Every drifted command of ``page`` (shown as ``name``), and the page as it would
    read with each rewritable drift's output replaced (its lines)."""
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    fences = find_fences(text, name)
    found: list[Drift] = []
    edits: list[tuple[int, int, list[str]]] = []
    with tempfile.TemporaryDirectory(prefix="kvpool-examples-") as folder:
        scratch = Path(folder)
        run = PageRun(fences, scratch, kvpool)
        with contextlib.suppress(ExampleFailed, ExampleSkipped):
            run.run(len(fences) - 1)  # every block, each judged below command by command
        for fence in fences:
            if fence.language != "console" or fence.varies is not None:
                continue
            opening = lines[fence.line - 1]
            indent = opening[: len(opening) - len(opening.lstrip())]
            for shown in console_commands(fence.body):
                key = (fence.line, shown.offset)
                if key not in run.printed or not shown.output.strip():
                    continue
                status, printed = run.printed[key]
                if matches(shown.output, printed, str(scratch)):
                    continue
                where = f"{name}:{fence.line + 1 + shown.offset}"
                diff = difference(shown.output, printed, str(scratch))
                if status != expected_status(fence):
                    note = (
                        f"exits {status}, the page expects {expected_status(fence)}: not rewritten"
                    )
                    found.append(Drift(where, shown.command, diff, None, note))
                    continue
                new = _as_shown(printed, scratch)
                elided = any(line.strip() == ELISION for line in shown.output.split("\n"))
                note = "its '...' cuts were replaced by the whole output" if elided else ""
                found.append(Drift(where, shown.command, diff, "\n".join(new), note))
                first = fence.line + shown.output_start
                last = fence.line + min(shown.output_end, len(fence.body.split("\n")) - 1)
                edits.append((first, last, [indent + line if line else "" for line in new]))
    for first, last, new in sorted(edits, reverse=True):
        lines[first:last] = new
    return found, lines


def refresh(page: Path, name: str, kvpool: click.Command, write: bool) -> list[Drift]:
    """The drifted commands of ``page``; with ``write``, the page rewritten with what
    they print (those that end as the page expects)."""
    found, lines = drifts(page, name, kvpool)
    if write and any(d.printed is not None for d in found):
        page.write_text("\n".join(lines), encoding="utf-8")
    return found
