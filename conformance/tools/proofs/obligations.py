"""The proof obligations: name, kind, premises, goal, and the faulty variant that must
refute each.

An obligation is proved when ``premises AND NOT goal`` is unsatisfiable. Every obligation
names a fault of :data:`~.actions.FAULTS`; built with that fault, the same query must be
satisfiable (a model is a counterexample): a proof that cannot fail proves nothing. The
premises alone must be satisfiable too, or the proof would be vacuous.

Kinds: ``inductive`` (an action preserves every invariant, or the initial state has
them), ``property`` (a consequence of the invariant about one action or query),
``lemma base`` / ``lemma step`` (a counting lemma, by induction), ``lemma use`` (the
per-block half of a counting invariant: the free count, ``counting.py``; ref count ==
holders across tables, ``holders.py``), ``tables`` (request block tables, ``tables.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import z3  # type: ignore[import-untyped]

from . import actions as A
from . import counting, holders, tables
from .encoding import (
    NULL,
    Expr,
    State,
    carries,
    fresh_state,
    initial_state,
    invariant_at,
    invariant_at_all,
    invariant_quantified,
)


@dataclass(frozen=True)
class Query:
    """One satisfiability question: the obligation holds iff ``premises AND NOT goal`` is
    unsatisfiable. ``pre``/``post``/``blocks``/``keys`` say what to show of a model."""

    premises: list[Expr]
    goal: Expr
    pre: State | None = None
    post: State | None = None
    blocks: list[Expr] = field(default_factory=list)
    keys: list[Expr] = field(default_factory=list)
    extra: dict[str, Expr] = field(default_factory=dict)


Builder = Callable[[str | None, bool], Query]


@dataclass(frozen=True)
class Obligation:
    name: str
    kind: str
    statement: str
    fault: str
    build: Builder
    #: Whether ``--quantified`` has a quantified form of it (the inductive ones).
    quantifiable: bool = False


def _witness() -> tuple[Expr, Expr]:
    return z3.Int("b*"), z3.Int("k*")


def _inductive(
    action: str, make: Callable[[State, str | None], tuple[A.Step, list[Expr], list[Expr]]]
) -> Builder:
    """Every invariant at the witness after ``action``, from the invariant before it at
    the witness and at the blocks and keys the action touches."""

    def build(fault: str | None, quantified: bool) -> Query:
        s = fresh_state("s")
        b, k = _witness()
        step, touched, keys = make(s, fault)
        blocks = [b, z3.IntVal(NULL), *touched]
        all_keys = [k, *keys, *(s.pkey(x) for x in blocks)]
        if quantified:
            qb, qk = z3.Ints("pb pk")
            premises = [
                invariant_quantified(s),
                step.pre,
                z3.ForAll([qb, qk], step.pre_at(qb, qk)),
            ]
            qb2, qk2 = z3.Ints("gb gk")
            goal = z3.ForAll([qb2, qk2], invariant_at(step.post, qb2, qk2))
        else:
            premises = [
                invariant_at_all(s, blocks, all_keys),
                step.pre,
                *(step.pre_at(x, y) for x in blocks for y in all_keys),
            ]
            goal = invariant_at(step.post, b, k)
        return Query(premises, goal, s, step.post, blocks, all_keys)

    return build


def _counts() -> Expr:
    return z3.Array("c", z3.IntSort(), z3.IntSort())


def _set(name: str) -> Expr:
    return z3.Array(name, z3.IntSort(), z3.BoolSort())


def _make_get_new(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    sel = _set("sel")
    return A.get_new_blocks(s, lambda b: sel[b], z3.Int("n"), fault), [], []


def _make_free(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    c = _counts()
    return A.free_blocks(s, lambda b: c[b], fault), [], []


def _make_touch(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    c = _counts()
    return A.touch(s, lambda b: c[b], fault), [], []


def _make_unpin(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    c = _counts()
    return A.unpin_blocks(s, lambda b: c[b], fault), [], []


def _make_cache_full(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    sel = _set("sel")
    key = z3.Array("key", z3.IntSort(), z3.IntSort())
    tok = z3.Array("tokens", z3.IntSort(), z3.IntSort())
    step = A.cache_full_blocks(s, lambda b: sel[b], lambda b: key[b], lambda b: tok[b], fault)
    b, _ = _witness()
    return step, [], [key[b]]


def _make_cache_partial(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    block, key, tok = z3.Int("block"), z3.Int("key"), z3.Int("tokens")
    step = A.cache_partial_block(s, block, key, tok, z3.Bool("replace"), fault)
    return step, [block], [key]


def _make_evict(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    sel = _set("sel")
    return A.evict_blocks(s, lambda b: sel[b], fault), [], []


def _make_move(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    src, dst = z3.Int("src"), z3.Int("dst")
    return A.move_block_hashes(s, src, dst, fault), [src, dst], []


def _make_reset(s: State, fault: str | None) -> tuple[A.Step, list[Expr], list[Expr]]:
    step, _ = A.reset_prefix_cache(s, fault)
    return step, [], []


def _initial(fault: str | None, quantified: bool) -> Query:
    n, caching = z3.Int("N"), z3.Bool("caching")
    s = initial_state(n, caching)
    if fault == "InitNullFree":
        s = s.with_(free=lambda b: z3.And(b >= 0, b < n))
    b, k = _witness()
    if quantified:
        qb, qk = z3.Ints("gb gk")
        return Query([n >= 1], z3.ForAll([qb, qk], invariant_at(s, qb, qk)), None, s, [b], [k])
    return Query([n >= 1], invariant_at(s, b, k), None, s, [b], [k])


# --- properties -----------------------------------------------------------------------------


def _writable_held_once(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    premises = [invariant_at_all(s, [b, z3.IntVal(NULL)], [k, s.pkey(b)])]
    goal = z3.Implies(
        A.is_block_writable(s, b, fault),
        z3.And(s.ref(b) == 1, z3.Not(s.free(b)), z3.Not(carries(s, b, k)), z3.Not(s.mm(k, b))),
    )
    return Query(premises, goal, s, None, [b], [k])


def _cached_never_writable(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    premises = [invariant_at_all(s, [b, z3.IntVal(NULL)], [k, s.pkey(b)])]
    goal = z3.Implies(s.mm(k, b), z3.Not(A.is_block_writable(s, b, fault)))
    return Query(premises, goal, s, None, [b], [k])


def _new_blocks_writable(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    sel = _set("sel")
    step = A.get_new_blocks(s, lambda x: sel[x], z3.Int("n"), fault)
    blocks, keys = [b, z3.IntVal(NULL)], [k, s.pkey(b)]
    premises = [
        invariant_at_all(s, blocks, keys),
        step.pre,
        *(step.pre_at(x, y) for x in blocks for y in keys),
    ]
    post = step.post
    goal = z3.Implies(sel[b], z3.And(A.is_block_writable(post, b), z3.Not(carries(post, b, k))))
    return Query(premises, goal, s, post, blocks, keys, {"sel(b*)": sel[b]})


def _handed_out_once(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    sel = _set("sel")
    step = A.get_new_blocks(s, lambda x: sel[x], z3.Int("n"), fault)
    blocks, keys = [b, z3.IntVal(NULL)], [k]
    premises = [
        invariant_at_all(s, blocks, keys),
        step.pre,
        *(step.pre_at(x, y) for x in blocks for y in keys),
    ]
    post = step.post
    goal = z3.Implies(sel[b], z3.And(s.ref(b) == 0, post.ref(b) == 1, z3.Not(post.free(b))))
    return Query(premises, goal, s, post, blocks, keys, {"sel(b*)": sel[b]})


def _never_twice(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    sel1, sel2 = _set("sel1"), _set("sel2")
    first = A.get_new_blocks(s, lambda x: sel1[x], z3.Int("n1"), fault)
    second = A.get_new_blocks(first.post, lambda x: sel2[x], z3.Int("n2"), fault)
    blocks, keys = [b, z3.IntVal(NULL)], [k]
    premises = [
        invariant_at_all(s, blocks, keys),
        first.pre,
        second.pre,
        *(first.pre_at(x, y) for x in blocks for y in keys),
        *(second.pre_at(x, y) for x in blocks for y in keys),
    ]
    goal = z3.Not(z3.And(sel1[b], sel2[b]))
    return Query(
        premises, goal, s, second.post, blocks, keys, {"sel1(b*)": sel1[b], "sel2(b*)": sel2[b]}
    )


def _move_loses_nothing(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    src, dst = z3.Int("src"), z3.Int("dst")
    step = A.move_block_hashes(s, src, dst, fault)
    blocks = [b, src, dst, z3.IntVal(NULL)]
    keys = [k, *(s.pkey(x) for x in blocks)]
    premises = [invariant_at_all(s, blocks, keys), step.pre]
    post = step.post
    goal = z3.Implies(s.mm(k, b), z3.Or(post.mm(k, b), z3.And(b == src, post.mm(k, dst))))
    return Query(premises, goal, s, post, blocks, keys)


def _hit_is_touchable(fault: str | None, quantified: bool) -> Query:
    s = fresh_state("s")
    b, k = _witness()
    blocks, keys = [b, z3.IntVal(NULL)], [k, s.pkey(b)]
    premises = [invariant_at_all(s, blocks, keys)]
    touch = A.touch(s, lambda x: z3.If(x == b, 1, 0))
    goal = z3.Implies(
        A.cache_hit(s, k, b, fault),
        z3.And(b != NULL, b < s.n, carries(s, b, k), touch.pre_at(b, k)),
    )
    return Query(premises, goal, s, None, blocks, keys)


# --- the counting lemma ---------------------------------------------------------------------


def _lemma(part: str) -> Builder:
    def build(fault: str | None, quantified: bool) -> Query:
        premises, goal = counting.lemma_queries(fault)[part]
        return Query(list(premises), goal)

    return build


def _delta(action: str) -> Builder:
    """Membership changes by the action's declared delta, at the witness block."""

    def build(fault: str | None, quantified: bool) -> Query:
        s = fresh_state("s")
        b, k = _witness()
        c, sel = _counts(), _set("sel")
        if action == "get_new_blocks":
            step = A.get_new_blocks(s, lambda x: sel[x], z3.Int("n"), fault)
            delta = -counting.one(sel[b])
        elif action == "free_blocks":
            step = A.free_blocks(s, lambda x: c[x], fault)
            delta = counting.one(counting.released_to_zero(s.ref(b), c[b], b))
        elif action == "unpin_blocks":
            step = A.unpin_blocks(s, lambda x: c[x], fault)
            delta = counting.one(counting.released_to_zero(s.ref(b), c[b], b))
        else:
            step = A.touch(s, lambda x: c[x], fault)
            delta = -counting.one(z3.And(b != NULL, c[b] > 0, s.ref(b) == 0))
        blocks, keys = [b, z3.IntVal(NULL)], [k]
        premises = [
            invariant_at_all(s, blocks, keys),
            step.pre,
            *(step.pre_at(x, y) for x in blocks for y in keys),
        ]
        goal = counting.one(step.post.free(b)) - counting.one(s.free(b)) == delta
        return Query(premises, goal, s, step.post, blocks, keys)

    return build


