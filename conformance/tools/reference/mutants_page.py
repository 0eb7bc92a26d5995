"""``reference/mutants.md``: the planted bugs ``kvpool mutants`` scores the suite with, each
with the patch that plants it, read from the corpus itself."""

from __future__ import annotations

from kvpool.conformance.tools.mutants.corpus import MUTANTS, Mutant

from .markdown import GENERATED, code, sentence, table


def _patch(mutant: Mutant) -> str:
    """The mutant's patch as a diff fence: the correct lines, then the faulty ones."""
    removed = [f"-{line}" for line in mutant.old.splitlines()]
    added = [f"+{line}" for line in mutant.new.splitlines()]
    return "```diff\n" + "\n".join([*removed, *added]) + "\n```\n"


def mutants_page() -> str:
    """The page: a table of every mutant, then each patch under its own heading."""
    rows = [
        (f"[{code(m.name)}](#{m.name})", m.bug, code(m.shows), code(f"impl/{m.file}"))
        for m in MUTANTS
    ]
    out = [
        GENERATED,
        "# Mutants\n",
        f"`kvpool mutants` plants each of these {len(MUTANTS)} bugs in `kvpool.impl`, one at "
        "a time, runs the conformance suite against the faulty pool and reports whether the "
        "suite caught it, how fast, by which run and with how short a trace. Each is one "
        "exact snippet of impl's source replaced by a faulty one: a bug a person could "
        "write, most of them ones real pools have had. A test checks that every snippet "
        "still occurs exactly once, so the corpus cannot rot as impl changes.\n",
        "A kill counts only as a nonconformance of the faulty pool that shows what the "
        "mutant's entry says (the observable or rule in the third column); a kill by "
        "anything else, a crash of the harness or the spec breaking its own invariants fails "
        "the command, and so does the unmutated pool failing at the same settings, which "
        "runs first.\n",
        table(("mutant", "the bug", "its kill shows", "file"), rows),
    ]
    for mutant in MUTANTS:
        out.append(f"## {mutant.name}\n")
        out.append(f"{sentence(mutant.bug)}. In {code('impl/' + mutant.file)}:\n")
        out.append(_patch(mutant))
        out.append(f"Its kill must show {code(mutant.shows)}.\n")
    return "\n".join(out)
