"""The exit-status policy: what each status of every ``kvpool`` command (and of the
standalone vectors runner) means, defined here once.

``--help`` texts, the docs' exit-status page (the ``exit-statuses`` fragment) and the
README's exit paragraph are all written from :data:`STATUSES`; a test keeps the README's
copy equal to :func:`summary`. This module imports nothing but the standard library, so
that ``kvpool --help`` can print the policy without loading the suite.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_PASS = 0
EXIT_FINDING = 1
EXIT_USAGE = 2
EXIT_TOO_FEW = 3
EXIT_BUG = 4
EXIT_UNDECIDED = 5
#: The shell's convention for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class ExitStatus:
    """One status: its number, a short name, what it means and what to do about it."""

    code: int
    name: str
    meaning: str
    what_to_do: str


#: Every status a ``kvpool`` command ends with; each means one thing only.
STATUSES: tuple[ExitStatus, ...] = (
    ExitStatus(EXIT_PASS, "conformant", "every check ran and passed", "nothing"),
    ExitStatus(
        EXIT_FINDING,
        "a finding",
        "the target (or the checked thing) broke a rule; a crash of the target's own code, "
        "and a SystemExit or KeyboardInterrupt raised by it, are findings too: a target that "
        "ends the process is a finding",
        "read the finding, replay its trace",
    ),
    ExitStatus(
        EXIT_USAGE,
        "a usage or input error",
        "a bad command line, a malformed input file, a target or plugin that cannot be "
        "loaded (a malformed engine entry is named), or a target that does not offer what "
        "the chosen checks call",
        "fix the command line, the file, or the target's surface as the message says",
    ),
    ExitStatus(
        EXIT_TOO_FEW,
        "too few valid cases",
        "a run made too few valid test cases for its verdict to stand (--min-valid)",
        "fix the findings, or raise --max-examples",
    ),
    ExitStatus(
        EXIT_BUG,
        "a bug in kvpool",
        "kvpool's own code failed; the command and the traceback are printed",
        "report it with the command and the traceback it printed",
    ),
    ExitStatus(
        EXIT_UNDECIDED,
        "undecided",
        "the check could not reach a verdict: a solver answered unknown, a tool (CrossHair) "
        "failed, the docs build failed, the baseline (the unmutated pool) did not pass, or a "
        "kvpool fuzz worker hung and was killed before its round ended",
        "read the message: raise the timeout, install the tool, fix the baseline",
    ),
    ExitStatus(
        EXIT_INTERRUPTED,
        "interrupted",
        "the user interrupted the command (Ctrl-C) outside the target's code, kvpool fuzz "
        "included (a campaign that found something before Ctrl-C still ends with 1)",
        "run it again",
    ),
)

#: Each status by its number.
BY_CODE: dict[int, ExitStatus] = {s.code: s for s in STATUSES}


def summary() -> str:
    """The policy in one paragraph: ``0 conformant, 1 a finding, ...`` (the README and
    ``--help`` print it)."""
    return "Exit status (every command): " + ", ".join(f"{s.code} {s.name}" for s in STATUSES) + "."


def help_block() -> str:
    """The policy for a click ``--help`` text: one status a line, kept as written (``\\b``)."""
    lines = ["\b", "Exit status (every command):"]
    lines += [f"  {s.code:>3}  {s.name}" for s in STATUSES]
    return "\n".join(lines)


def markdown_table() -> str:
    """The policy as the docs' table: status, name, meaning, what to do."""
    rows = ["| status | name | meaning | what to do |", "|---|---|---|---|"]
    rows += [f"| {s.code} | {s.name} | {s.meaning} | {s.what_to_do} |" for s in STATUSES]
    return "\n".join(rows)