# --- ref count == holders across tables --------------------------------------------------


def _holders_lemma(part: str) -> Builder:
    def build(fault: str | None, quantified: bool) -> Query:
        premises, goal = holders.lemma_queries(fault)[part]
        return Query(list(premises), goal)

    return build


def _holders(action: str) -> Builder:
    """``ref == holders`` at the witness block after one request action."""

    def build(fault: str | None, quantified: bool) -> Query:
        premises, goal, pre, post, blocks, keys, extra = holders.action_query(action, fault)
        return Query(premises, goal, pre, post, blocks, keys, extra)

    return build


# --- tables ---------------------------------------------------------------------------------


def _table_step(kind: str) -> Builder:
    def build(fault: str | None, quantified: bool) -> Query:
        old = tables.fresh_table("t")
        i = z3.Int("i*")
        premises = [old.length >= 0]
        if kind in ("append", "append-up-to-null"):
            count = z3.Int("count")
            premises.append(count >= 0)
            new = tables.append(old, z3.Array("new", z3.IntSort(), z3.IntSort()), count)
            if fault == "AppendOverwritesNull":
                j = z3.Int("j")
                new = tables.Table(
                    z3.Lambda([j], z3.If(old.at(j) == NULL, z3.Int("any"), new.at(j))),
                    new.length,
                )
            goal = (
                tables.prefix_at(old, new, i)
                if kind == "append"
                else tables.prefix_up_to_null_at(old, new, i)
            )
        elif kind == "compute":
            dst = z3.Int("dst")
            premises.append(dst != old.at(old.length - 1))
            new = (
                tables.cow_replacing_entry(old, dst)
                if fault == "CowReplacesEntry"
                else tables.keep(old)
            )
            goal = tables.prefix_at(old, new, i)
        elif kind == "slide":
            cutoff = z3.Int("cutoff")
            premises += [cutoff >= 0, cutoff <= old.length]
            new = (
                tables.slide_dropping(old, cutoff)
                if fault == "SlideDropsEntries"
                else tables.slide(old, cutoff)
            )
            goal = tables.prefix_up_to_null_at(old, new, i)
        else:
            raise ValueError(kind)
        return Query(
            premises,
            goal,
            extra={
                "i*": i,
                "old.len": old.length,
                "new.len": new.length,
                "old[i*]": old.at(i),
                "new[i*]": new.at(i),
            },
        )

    return build


