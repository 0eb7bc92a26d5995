"""The counting invariant ``ref(b) == holders(b)``: a real block's ref count equals the
number of request-table entries that hold it (``refcounts-match-tables``), by a lemma
proved by induction plus one quantifier-free obligation per request action.

Holders are split as ``holders(b) = others(b) + cnt(t, b)``: ``others(b) >= 0`` is one
symbolic count for every table of every other request (an action of one request leaves
them alone), and ``t`` is the table of the request under change (an array and a length,
as in ``tables.py``). ``cnt(A, m)`` is the number of entries ``A[i] == b`` with
``i < m``, an uninterpreted function with its recursive definition instantiated by hand.

- **Lemma (concat-count)**, by induction on ``j`` with Z3 proving base and step:
  with ``T = t ++ new`` (``T[i] = t[i]`` for ``i < L``, else ``new[i - L]``),
  ``P(j) := cnt(T, j) == cnt(t, j)`` for ``j <= L`` and
  ``cnt(T, j) == cnt(t, L) + cnt(new, j - L)`` for ``j > L``. At ``j = L + m``:
  ``cnt(t ++ new, L + m) == cnt(t, L) + cnt(new, m)``. Both queries are quantifier-free.
- **Per request action** (at a witness block, quantifier-free): every table effect is a
  concatenation, so the lemma gives the table's count after from the parts' counts; with
  ``ref(b) == others(b) + cnt(t, b)`` before, the pool transitions the action makes
  (``get_new_blocks`` sets 1, ``touch`` +1 per occurrence, ``free_blocks`` -1 per
  occurrence) give ``ref'(b) == others(b) + cnt(t', b)`` after:

  - ``append-new``: ``t -> t ++ new``, ``new`` the blocks ``get_new_blocks`` hands out;
  - ``touch-hits``: ``t -> t ++ hits``, ``touch(hits)`` (a hit listed twice counts twice);
  - ``free-tail``: ``keep ++ tail -> keep``, ``free_blocks(tail)``;
  - ``cow-swap`` (the not-running path): ``p ++ [src] -> p ++ [dst]``,
    ``get_new_blocks({dst})`` then ``free_blocks([src])``;
  - ``slide-null``: ``head ++ rest -> nulls ++ rest``, ``free_blocks(head)`` (a null entry
    holds no real block).

  The pool actions that change no ref count (``cache_*``, ``evict_blocks``,
  ``move_block_hashes``, ``reset_prefix_cache``) change no table either, so they keep
  the invariant trivially; the request machine (``kvpool.spec.manager``) never calls
  ``unpin_blocks``. The count of a table is non-negative (stated, as a premise).
"""

from __future__ import annotations

import z3  # type: ignore[import-untyped]

from . import actions as A
from .encoding import NULL, Expr, State, fresh_state, invariant_at_all, real

#: The faults of this module (registered in :data:`~.actions.FAULTS`).
LEMMA_BASE_FAULT = "ConcatCountStartsAtOne"
LEMMA_STEP_FAULT = "ConcatReadsOldAtJoin"

#: request action -> (what it does to the table, its faulty variant)
ACTIONS: dict[str, tuple[str, str]] = {
    "append-new": (
        "appending the blocks get_new_blocks hands out (ref set to 1)",
        "AppendListsNewTwice",
    ),
    "touch-hits": ("appending cache hits after touch (+1 per occurrence)", "TouchCountsOnce"),
    "free-tail": ("dropping a table tail after free_blocks (-1 per occurrence)", "FreeCountsOnce"),
    "cow-swap": (
        "copy-on-write, not running: the last entry src -> dst (src -1, dst set to 1)",
        "CowKeepsSourceRef",
    ),
    "slide-null": (
        "a slide nulling entries after free_blocks of them (-1 per occurrence)",
        "SlideKeepsRef",
    ),
}


def one(p: Expr) -> Expr:
    return z3.If(p, 1, 0)


