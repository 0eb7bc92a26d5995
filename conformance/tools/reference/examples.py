"""The docs' code examples, found and run the way the docs promise (``tests/docs`` runs every
one).

The convention, per fenced block of a page under ``docs/``:

- ```` ```python title="mypool.py" ````: written as that file into the page's scratch
  directory, not run;
- an untitled ```` ```python ```` block is run; all of one page's run in order, in one
  namespace, with the scratch directory as the working directory and on ``sys.path``;
- ```` ```console ````: each line starting with ``$ kvpool `` (a trailing ``\\`` joins the
  next line) is run as a kvpool command in the scratch directory, in an 80-column terminal,
  and must exit 0; the lines after it, up to the next ``$`` line, are what it prints, and
  must read as what it prints today, once what changes from run to run is masked
  (:mod:`.console_output`; a ``...`` line stands for lines left out); other ``$`` lines
  are commands that are shown, not run;
- HTML comments on the lines before the fence (blank lines between are allowed) change
  that: ``<!-- exit: N -->`` expects every kvpool command of the block to exit N,
  ``<!-- skip: reason -->`` skips the block, ``<!-- output: varies: reason -->`` runs it
  but does not compare what it prints (a campaign bounded by the clock, whose counts and
  timing are its own each run);
- every other fence (``text``, ``json``, ``yaml``, ``sh``, ...) is shown, not run.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click
from click.testing import CliRunner

from .console_output import difference, matches

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_TITLE = re.compile(r"""title=(?:"([^"]*)"|'([^']*)')""")
_DIRECTIVE = re.compile(r"^<!--\s*(?P<kind>skip|exit|output):\s*(?P<value>.*?)\s*-->$")
#: How a page says a command's output is not compared: ``<!-- output: varies: REASON -->``.
VARIES = "varies:"
_PROMPT = "$ kvpool "
#: The terminal width console examples run at (and their outputs on the pages show).
COLUMNS = 80


@dataclass(frozen=True)
class Fence:
    """One fenced block of a page."""

    page: str
    #: 1-based line of the opening fence.
    line: int
    language: str
    title: str | None
    body: str
    #: The HTML comment directive before the fence: ("skip", reason) or ("exit", "N").
    directive: tuple[str, str] | None = None
    #: Why the output of its commands is not compared (``<!-- output: varies: REASON -->``
    #: among the directives before the fence), or None: it is compared.
    varies: str | None = None

    @property
    def runs(self) -> bool:
        """Whether the test suite does anything with this block."""
        return self.language in ("python", "console")

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _directives(lines: list[str], before: int) -> dict[str, str]:
    """The directive comments on the lines above line index ``before`` (blank lines
    between allowed), the nearest of each kind."""
    found: dict[str, str] = {}
    i = before - 1
    while i >= 0:
        if not lines[i].strip():
            i -= 1
            continue
        match = _DIRECTIVE.match(lines[i].strip())
        if match is None:
            break
        found.setdefault(match.group("kind"), match.group("value"))
        i -= 1
    return found


def _directive(found: dict[str, str]) -> tuple[str, str] | None:
    """The skip or exit directive of a fence (the one that changes whether and how it
    runs)."""
    for kind in ("skip", "exit"):
        if kind in found:
            return (kind, found[kind])
    return None


def _varies(found: dict[str, str]) -> str | None:
    output = found.get("output")
    if output is None or not output.startswith(VARIES):
        return None
    return output[len(VARIES) :].strip()


def find_fences(text: str, page: str) -> list[Fence]:
    """Every fenced block of ``text`` (the page at ``page``), in order; the body is dedented
    by the fence's own indentation (blocks inside lists and admonitions)."""
    lines = text.split("\n")
    out: list[Fence] = []
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence, indent = opened.group("fence"), len(opened.group("indent"))
        info = opened.group("info").strip()
        language = info.split()[0].lstrip(".{").lower() if info else ""
        title = _TITLE.search(info)
        directives = _directives(lines, i)
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            line = lines[j]
            cut = len(line) - len(line.lstrip(" \t"))
            body.append(line[min(indent, cut) :])
            j += 1
        out.append(
            Fence(
                page=page,
                line=i + 1,
                language=language,
                title=(title.group(1) or title.group(2)) if title else None,
                body="\n".join(body) + "\n",
                directive=_directive(directives),
                varies=_varies(directives),
            )
        )
        i = j + 1
    return out


@dataclass(frozen=True)
class ConsoleCommand:
    """One ``$ kvpool ...`` line of a console block and the output the page shows for it."""

    #: Line offset of the command in the block's body.
    offset: int
    command: str
    output: str
    #: Line offsets in the body of the output's first line and of the line after its last.
    output_start: int = 0
    output_end: int = 0


def console_commands(body: str) -> list[ConsoleCommand]:
    """Every ``$ kvpool ...`` command of a console block (continuation lines joined), each
    with the lines after it up to the next ``$`` line: the output the page shows."""
    lines = body.split("\n")
    found: list[ConsoleCommand] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(_PROMPT):
            i += 1
            continue
        start, command = i, lines[i][len("$ ") :]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        end = i
        while end < len(lines) and not lines[end].startswith("$ "):
            end += 1
        output = "\n".join(lines[i:end]).strip("\n")
        found.append(ConsoleCommand(start, command, output, i, end))
        i = end
    return found


