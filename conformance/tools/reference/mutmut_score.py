"""The mutmut score of the unit tests, from ``docs/data/mutmut.json``.

The file records one run of ``.ci/mutmut`` over ``kvpool.impl`` (what mutmut said of every
mutant, counted by status) and a verdict for each mutant the run did not kill: killed by a
test written since (named), or equivalent (a reason, explained once). ``.ci/mutmut_score.py``
writes it from a finished run; this module checks it and renders it for the docs. The score
is computed here, never typed in:

    score = killed / (mutants checked - equivalent)

where *killed* counts mutmut's kills and timeouts plus the verdicts ``killed``.

A score is of the code the run mutated. The record keeps a content hash of that
``impl/`` (``run.impl_sha256``, :func:`impl_digest`), so the pages can tell, without git
history, whether today's ``impl/`` is still that code: when it is not (or the record has
no hash), the score is shown as stale, with the commit it is of.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .markdown import code, table

SCHEMA = "kvpool-mutmut/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "mutmut.json"
#: mutmut's statuses that count as killed by the run itself.
RUN_KILLS = ("killed", "timeout")
#: mutmut's statuses that need a verdict.
NEEDS_VERDICT = ("survived", "no tests")


def impl_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """The content hash of an ``impl/`` given as ``(path under impl/, bytes)`` for each of
    its ``.py`` files: SHA-256 over the files in path order, each as its path, a NUL, the
    SHA-256 of its bytes and a newline. Where the files come from (a folder, a commit)
    does not change it."""
    digest = hashlib.sha256()
    for path, content in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(content).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def impl_tree_digest(impl_dir: Path) -> str:
    """:func:`impl_digest` of the ``.py`` files under ``impl_dir``."""
    return impl_digest(
        (p.relative_to(impl_dir).as_posix(), p.read_bytes()) for p in impl_dir.rglob("*.py")
    )


class ScoreFileError(ValueError):
    """The record is inconsistent (its message says where)."""


@dataclass(frozen=True)
class Verdict:
    mutant: str
    #: mutmut's status for it: "survived" or "no tests".
    status: str
    #: "killed" (by the test ``by``) or "equivalent" (for the reason ``by``).
    verdict: str
    by: str

    @property
    def function(self) -> str:
        """``module.Class.method`` as the docs name it (mutmut's mangling undone)."""
        name = self.mutant.removeprefix("kvpool.impl.").rsplit("__mutmut_", 1)[0]
        module, _, rest = name.partition(".")
        # mutmut writes a method as xǁClassǁmethod and a function as x_function
        method = rest.startswith("xǁ")
        return f"{module}.{rest[2:].replace('ǁ', '.') if method else rest.removeprefix('x_')}"

    @property
    def number(self) -> int:
        return int(self.mutant.rsplit("__mutmut_", 1)[1])


@dataclass(frozen=True)
class Score:
    run: dict[str, Any]
    reasons: dict[str, str]
    verdicts: list[Verdict]

    @property
    def mutants(self) -> int:
        return int(self.run["mutants"])

    @property
    def status(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.run["status"].items()}

    @property
    def unchecked(self) -> int:
        return self.status.get("not checked", 0)

    @property
    def checked(self) -> int:
        return self.mutants - self.unchecked

    @property
    def equivalent(self) -> int:
        return sum(v.verdict == "equivalent" for v in self.verdicts)

    @property
    def killed_later(self) -> int:
        return sum(v.verdict == "killed" for v in self.verdicts)

    @property
    def killed(self) -> int:
        return sum(self.status.get(s, 0) for s in RUN_KILLS) + self.killed_later

    @property
    def score(self) -> float:
        return self.killed / (self.checked - self.equivalent)

    def stale(self, impl_dir: Path) -> str | None:
        """Why the score is not of the ``impl/`` at ``impl_dir`` (its content differs from
        the run's, or the record cannot say), or ``None`` when it is."""
        recorded = self.run.get("impl_sha256")
        if recorded is None:
            return "the record keeps no content hash of the impl/ it mutated"
        if recorded != impl_tree_digest(impl_dir):
            return f"impl/ has changed since commit {self.run['commit']}"
        return None


def parse(data: dict[str, Any], test_names: set[str] | None = None) -> Score:
    """The record as a :class:`Score`, checked: counts add up, every mutant the run did not
    kill has exactly one verdict, every reason is explained, and (given ``test_names``)
    every killing test exists."""
    if data.get("schema") != SCHEMA:
        raise ScoreFileError(f"schema must be {SCHEMA!r}, not {data.get('schema')!r}")
    run, reasons = data["run"], data["reasons"]
    verdicts = [Verdict(**v) for v in data["verdicts"]]
    score = Score(run, reasons, verdicts)
    if sum(score.status.values()) != score.mutants:
        raise ScoreFileError(
            f"the statuses add up to {sum(score.status.values())}, not {score.mutants} mutants"
        )
    names = [v.mutant for v in verdicts]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ScoreFileError(f"a mutant has two verdicts: {twice}")
    for v in verdicts:
        if v.status not in NEEDS_VERDICT:
            raise ScoreFileError(f"{v.mutant}: status {v.status!r} needs no verdict")
    for status in NEEDS_VERDICT:
        have = sum(v.status == status for v in verdicts)
        if have != score.status.get(status, 0):
            raise ScoreFileError(
                f"{score.status.get(status, 0)} mutants are {status!r} but {have} have a verdict"
            )
    for v in verdicts:
        if v.verdict == "equivalent":
            if v.by not in reasons:
                raise ScoreFileError(f"{v.mutant}: reason {v.by!r} is not explained in 'reasons'")
        elif v.verdict == "killed":
            if test_names is not None and v.by not in test_names:
                raise ScoreFileError(f"{v.mutant}: killing test {v.by!r} does not exist")
        else:
            raise ScoreFileError(
                f"{v.mutant}: verdict must be killed or equivalent, not {v.verdict!r}"
            )
    unused = set(reasons) - {v.by for v in verdicts if v.verdict == "equivalent"}
    if unused:
        raise ScoreFileError(f"reasons no verdict uses: {sorted(unused)}")
    return score


def load(docs_dir: Path, test_names: set[str] | None = None) -> Score:
    return parse(json.loads((docs_dir / DATA).read_text()), test_names)


def readme_summary(score: Score, impl_dir: Path) -> str:
    """The README's sentence on the score (a test keeps the README saying exactly this),
    marked stale when ``impl_dir`` is no longer the code the run mutated."""
    run = score.run
    scope = (
        f"{score.checked:,} of the {score.mutants:,} checked so far"
        if score.unchecked
        else f"all {score.mutants:,} checked"
    )
    not_killed = len(score.verdicts)
    rest = (
        f"of the {not_killed:,} it did not kill, {score.killed_later:,} are killed by tests "
        f"written since and {score.equivalent:,} are argued equivalent"
        if score.killed_later
        else f"the {not_killed:,} it did not kill are argued equivalent"
    )
    stale = score.stale(impl_dir)
    return (
        f"the run of {run['date']} (commit `{run['commit']}`, {scope}) killed "
        f"{score.killed - score.killed_later:,}; {rest}: **{score.killed:,} killed of "
        f"{score.checked - score.equivalent:,} non-equivalent mutants, {score.score:.1%}**"
        + (f" (**stale**: {stale}; the score is of that commit's code)." if stale else ".")
    )


def stale_warning(score: Score, impl_dir: Path) -> str:
    """An admonition saying the score is stale and why (empty when it is current)."""
    why = score.stale(impl_dir)
    if why is None:
        return ""
    return (
        '!!! warning "Stale: this score is of older code"\n'
        f"    {why}, so the figures below are of `impl/` as it was at commit "
        f"`{score.run['commit']}`, not of today's. Run `.ci/mutmut`, then "
        "`.ci/mutmut_score.py`, to score today's code.\n\n"
    )


def score_table(score: Score, impl_dir: Path) -> str:
    """What the run said, what became of the rest, and the score (after a warning when
    ``impl_dir`` is not the code the run mutated)."""
    s = score.status
    run = score.run
    rows = [
        ("mutants of `kvpool.impl`", f"{score.mutants:,}"),
        ("killed by the run (a test failed)", f"{s.get('killed', 0):,}"),
        ("killed by the run (timed out)", f"{s.get('timeout', 0):,}"),
        ("survived the run", f"{s.get('survived', 0):,}"),
        ("no test reached the function", f"{s.get('no tests', 0):,}"),
        ("not yet checked", f"{score.unchecked:,}"),
        ("of those not killed: killed by a test written since", f"{score.killed_later:,}"),
        ("of those: argued equivalent", f"{score.equivalent:,}"),
        (
            "**score**: killed / (checked - equivalent)",
            f"**{score.killed:,} / {score.checked - score.equivalent:,} = {score.score:.1%}**",
        ),
    ]
    head = (
        f"The run of {run['date']} (commit `{run['commit']}`, mutmut {run['mutmut']}, "
        f"Python {run['python']}, {run['hours']} h on 2 cores)"
    )
    partial = (
        f" checked {score.checked:,} of the {score.mutants:,} mutants; the score is of those."
        if score.unchecked
        else " checked every mutant."
    )
    return stale_warning(score, impl_dir) + head + partial + "\n\n" + table(("", "mutants"), rows)


def survivors_table(score: Score) -> str:
    """Each function's mutants the run did not kill: which test kills each now, or why it is
    equivalent."""
    killed: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    equivalent: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for v in score.verdicts:
        (killed if v.verdict == "killed" else equivalent)[v.function][v.by].append(v.number)

    def numbers(ns: list[int]) -> str:
        return ", ".join(str(n) for n in sorted(ns))

    rows = [
        (code(function), numbers(ns), code(test))
        for function, by_test in sorted(killed.items())
        for test, ns in sorted(by_test.items())
    ]
    numbering = (
        "mutant numbers as `mutmut show` names them, `kvpool.impl.<module>.x<name>__mutmut_<n>`"
    )
    if rows:
        out = [
            f"Killed by a test written after the run ({numbering}; every test is in "
            "`tests/impl/test_impl_mutmut_kills.py`):\n",
            table(("function", "mutants", "killed by"), rows),
            f"\nEquivalent ({score.equivalent}): each changes nothing a caller can see.\n",
        ]
    else:
        out = [
            f"Every mutant the run did not kill is argued equivalent ({score.equivalent}; "
            f"{numbering}): each changes nothing a caller can see.\n"
        ]
    eq_rows = [
        (code(function), numbers(ns), f"**{reason}**")
        for function, by_reason in sorted(equivalent.items())
        for reason, ns in sorted(by_reason.items())
    ]
    out.append(table(("function", "mutants", "why"), eq_rows))
    out.append("")
    out.extend(f"- **{key}**: {text}" for key, text in sorted(score.reasons.items()))
    return "\n".join(out) + "\n"