def _transitive(up_to_null: bool) -> Builder:
    def build(fault: str | None, quantified: bool) -> Query:
        a, b, c = tables.fresh_table("a"), tables.fresh_table("b"), tables.fresh_table("c")
        i = z3.Int("i*")
        faulty = fault in ("NullRefill", "PrefixSkipsEntry")
        if up_to_null:

            def rel(x: tables.Table, y: tables.Table) -> Expr:
                return tables.prefix_up_to_null_at(x, y, i, faulty)

            goal = tables.prefix_up_to_null_at(a, c, i)
        else:

            def rel(x: tables.Table, y: tables.Table) -> Expr:
                holds = tables.prefix_at(x, y, i)
                return z3.Or(holds, i == x.length - 1) if faulty else holds

            goal = tables.prefix_at(a, c, i)
        premises = [a.length >= 0, rel(a, b), rel(b, c)]
        return Query(
            premises, goal, extra={"i*": i, "a[i*]": a.at(i), "b[i*]": b.at(i), "c[i*]": c.at(i)}
        )

    return build


def all_obligations() -> list[Obligation]:
    """Every obligation, in the order the report shows them."""
    inductive = [
        ("get_new_blocks", _make_get_new, "GetNewStaleMapEntry"),
        ("free_blocks", _make_free, "DoubleFreeAccepted"),
        ("touch", _make_touch, "TouchForgetsQueue"),
        ("unpin_blocks", _make_unpin, "UnpinNullAccepted"),
        ("cache_full_blocks", _make_cache_full, "CacheWhileCachingOff"),
        ("cache_partial_block", _make_cache_partial, "PartialKeepsOldMapEntry"),
        ("evict_blocks", _make_evict, "EvictKeepsExtra"),
        ("move_block_hashes", _make_move, "MoveLeavesSourceEntries"),
        ("reset_prefix_cache", _make_reset, "ResetKeepsMap"),
    ]
    out = [
        Obligation(
            "init",
            "inductive",
            "every invariant holds in a new pool of any size",
            "InitNullFree",
            _initial,
            True,
        ),
    ]
    for action, make, fault in inductive:
        shape = {
            "get_new_blocks": "any n free blocks (set, symbolic n)",
            "free_blocks": "a multiset of blocks",
            "touch": "a multiset of blocks",
            "unpin_blocks": "a multiset of blocks",
            "cache_full_blocks": "a set of blocks, one key each",
            "evict_blocks": "a set of blocks",
        }.get(action, "single blocks")
        out.append(
            Obligation(
                f"preserves:{action}",
                "inductive",
                f"{action} on {shape} keeps every invariant",
                fault,
                _inductive(action, make),
                True,
            )
        )
    out += [
        Obligation(
            "get_cached_block:hit-carries-key",
            "property",
            "a block get_cached_block may answer for a key is real, carries the key and may "
            "be touched",
            "LookupIgnoresKey",
            _hit_is_touchable,
        ),
        Obligation(
            "writable:held-once-unkeyed-not-free",
            "property",
            "is_block_writable(b) implies b is held once, has no key, is not free",
            "WritableIgnoresRefCount",
            _writable_held_once,
        ),
        Obligation(
            "writable:cached-never",
            "property",
            "a block the map has under any key is never writable",
            "WritableIgnoresKey",
            _cached_never_writable,
        ),
        Obligation(
            "get_new_blocks:returns-writable",
            "property",
            "every block get_new_blocks returns is then writable and unkeyed",
            "StaleKeyAfterReuse",
            _new_blocks_writable,
        ),
        Obligation(
            "get_new_blocks:held-once",
            "property",
            "a block handed out was held by nobody and is then held once, not free",
            "GetNewTakesHeld",
            _handed_out_once,
        ),
        Obligation(
            "get_new_blocks:never-twice",
            "property",
            "two get_new_blocks calls in a row never hand out the same block",
            "GetNewKeepsFree",
            _never_twice,
        ),
        Obligation(
            "move_block_hashes:loses-no-entry",
            "property",
            "every (key, block) entry survives, re-pointed from src to dst",
            "MoveDropsExtra",
            _move_loses_nothing,
        ),
        Obligation(
            "free-count:lemma-base",
            "lemma base",
            "count-delta lemma at m = 0",
            "CountSkipsLast",
            _lemma("base"),
        ),
        Obligation(
            "free-count:lemma-step",
            "lemma step",
            "count-delta lemma: m -> m + 1",
            "CountSkipsLast",
            _lemma("step"),
        ),
    ]
    for action, fault in (
        ("get_new_blocks", "GetNewKeepsFree"),
        ("free_blocks", "FreeQueuesStillHeld"),
        ("touch", "TouchForgetsQueue"),
        ("unpin_blocks", "UnpinQueuesStillHeld"),
    ):
        out.append(
            Obligation(
                f"free-count:{action}",
                "lemma use",
                f"{action} changes free membership by its declared delta "
                "(with the lemma: the free count stays exact)",
                fault,
                _delta(action),
            )
        )
    out += [
        Obligation(
            "refs-holders:lemma-base",
            "lemma base",
            "concat-count lemma at j = 0: cnt(t ++ new) agrees with cnt(t) so far",
            holders.LEMMA_BASE_FAULT,
            _holders_lemma("base"),
        ),
        Obligation(
            "refs-holders:lemma-step",
            "lemma step",
            "concat-count lemma: j -> j + 1 (at j = L + m: cnt(t ++ new) = cnt(t) + cnt(new))",
            holders.LEMMA_STEP_FAULT,
            _holders_lemma("step"),
        ),
    ]
    for action, (what, fault) in holders.ACTIONS.items():
        out.append(
            Obligation(
                f"refs-holders:{action}",
                "lemma use",
                f"{what} keeps ref_cnt(b) == holders across tables "
                "(other requests' holders + this table, counted by the lemma)",
                fault,
                _holders(action),
            )
        )
    out += [
        Obligation(
            "tables:append-only:append",
            "tables",
            "Append growth keeps the old table as a prefix",
            "AppendOverwritesNull",
            _table_step("append"),
        ),
        Obligation(
            "tables:up-to-null:append",
            "tables",
            "Append growth in a sliding group keeps every entry or nulls it",
            "AppendOverwritesNull",
            _table_step("append-up-to-null"),
        ),
        Obligation(
            "tables:append-only:compute",
            "tables",
            "compute (copy-on-write, running path) keeps the table as is",
            "CowReplacesEntry",
            _table_step("compute"),
        ),
        Obligation(
            "tables:up-to-null:slide",
            "tables",
            "a sliding window's slide keeps every entry or nulls it",
            "SlideDropsEntries",
            _table_step("slide"),
        ),
        Obligation(
            "tables:prefix-transitive",
            "tables",
            "append-only is transitive: over any number of steps",
            "PrefixSkipsEntry",
            _transitive(False),
        ),
        Obligation(
            "tables:up-to-null-transitive",
            "tables",
            "append-only up to null is transitive: over any number of steps",
            "NullRefill",
            _transitive(True),
        ),
    ]
    return out