def lemma_queries(fault: str | None = None) -> dict[str, tuple[list[Expr], Expr]]:
    """The concat-count lemma's base case and induction step: name -> (premises, goal).

    ``ConcatCountStartsAtOne``: the concatenation's count starts at 1 (the base fails).
    ``ConcatReadsOldAtJoin``: entry ``L`` of ``t ++ new`` is read from ``t`` rather than
    ``new`` (an off-by-one at the join; the step fails)."""
    int_ = z3.IntSort()
    c_cat = z3.Function("cnt_T", int_, int_)  # count of b in t ++ new, first j entries
    c_old = z3.Function("cnt_t", int_, int_)
    c_new = z3.Function("cnt_new", int_, int_)
    t = z3.Array("t", int_, int_)
    new = z3.Array("new", int_, int_)
    b, L, j = z3.Int("b"), z3.Int("L"), z3.Int("j")

    def cat_at(i: Expr) -> Expr:
        if fault == LEMMA_STEP_FAULT:
            return z3.If(i <= L, t[i], new[i - L])
        return z3.If(i < L, t[i], new[i - L])

    def p(x: Expr) -> Expr:
        return z3.If(x <= L, c_cat(x) == c_old(x), c_cat(x) == c_old(L) + c_new(x - L))

    zero = z3.IntVal(0)
    start = 1 if fault == LEMMA_BASE_FAULT else 0
    base = ([L >= 0, c_cat(zero) == start, c_old(zero) == 0, c_new(zero) == 0], p(zero))
    step = (
        [
            L >= 0,
            j >= 0,
            p(j),
            c_new(zero) == 0,
            c_cat(j + 1) == c_cat(j) + one(cat_at(j) == b),
            c_old(j + 1) == c_old(j) + one(t[j] == b),
            c_new(j - L + 1) == c_new(j - L) + one(new[j - L] == b),
        ],
        p(j + 1),
    )
    return {"base": base, "step": step}


def action_query(
    action: str, fault: str | None, assume_before: bool = True
) -> tuple[list[Expr], Expr, State, State, list[Expr], list[Expr], dict[str, Expr]]:
    """``(premises, goal, pre, post, blocks, keys, extra)`` of ``ref == holders`` after one
    request action, at the witness block ``b*``. ``assume_before=False`` leaves out
    ``ref == holders`` before the action (a test that the premise carries the proof)."""
    s = fresh_state("s")
    b, k = z3.Int("b*"), z3.Int("k*")
    others = z3.Int("others(b*)")
    c = z3.Array("c", z3.IntSort(), z3.IntSort())  # multiplicity per block of a list
    blocks: list[Expr] = [b, z3.IntVal(NULL)]
    extra: dict[str, Expr] = {"others(b*)": others, "c(b*)": c[b]}

    def contract(step: A.Step, at: list[Expr]) -> list[Expr]:
        return [step.pre, *(step.pre_at(x, k) for x in at)]

    if action in ("append-new", "touch-hits"):
        kept = z3.Int("cnt(t,b*)")
        before, after = kept, kept + (2 * c[b] if fault == "AppendListsNewTwice" else c[b])
        extra["cnt(t,b*)"] = kept
        parts = [kept]
        if action == "append-new":
            step = A.get_new_blocks(s, lambda x: c[x] == 1, z3.Int("n"))
            # get_new_blocks returns distinct blocks: each listed at most once
            extra_premises = [z3.And(c[x] >= 0, c[x] <= 1) for x in blocks]
        else:
            step = A.touch(s, lambda x: c[x], fault)
            extra_premises = []
        post = step.post
        premises = [*contract(step, blocks), *extra_premises]
    elif action in ("free-tail", "slide-null"):
        kept, gone = z3.Int("cnt(rest,b*)"), z3.Int("cnt(dropped,b*)")
        extra |= {"cnt(rest,b*)": kept, "cnt(dropped,b*)": gone}
        parts = [kept, gone]
        before, after = kept + gone, kept  # a null entry holds no real block
        step = A.free_blocks(s, lambda x: c[x], fault)
        post = s if fault == "SlideKeepsRef" else step.post
        premises = [*contract(step, blocks), c[b] == gone]
    elif action == "cow-swap":
        src, dst = z3.Int("src"), z3.Int("dst")
        prefix = z3.Int("cnt(p,b*)")
        o_src, p_src = z3.Int("others(src)"), z3.Int("cnt(p,src)")
        blocks += [src, dst]
        extra |= {"cnt(p,b*)": prefix, "src": src, "dst": dst}
        parts = [prefix, o_src, p_src]
        before, after = prefix + one(src == b), prefix + one(dst == b)
        got = A.get_new_blocks(s, lambda x: x == dst, z3.IntVal(1))
        rel = A.free_blocks(got.post, lambda x: one(x == src))
        post = got.post if fault == "CowKeepsSourceRef" else rel.post
        premises = [
            *contract(got, blocks),
            *contract(rel, blocks),
            real(s, src),
            # ref == holders at src too (src is the table's last entry)
            o_src >= 0,
            s.ref(src) == o_src + p_src + 1,
            z3.Implies(b == src, z3.And(o_src == others, p_src == prefix)),
        ]
    else:
        raise ValueError(action)
    premises = [
        invariant_at_all(s, blocks, [k]),
        others >= 0,
        *(x >= 0 for x in parts),
        *([z3.Implies(real(s, b), s.ref(b) == others + before)] if assume_before else []),
        *premises,
    ]
    goal = z3.Implies(real(s, b), post.ref(b) == others + after)
    return premises, goal, s, post, blocks, [k], extra
