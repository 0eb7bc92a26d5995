"""The pool's state in Z3, over a symbolic number of blocks ``N``, and its invariants as
predicates of ONE block index and ONE key.

A state is a bundle of functions from a Z3 index to a Z3 term. The state before an action
reads Z3 arrays (one per field); the state after it is built from the state before by
closures (``If`` over the index), so no array update and no quantifier is ever needed: an
obligation about "every block" is asked at a fresh witness block ``b*`` and key ``k*``,
and the invariant of the state before is assumed only at the finitely many indices an
action touches (instantiated by hand). Assuming fewer instances can only make a proof
harder, never unsound; a refutation with fewer instances may be spurious, which is why the
faulty variants are refuted at the instances listed with each obligation.

Fields (the spec's ``PoolState`` as sets and counts, no order):

- ``ref(b)`` ref count; ``free(b)`` membership of the free queue; ``nfree`` its length;
- ``hasp(b)``, ``pkey(b)``, ``ptok(b)``: the primary key, its key id and covered tokens;
- ``extra(b, k)``: ``k`` is an extra key of ``b``; ``mm(k, b)``: the multimap has ``b``
  under ``k`` (duplicates across blocks are allowed; a block sits under a key once);
- ``wat(b)``: ``b`` has a reuse watcher; ``rank(b)``: the free queue's order, used by the
  bounded checker only (smaller = nearer the front); ``lo``/``hi`` the next free ranks at
  the front and the back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import z3  # type: ignore[import-untyped]

Expr = Any  # a z3 term; z3 ships no type information
BlockFn = Callable[[Expr], Expr]
KeyFn = Callable[[Expr, Expr], Expr]

NULL = 0


@dataclass(frozen=True)
class State:
    """One pool state as functions of a block (and key) index."""

    n: Expr
    caching: Expr
    ref: BlockFn
    free: BlockFn
    nfree: Expr
    hasp: BlockFn
    pkey: BlockFn
    ptok: BlockFn
    extra: KeyFn  # (block, key)
    mm: KeyFn  # (key, block)
    wat: BlockFn
    rank: BlockFn
    lo: Expr
    hi: Expr

    def with_(self, **changes: Any) -> State:
        return replace(self, **changes)


def _array_fn(a: Expr) -> BlockFn:
    return lambda b: a[b]


def _array2_fn(a: Expr) -> KeyFn:
    return lambda x, y: a[x][y]


def fresh_state(tag: str, n: Expr | None = None, caching: Expr | None = None) -> State:
    """A state about which nothing is known: every field an unconstrained array."""
    i, b = z3.IntSort(), z3.BoolSort()
    inner = z3.ArraySort(i, b)

    def arr(name: str, rng: Any) -> Expr:
        return z3.Array(f"{tag}.{name}", i, rng)

    return State(
        n=z3.Int(f"{tag}.N") if n is None else n,
        caching=z3.Bool(f"{tag}.caching") if caching is None else caching,
        ref=_array_fn(arr("ref", i)),
        free=_array_fn(arr("free", b)),
        nfree=z3.Int(f"{tag}.nfree"),
        hasp=_array_fn(arr("hasp", b)),
        pkey=_array_fn(arr("pkey", i)),
        ptok=_array_fn(arr("ptok", i)),
        extra=_array2_fn(arr("extra", inner)),
        mm=_array2_fn(arr("mm", inner)),
        wat=_array_fn(arr("wat", b)),
        rank=_array_fn(arr("rank", i)),
        lo=z3.Int(f"{tag}.lo"),
        hi=z3.Int(f"{tag}.hi"),
    )


def initial_state(n: Expr, caching: Expr) -> State:
    """A new pool: blocks 1..N-1 free in id order, no keys, no watchers."""
    false = z3.BoolVal(False)
    return State(
        n=n,
        caching=caching,
        ref=lambda b: z3.IntVal(0),
        free=lambda b: z3.And(b >= 1, b < n),
        nfree=n - 1,
        hasp=lambda b: false,
        pkey=lambda b: z3.IntVal(0),
        ptok=lambda b: z3.IntVal(0),
        extra=lambda b, k: false,
        mm=lambda k, b: false,
        wat=lambda b: false,
        rank=lambda b: b,
        lo=z3.IntVal(0),
        hi=n,
    )


def real(s: State, b: Expr) -> Expr:
    """``b`` is a real block: not null, in range."""
    return z3.And(b >= 1, b < s.n)


def in_range(s: State, b: Expr) -> Expr:
    return z3.And(b >= 0, b < s.n)


def carries(s: State, b: Expr, k: Expr) -> Expr:
    """``k`` is one of ``b``'s keys (its primary or an extra one)."""
    return z3.Or(z3.And(s.hasp(b), s.pkey(b) == k), s.extra(b, k))


