"""``reference/proofs.md``: the table ``kvpool prove`` prints, run at build time.

Each obligation is proved, its faulty variant must be refuted and its premises must be
satisfiable, exactly as the command does; the page shows what this build's run found.
"""

from __future__ import annotations

import importlib.util

from .markdown import GENERATED, code, prose, table


def proofs_table(timeout: float = 10.0) -> tuple[str, int, int]:
    """The table of every obligation with its run results; how many passed of how many.

    An obligation passes when it is proved, its faulty variant refuted and its premises
    satisfiable. Solver times are left out: they differ from run to run, and the page must
    read the same in every build (`kvpool prove` prints them).
    """
    from kvpool.conformance.tools.proofs.obligations import all_obligations
    from kvpool.conformance.tools.proofs.prover import PROVED, REFUTED, premises_satisfiable, prove

    rows = []
    passed = 0
    obligations = all_obligations()
    for ob in obligations:
        result = prove(ob, timeout)
        bad = prove(ob, timeout, fault=ob.fault)
        premises = premises_satisfiable(ob, timeout)
        ok = result.status == PROVED and bad.status == REFUTED and premises == "sat"
        passed += ok
        rows.append(
            (
                code(ob.name),
                ob.kind,
                prose(ob.statement),
                f"**{result.status}**" if ok else f"**{result.status}** (FAILED)",
                code(ob.fault),
                bad.status,
                premises,
            )
        )
    headers = (
        "obligation",
        "kind",
        "statement",
        "status",
        "faulty variant",
        "variant",
        "premises",
    )
    return table(headers, rows), passed, len(obligations)


def proofs_page() -> str:
    """The page: the run's table, or why there is none (Z3 not installed)."""
    head = [
        GENERATED,
        "# Proofs\n",
        "What `kvpool prove` proves about the pool for any number of blocks, run when this "
        "site was built (without the solver's times, which differ from run to run: `kvpool "
        "prove` prints them). An obligation is proved when Z3 finds its premises and the "
        "negation of its goal unsatisfiable. Each one is also run against its named faulty "
        "variant, which Z3 must refute with a counterexample, and its premises must be "
        "satisfiable: a proof that cannot fail proves nothing. See [formal "
        "checks](../guide/formal-checks.md) for what the encoding covers and what it "
        "leaves out.\n",
    ]
    if importlib.util.find_spec("z3") is None:
        return "\n".join(
            [
                *head,
                '!!! warning "Not run"\n    Z3 is not installed where this site was built '
                "(`pip install z3-solver`), so the proofs were not run. `kvpool prove` prints "
                "the table.\n",
            ]
        )
    from kvpool.conformance.tools.proofs.command import COUNTING_NOTE

    rows, passed, total = proofs_table()
    verdict = (
        f"All {total} obligations passed: proved, faulty variant refuted, premises satisfiable."
        if passed == total
        else f"{total - passed} of {total} obligations FAILED in this run."
    )
    return "\n".join(
        [*head, verdict + "\n", rows, "## Counting invariants\n", prose(COUNTING_NOTE) + "\n"]
    )