def kvpool_commands(body: str) -> list[tuple[int, str]]:
    """``(line offset in the body, command line)`` of every ``$ kvpool ...`` line of a
    console block, continuation lines joined."""
    return [(shown.offset, shown.command) for shown in console_commands(body)]


class ExampleFailed(AssertionError):
    """An example did not do what the page says; the message names the page and line."""


class ExampleSkipped(Exception):
    """The page skips this example (``<!-- skip: reason -->``)."""


@contextmanager
def _inside(scratch: Path) -> Iterator[None]:
    """Run with ``scratch`` as cwd and first on ``sys.path``; afterwards forget every module
    imported from it, so the next page's file of the same name is imported afresh."""
    before = Path.cwd()
    os.chdir(scratch)
    sys.path.insert(0, str(scratch))
    try:
        yield
    finally:
        os.chdir(before)
        while str(scratch) in sys.path:
            sys.path.remove(str(scratch))
        for name, module in list(sys.modules.items()):
            origin = getattr(module, "__file__", None)
            if origin and Path(origin).resolve().is_relative_to(scratch.resolve()):
                del sys.modules[name]


def expected_status(fence: Fence) -> int:
    """The exit status the page expects of a console block's commands (0 unless an
    ``<!-- exit: N -->`` directive says otherwise)."""
    if fence.directive is None or fence.directive[0] != "exit":
        return 0
    try:
        return int(fence.directive[1])
    except ValueError:
        raise ExampleFailed(
            f"{fence.where}: <!-- exit: {fence.directive[1]} --> is not a number"
        ) from None


class PageRun:
    """One page's examples, run in page order in one scratch directory and one namespace.

    :meth:`run` runs the blocks before the one asked for first (each once), so a test per
    block can run in any order and still see what the page set up.
    """

    def __init__(self, fences: list[Fence], scratch: Path, kvpool: click.Command) -> None:
        self.fences = fences
        self.scratch = scratch
        self.kvpool = kvpool
        self.namespace: dict[str, object] = {"__name__": "__docs_example__"}
        self.done = 0
        self.failed: dict[int, Exception] = {}
        self.skipped: dict[int, str] = {}
        #: What each command printed and its exit status, by (fence line, command offset).
        self.printed: dict[tuple[int, int], tuple[int, str]] = {}

    def run(self, index: int) -> None:
        """Run block ``index`` (after any earlier block not run yet).

        Raises :class:`ExampleFailed` when it fails (naming an earlier failed block of the
        page, which may be the cause), :class:`ExampleSkipped` when the page skips it.
        """
        while self.done <= index:
            position = self.done
            self.done += 1
            try:
                self._one(self.fences[position])
            except ExampleSkipped as skipped:
                self.skipped[position] = str(skipped)
            except Exception as exc:
                self.failed[position] = exc
        if index in self.skipped:
            raise ExampleSkipped(self.skipped[index])
        if index not in self.failed:
            return
        failure = self.failed[index]
        earlier = [self.fences[i].where for i in self.failed if i < index]
        note = f" (an earlier example of the page failed too: {earlier[0]})" if earlier else ""
        if isinstance(failure, ExampleFailed):
            raise ExampleFailed(f"{failure}{note}") from failure
        raise ExampleFailed(
            f"{self.fences[index].where}: {type(failure).__name__}: {failure}{note}"
        ) from failure

    def _one(self, fence: Fence) -> None:
        if fence.directive is not None and fence.directive[0] == "skip":
            raise ExampleSkipped(f"{fence.where}: {fence.directive[1] or 'skipped by the page'}")
        if fence.language == "python" and fence.title is not None:
            target = self.scratch / fence.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(fence.body, encoding="utf-8")
        elif fence.language == "python":
            self._python(fence)
        elif fence.language == "console":
            self._console(fence)

    def _python(self, fence: Fence) -> None:
        # blank lines in front, so a traceback quotes the page's own line numbers
        source = "\n" * fence.line + fence.body
        code = compile(source, fence.page, "exec")
        with _inside(self.scratch):
            exec(code, self.namespace)

    def _console(self, fence: Fence) -> None:
        expected = expected_status(fence)
        commands = console_commands(fence.body)
        if not commands:
            raise ExampleFailed(f"{fence.where}: a console block with no `$ kvpool` line")
        for shown in commands:
            offset, command = shown.offset, shown.command
            args = shlex.split(command)[1:]
            with _inside(self.scratch):
                runner = CliRunner(env={"COLUMNS": str(COLUMNS)})
                result = runner.invoke(self.kvpool, args, catch_exceptions=True)
            self.printed[(fence.line, offset)] = (result.exit_code, result.output)
            if result.exit_code != expected:
                crash = ""
                if result.exception is not None and not isinstance(result.exception, SystemExit):
                    crash = f" (raised {type(result.exception).__name__}: {result.exception})"
                raise ExampleFailed(
                    f"{fence.page}:{fence.line + 1 + offset}: `{command}` exited "
                    f"{result.exit_code}, the page expects {expected}{crash}\n"
                    f"{result.output[-3000:]}"
                )
            scratch = str(self.scratch)
            if fence.varies is not None or not shown.output.strip():
                continue
            if not matches(shown.output, result.output, scratch):
                raise ExampleFailed(
                    f"{fence.page}:{fence.line + 1 + offset}: `{command}` prints something "
                    "else than the page shows (volatile fields masked; - the page, + today):\n"
                    + difference(shown.output, result.output, scratch)
                )