def writable(s: State, b: Expr) -> Expr:
    """``is_block_writable``: not null, held once, no primary key (the spec's test)."""
    return z3.And(b != NULL, s.ref(b) == 1, z3.Not(s.hasp(b)))


# --- the invariants, each a predicate of one block and one key ----------------------------


def free_iff_unreferenced(s: State, b: Expr, k: Expr) -> Expr:
    return z3.Implies(real(s, b), z3.And(s.ref(b) >= 0, s.free(b) == (s.ref(b) == 0)))


def free_blocks_are_real(s: State, b: Expr, k: Expr) -> Expr:
    return z3.Implies(s.free(b), real(s, b))


def map_matches_block_keys(s: State, b: Expr, k: Expr) -> Expr:
    return s.mm(k, b) == z3.And(in_range(s, b), carries(s, b, k))


def extra_keys_need_primary(s: State, b: Expr, k: Expr) -> Expr:
    return z3.Implies(s.extra(b, k), z3.And(s.hasp(b), s.pkey(b) != k))


def null_block_inert(s: State, b: Expr, k: Expr) -> Expr:
    return z3.Implies(
        b == NULL,
        z3.And(
            z3.Not(s.free(b)),
            z3.Not(s.hasp(b)),
            z3.Not(s.extra(b, k)),
            z3.Not(s.wat(b)),
            s.ref(b) == 0,
        ),
    )


def no_keys_without_caching(s: State, b: Expr, k: Expr) -> Expr:
    return z3.Implies(z3.Not(s.caching), z3.And(z3.Not(s.hasp(b)), z3.Not(s.extra(b, k))))


def watchers_on_real_blocks(s: State, b: Expr, k: Expr) -> Expr:
    return z3.Implies(s.wat(b), real(s, b))


def outside_blocks_inert(s: State, b: Expr, k: Expr) -> Expr:
    """Ids outside 0..N-1 carry nothing (the arrays are total; the pool's are not)."""
    return z3.Implies(
        z3.Not(in_range(s, b)),
        z3.And(s.ref(b) == 0, z3.Not(s.hasp(b)), z3.Not(s.extra(b, k))),
    )


def pool_exists(s: State, b: Expr, k: Expr) -> Expr:
    """The pool has at least the null block."""
    return s.n >= 1


Invariant = Callable[[State, Expr, Expr], Expr]

#: Name -> per-(block, key) predicate. The names follow ``kvpool.spec.invariants``; the
#: set encoding makes "each block at most once" structural, its counting half
#: (``nfree`` = the number of free blocks) is the lemma of ``counting.py``.
INVARIANTS: dict[str, Invariant] = {
    "free-iff-unreferenced": free_iff_unreferenced,
    "queue-holds-real-blocks": free_blocks_are_real,
    "map-matches-block-keys": map_matches_block_keys,
    "extra-keys-need-primary": extra_keys_need_primary,
    "null-block-inert": null_block_inert,
    "no-keys-without-caching": no_keys_without_caching,
    "watchers-on-real-blocks": watchers_on_real_blocks,
    "outside-blocks-inert": outside_blocks_inert,
    "pool-exists": pool_exists,
}


def invariant_at(s: State, b: Expr, k: Expr) -> Expr:
    """Every invariant, at block ``b`` and key ``k``."""
    return z3.And(*(inv(s, b, k) for inv in INVARIANTS.values()))


def invariant_at_all(s: State, blocks: list[Expr], keys: list[Expr]) -> Expr:
    """The invariant instantiated at every pair of ``blocks`` x ``keys``."""
    return z3.And(*(invariant_at(s, b, k) for b in blocks for k in keys))


def invariant_quantified(s: State) -> Expr:
    """The invariant as one quantified formula (the cross-check encoding)."""
    b, k = z3.Ints("qb qk")
    return z3.ForAll([b, k], invariant_at(s, b, k))
