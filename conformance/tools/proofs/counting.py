"""The counting invariant ``nfree == |{b : free(b)}|``, by a lemma proved by induction.

A count over unbounded N is not a quantifier-free fact, so it is split in two:

- **Lemma (count-delta)**, proved by induction on ``m`` with Z3 proving base and step:
  with ``cnt_S(m)`` the number of blocks ``b < m`` in ``S`` and ``D(m)`` the sum of
  ``[b in S'] - [b in S]`` over ``b < m``, ``cnt_S'(m) - cnt_S(m) == D(m)`` for every m.
  The recursive definitions are uninterpreted functions whose defining equations are
  instantiated at ``m`` (base: ``0``), so both queries are quantifier-free.
- **Per block, per action** (quantifier-free, at a witness block): the action's change of
  membership is its declared delta, ``[free'(b)] - [free(b)] == delta(b)``. The pool's
  new length is the old one plus the sum of the deltas (``get_new_blocks(n)``: ``-n``
  with ``n == |sel|``; a release: one per block reaching 0), so by the lemma at ``m = N``
  the count stays equal to the number of free blocks.
"""

from __future__ import annotations

import z3  # type: ignore[import-untyped]

from .encoding import NULL, Expr


def lemma_queries(fault: str | None = None) -> dict[str, tuple[list[Expr], Expr]]:
    """The lemma's base case and induction step: name -> (premises, goal).

    ``CountSkipsLast`` is a faulty count: ``cnt_S'`` starts at 1 and never counts block
    ``m`` (a fence-post error); both halves must then fail."""
    cnt_s = z3.Function("cnt_S", z3.IntSort(), z3.IntSort())
    cnt_t = z3.Function("cnt_S2", z3.IntSort(), z3.IntSort())
    d = z3.Function("D", z3.IntSort(), z3.IntSort())
    in_s = z3.Function("S", z3.IntSort(), z3.BoolSort())
    in_t = z3.Function("S2", z3.IntSort(), z3.BoolSort())
    m = z3.Int("m")

    def defined_at(x: Expr) -> list[Expr]:
        return [
            cnt_s(x + 1) == cnt_s(x) + one(in_s(x)),
            cnt_t(x + 1) == cnt_t(x) + (0 if fault == "CountSkipsLast" else one(in_t(x))),
            d(x + 1) == d(x) + one(in_t(x)) - one(in_s(x)),
        ]

    zero = z3.IntVal(0)
    base = (
        [cnt_s(zero) == 0, cnt_t(zero) == (1 if fault == "CountSkipsLast" else 0), d(zero) == 0],
        cnt_t(zero) - cnt_s(zero) == d(zero),
    )
    step = (
        [m >= 0, cnt_t(m) - cnt_s(m) == d(m), *defined_at(m)],
        cnt_t(m + 1) - cnt_s(m + 1) == d(m + 1),
    )
    return {"base": base, "step": step}


def one(p: Expr) -> Expr:
    return z3.If(p, 1, 0)


def released_to_zero(ref: Expr, c: Expr, b: Expr) -> Expr:
    """A block released ``c`` times while held ``ref`` times reaches 0 here."""
    return z3.And(b != NULL, c > 0, ref == c)
