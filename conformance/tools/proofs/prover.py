"""Running an obligation: proved, refuted (with a model) or unknown, and how long it took.

``unknown`` (a timeout, or Z3 giving up) is a failure, never a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3  # type: ignore[import-untyped]

from .obligations import Obligation, Query
from .render import render_model

PROVED, REFUTED, UNKNOWN = "proved", "refuted", "unknown"


@dataclass(frozen=True)
class Result:
    name: str
    kind: str
    status: str
    seconds: float
    model: tuple[str, ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == PROVED


def _solver(timeout: float) -> z3.Solver:
    solver = z3.Solver()
    solver.set("timeout", max(1, int(timeout * 1000)))
    return solver


def check_query(query: Query, timeout: float) -> tuple[str, tuple[str, ...], str]:
    """Whether ``premises AND NOT goal`` is unsatisfiable: (status, model lines, reason)."""
    solver = _solver(timeout)
    solver.add(*query.premises)
    solver.add(z3.Not(query.goal))
    answer = solver.check()
    if answer == z3.unsat:
        return PROVED, (), ""
    if answer == z3.sat:
        model = solver.model()
        lines = render_model(model, query.pre, query.post, query.blocks, query.keys, query.extra)
        return REFUTED, tuple(lines), ""
    return UNKNOWN, (), solver.reason_unknown()


def prove(
    obligation: Obligation,
    timeout: float = 10.0,
    quantified: bool = False,
    fault: str | None = None,
) -> Result:
    """Run ``obligation`` (built with ``fault``, or the correct action when ``None``)."""
    start = time.perf_counter()
    query = obligation.build(fault, quantified)
    status, model, reason = check_query(query, timeout)
    return Result(
        obligation.name, obligation.kind, status, time.perf_counter() - start, model, reason
    )


def premises_satisfiable(obligation: Obligation, timeout: float = 10.0) -> str:
    """``sat`` when the obligation's premises have a model (the proof is not vacuous)."""
    query = obligation.build(None, False)
    solver = _solver(timeout)
    solver.add(*query.premises)
    return str(solver.check())
