"""The pool's actions as transition relations on :class:`~.encoding.State`, and their
planted faulty variants.

Each action returns a :class:`Step`: a scalar precondition, a precondition per block and
key (instantiated like the invariant), and the state after. Arguments are symbolic:
``get_new_blocks`` takes the set of blocks it hands out (``sel``) and their number ``n``;
``free_blocks``, ``touch`` and ``unpin_blocks`` take a multiset of blocks as a count per
block (``c(b)`` times listed), so a block listed twice in one call is covered. The
bounded checker passes the call's list of blocks as well (``args``) to place freed
blocks in the queue in the given order; the unbounded proofs do not look at the order.

A fault is a name; each transition takes ``fault`` and behaves like the planted bug when
the name is one of its own (see :data:`FAULTS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3  # type: ignore[import-untyped]

from .encoding import NULL, BlockFn, Expr, State, carries, in_range, real

TRUE = z3.BoolVal(True)


@dataclass(frozen=True)
class Step:
    """What an action does: when it is allowed, and the state after."""

    pre: Expr
    pre_at: Callable[[Expr, Expr], Expr]
    post: State


@dataclass(frozen=True)
class Fault:
    """A planted bug in one encoded action."""

    name: str
    action: str
    description: str
    #: The ``tests/conformance/faulty_pools.py`` class with the same bug, if any.
    pool: str | None = None


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("InitNullFree", "init", "the null block starts in the free queue"),
        Fault(
            "GetNewKeepsFree",
            "get_new_blocks",
            "handed-out blocks stay in the free set",
        ),
        Fault(
            "GetNewStaleMapEntry",
            "get_new_blocks",
            "the block's keys are dropped but the multimap keeps its entries",
        ),
        Fault(
            "StaleKeyAfterReuse",
            "get_new_blocks",
            "a cached block handed out again keeps its key",
            pool="StaleKeyAfterReuse",
        ),
        Fault(
            "GetNewTakesHeld",
            "get_new_blocks",
            "a block held once may be handed out as well as free ones",
        ),
        Fault(
            "DoubleFreeAccepted",
            "free_blocks",
            "freeing a block more often than it is held is not refused",
            pool="DoubleFreeAccepted",
        ),
        Fault(
            "CachedToFront",
            "free_blocks",
            "cached blocks reaching ref_cnt 0 go to the front (LRU lost)",
            pool="CachedToFront",
        ),
        Fault(
            "TouchForgetsQueue",
            "touch",
            "touch takes a reference on a free block but leaves it in the free queue",
            pool="TouchForgetsQueue",
        ),
        Fault(
            "FreeQueuesStillHeld",
            "free_blocks",
            "a released block joins the free queue although other holders remain",
        ),
        Fault(
            "UnpinQueuesStillHeld",
            "unpin_blocks",
            "an unpinned block joins the free queue although other holders remain",
        ),
        Fault("UnpinNullAccepted", "unpin_blocks", "the null block can be unpinned"),
        Fault(
            "CacheWhileCachingOff",
            "cache_full_blocks",
            "blocks are registered although prefix caching is off",
        ),
        Fault(
            "PartialKeepsOldMapEntry",
            "cache_partial_block",
            "a promoted partial entry replaces the primary key but the map keeps the old one",
        ),
        Fault(
            "EvictKeepsExtra",
            "evict_blocks",
            "evicting strips the primary key but leaves the extra keys",
        ),
        Fault(
            "MoveLeavesSourceEntries",
            "move_block_hashes",
            "the keys move to dst but the map keeps them under src",
        ),
        Fault(
            "MoveDropsExtra",
            "move_block_hashes",
            "only the primary key moves; the extra keys vanish from the map",
        ),
        Fault(
            "ResetKeepsMap",
            "reset_prefix_cache",
            "the blocks forget their keys, the multimap does not",
        ),
        Fault(
            "ResetWhileHeld",
            "reset_prefix_cache",
            "reset_prefix_cache clears the cache while blocks are held",
            pool="ResetWhileHeld",
        ),
        Fault(
            "LookupIgnoresKey",
            "get_cached_block",
            "get_cached_block answers with any keyed block, not one listed under the key",
        ),
        Fault(
            "WritableIgnoresRefCount",
            "is_block_writable",
            "is_block_writable accepts any held block (ref_cnt >= 1)",
        ),
        Fault(
            "WritableIgnoresKey",
            "is_block_writable",
            "is_block_writable does not look at the block's key",
        ),
        Fault("CountSkipsLast", "lemma", "the count starts at 1 and forgets block m"),
        Fault(
            "ConcatCountStartsAtOne",
            "lemma",
            "the count of a concatenated table starts at 1 (refs-holders lemma base)",
        ),
        Fault(
            "ConcatReadsOldAtJoin",
            "lemma",
            "entry L of t ++ new is read from t, not new (refs-holders lemma step)",
        ),
        Fault(
            "AppendListsNewTwice",
            "refcount",
            "the table lists each block get_new_blocks hands out twice (ref set to 1)",
        ),
        Fault(
            "TouchCountsOnce",
            "touch",
            "touch takes one reference per distinct block, not one per occurrence",
        ),
        Fault(
            "FreeCountsOnce",
            "free_blocks",
            "free_blocks releases a block once although the list has it twice",
        ),
        Fault(
            "CowKeepsSourceRef",
            "refcount",
            "copy-on-write swaps src for dst in the table but never releases src",
        ),
        Fault(
            "SlideKeepsRef",
            "refcount",
            "a slide nulls table entries but does not release their blocks",
        ),
        Fault("AppendOverwritesNull", "tables", "growing a table refills its null entries"),
        Fault("CowReplacesEntry", "tables", "copy-on-write puts the copy into the table"),
        Fault("SlideDropsEntries", "tables", "a slide drops old entries instead of nulling"),
        Fault("PrefixSkipsEntry", "tables", "a 'prefix' that may change its last entry"),
        Fault("NullRefill", "tables", "'up to null' that also lets a null become a block"),
    )
}


def _strip(s: State, gone: BlockFn) -> State:
    """Every key of the blocks where ``gone(b)`` holds removed, from blocks and map."""
    return s.with_(
        hasp=lambda b: z3.And(s.hasp(b), z3.Not(gone(b))),
        extra=lambda b, k: z3.And(s.extra(b, k), z3.Not(gone(b))),
        mm=lambda k, b: z3.And(s.mm(k, b), z3.Not(gone(b))),
    )


def no_pre_at(b: Expr, k: Expr) -> Expr:
    return TRUE


# --- get_new_blocks ----------------------------------------------------------------------


def get_new_blocks(s: State, sel: BlockFn, n: Expr, fault: str | None = None) -> Step:
    """Hand out the blocks of ``sel`` (``n`` of them, all free): each ends held once, with
    no watcher and, with caching on, no key.

    The bounded checker chooses ``sel`` as the ``n`` blocks of lowest rank; here any
    subset of the free blocks is allowed, which covers every eviction order.
    """
    pre = z3.And(n >= 0, n <= s.nfree)

    def pre_at(b: Expr, k: Expr) -> Expr:
        if fault == "GetNewTakesHeld":
            return z3.Implies(sel(b), z3.And(real(s, b), s.ref(b) <= 1))
        return z3.Implies(sel(b), s.free(b))

    keyed = _strip(s, lambda b: z3.And(sel(b), s.caching))
    if fault == "StaleKeyAfterReuse":
        keyed = s
    if fault == "GetNewStaleMapEntry":
        keyed = keyed.with_(mm=s.mm)
    post = keyed.with_(
        ref=lambda b: z3.If(sel(b), 1, s.ref(b)),
        free=(
            s.free if fault == "GetNewKeepsFree" else (lambda b: z3.And(s.free(b), z3.Not(sel(b))))
        ),
        nfree=s.nfree - n,
        wat=lambda b: z3.And(s.wat(b), z3.Not(sel(b))),
    )
    return Step(pre, pre_at, post)


# --- releasing: free_blocks, unpin_blocks -------------------------------------------------


def counts_of(args: list[Expr]) -> BlockFn:
    """The multiset of a call's list of blocks, as a count per block."""
    return lambda b: z3.Sum([z3.If(a == b, 1, 0) for a in args]) if args else z3.IntVal(0)


def _queue_ranks(
    s: State, ref_after: BlockFn, args: list[Expr], front: BlockFn
) -> tuple[BlockFn, Expr, Expr]:
    """Ranks for the blocks of ``args`` that reach 0: the front ones keep their order ahead
    of the old front, the back ones keep theirs behind the old back."""
    reach = []
    for i, a in enumerate(args):
        seen = z3.Sum([z3.If(args[j] == a, 1, 0) for j in range(i + 1)])
        reach.append(z3.And(a != NULL, s.ref(a) - seen == 0))
    is_front = [z3.And(r, front(a)) for r, a in zip(reach, args, strict=True)]
    is_back = [z3.And(r, z3.Not(front(a))) for r, a in zip(reach, args, strict=True)]
    nf = z3.Sum([z3.If(f, 1, 0) for f in is_front]) if args else z3.IntVal(0)
    nb = z3.Sum([z3.If(f, 1, 0) for f in is_back]) if args else z3.IntVal(0)

    def rank(b: Expr) -> Expr:
        value = s.rank(b)
        for i, a in enumerate(args):
            before_f = z3.Sum([z3.If(f, 1, 0) for f in is_front[:i]]) if i else z3.IntVal(0)
            before_b = z3.Sum([z3.If(f, 1, 0) for f in is_back[:i]]) if i else z3.IntVal(0)
            value = z3.If(z3.And(a == b, is_front[i]), s.lo - nf + before_f, value)
            value = z3.If(z3.And(a == b, is_back[i]), s.hi + before_b, value)
        return value

    return rank, s.lo - nf, s.hi + nb


def goes_to_front(
    s: State, b: Expr, evict_first: bool, unkeyed_front: bool, caching_off_front: bool
) -> Expr:
    """The profile's rule for a block reaching ref_cnt 0 (``flat.free_goes_to_front``)."""
    if evict_first:
        return TRUE
    return z3.If(
        z3.Not(s.caching),
        z3.BoolVal(caching_off_front),
        z3.And(z3.Not(s.hasp(b)), z3.BoolVal(unkeyed_front)),
    )


def free_blocks(
    s: State,
    c: BlockFn,
    fault: str | None = None,
    args: list[Expr] | None = None,
    evict_first: bool = False,
    unkeyed_front: bool = True,
    caching_off_front: bool = True,
) -> Step:
    """Release each block ``c(b)`` times; blocks reaching 0 join the free set (the null
    block is skipped). Contract: ids in range, no block released more than it is held."""

    def pre_at(b: Expr, k: Expr) -> Expr:
        held = z3.Implies(b != NULL, c(b) <= s.ref(b))
        if fault == "DoubleFreeAccepted":
            held = TRUE
        return z3.And(c(b) >= 0, z3.Implies(c(b) > 0, in_range(s, b)), held)

    def ref(b: Expr) -> Expr:
        if fault == "FreeCountsOnce":
            return z3.If(b == NULL, s.ref(b), s.ref(b) - z3.If(c(b) > 0, 1, 0))
        return z3.If(b == NULL, s.ref(b), s.ref(b) - c(b))

    def reaches_zero(b: Expr) -> Expr:
        return z3.And(b != NULL, c(b) > 0, ref(b) == 0)

    def free(b: Expr) -> Expr:
        if fault == "FreeQueuesStillHeld":
            return z3.Or(s.free(b), z3.And(b != NULL, c(b) > 0))
        return z3.Or(s.free(b), reaches_zero(b))

    post = s.with_(ref=ref, free=free)
    if args is not None:
        front_all = evict_first or fault == "CachedToFront"

        def front(b: Expr) -> Expr:
            return goes_to_front(s, b, front_all, unkeyed_front, caching_off_front)

        rank, lo, hi = _queue_ranks(s, ref, args, front)
        newly = z3.Sum([z3.If(reaches_zero(b), 1, 0) for b in _distinct(args)])
        post = post.with_(rank=rank, lo=lo, hi=hi, nfree=s.nfree + newly)
    return Step(TRUE, pre_at, post)


def _distinct(args: list[Expr]) -> list[Expr]:
    """Per position, the block if it did not occur earlier in the list, else the null block
    (which never counts)."""
    out = []
    for i, a in enumerate(args):
        earlier = z3.Or([args[j] == a for j in range(i)]) if i else z3.BoolVal(False)
        out.append(z3.If(earlier, NULL, a))
    return out


def unpin_blocks(
    s: State, c: BlockFn, fault: str | None = None, args: list[Expr] | None = None
) -> Step:
    """Release each block ``c(b)`` times and give it a reuse watcher; blocks reaching 0
    join the free set (at the back, in ``args`` order when the list is given, as for
    ``free_blocks``). Contract: never the null block, never more than held."""

    def pre_at(b: Expr, k: Expr) -> Expr:
        null_ok = z3.Implies(b == NULL, c(b) == 0)
        if fault == "UnpinNullAccepted":
            null_ok = TRUE
        return z3.And(
            c(b) >= 0,
            z3.Implies(c(b) > 0, in_range(s, b)),
            null_ok,
            z3.Implies(b != NULL, c(b) <= s.ref(b)),
        )

    def ref(b: Expr) -> Expr:
        return s.ref(b) - c(b)

    post = s.with_(
        ref=ref,
        free=lambda b: z3.Or(
            s.free(b),
            z3.And(c(b) > 0, TRUE if fault == "UnpinQueuesStillHeld" else ref(b) == 0),
        ),
        wat=lambda b: z3.Or(s.wat(b), c(b) > 0),
    )
    if args is not None:
        rank, lo, hi = _queue_ranks(s, ref, args, lambda b: z3.BoolVal(False))
        newly = z3.Sum(
            [z3.If(z3.And(b != NULL, c(b) > 0, ref(b) == 0), 1, 0) for b in _distinct(args)]
        )
        post = post.with_(rank=rank, lo=lo, hi=hi, nfree=s.nfree + newly)
    return Step(TRUE, pre_at, post)


# --- touch -------------------------------------------------------------------------------


def touch(s: State, c: BlockFn, fault: str | None = None, args: list[Expr] | None = None) -> Step:
    """Take ``c(b)`` more references on each block; free ones leave the free set.
    Contract: ids in range; a free block touched must carry a key (a cache hit)."""

    def pre_at(b: Expr, k: Expr) -> Expr:
        hit = z3.Implies(z3.And(c(b) > 0, b != NULL, s.ref(b) == 0), s.hasp(b))
        return z3.And(c(b) >= 0, z3.Implies(c(b) > 0, in_range(s, b)), hit)

    def ref(b: Expr) -> Expr:
        if fault == "TouchCountsOnce":
            return z3.If(b == NULL, s.ref(b), s.ref(b) + z3.If(c(b) > 0, 1, 0))
        return z3.If(b == NULL, s.ref(b), s.ref(b) + c(b))

    free = s.free if fault == "TouchForgetsQueue" else (lambda b: z3.And(s.free(b), ref(b) == 0))
    post = s.with_(ref=ref, free=free)
    if args is not None:
        left = z3.Sum(
            [z3.If(z3.And(a != NULL, s.free(a), z3.Not(free(a))), 1, 0) for a in _distinct(args)]
        )
        post = post.with_(nfree=s.nfree - left)
    return Step(TRUE, pre_at, post)


# --- the prefix cache --------------------------------------------------------------------


def cache_full_blocks(
    s: State, sel: BlockFn, key: BlockFn, tokens: BlockFn, fault: str | None = None
) -> Step:
    """Register each block of ``sel`` under ``key(b)`` as its primary key (covering
    ``tokens(b)``); a block with a shorter (partial) key loses its old keys first.
    Contract: caching on; each block real and held; an old key covers fewer tokens."""
    pre = TRUE if fault == "CacheWhileCachingOff" else s.caching

    def pre_at(b: Expr, k: Expr) -> Expr:
        fresh = z3.Implies(s.hasp(b), s.ptok(b) < tokens(b))
        return z3.Implies(sel(b), z3.And(real(s, b), s.ref(b) >= 1, fresh))

    stripped = _strip(s, sel)
    post = stripped.with_(
        hasp=lambda b: z3.Or(sel(b), stripped.hasp(b)),
        pkey=lambda b: z3.If(sel(b), key(b), s.pkey(b)),
        ptok=lambda b: z3.If(sel(b), tokens(b), s.ptok(b)),
        mm=lambda k, b: z3.If(sel(b), k == key(b), s.mm(k, b)),
    )
    return Step(pre, pre_at, post)


def cache_partial_block(
    s: State,
    block: Expr,
    key: Expr,
    tokens: Expr,
    replace_existing: Expr,
    fault: str | None = None,
) -> Step:
    """Make ``block`` reachable under ``key`` at ``tokens``: primary if it has none, else
    an extra key; older keys covering fewer tokens (or all, with ``replace_existing``) are
    dropped first. The null block gets nothing. Contract: caching on, block held."""
    pre = z3.And(
        in_range(s, block),
        z3.Implies(block != NULL, z3.And(s.caching, s.ref(block) >= 1, tokens > 0)),
    )
    already = carries(s, block, key)
    strip = z3.And(
        block != NULL,
        z3.Or(
            replace_existing,
            z3.And(z3.Not(already), s.hasp(block), s.ptok(block) < tokens),
        ),
    )
    t = _strip(s, lambda b: z3.And(b == block, strip))
    if fault == "PartialKeepsOldMapEntry":
        t = t.with_(mm=s.mm)
    present = t.mm(key, block)
    insert = z3.And(block != NULL, z3.Not(present))
    as_primary = z3.And(insert, z3.Not(t.hasp(block)))
    as_extra = z3.And(insert, t.hasp(block))
    post = t.with_(
        hasp=lambda b: z3.Or(t.hasp(b), z3.And(b == block, as_primary)),
        pkey=lambda b: z3.If(z3.And(b == block, as_primary), key, t.pkey(b)),
        ptok=lambda b: z3.If(z3.And(b == block, as_primary), tokens, t.ptok(b)),
        extra=lambda b, k: z3.Or(t.extra(b, k), z3.And(b == block, k == key, as_extra)),
        mm=lambda k, b: z3.Or(t.mm(k, b), z3.And(b == block, k == key, insert)),
    )
    return Step(pre, no_pre_at, post)


def evict_blocks(s: State, sel: BlockFn, fault: str | None = None) -> Step:
    """Strip every key of the blocks of ``sel``; free nothing. Contract: ids in range."""

    def pre_at(b: Expr, k: Expr) -> Expr:
        return z3.Implies(sel(b), in_range(s, b))

    post = _strip(s, sel)
    if fault == "EvictKeepsExtra":
        post = post.with_(extra=s.extra, mm=lambda k, b: z3.And(s.mm(k, b), z3.Not(sel(b))))
    return Step(TRUE, pre_at, post)


def move_block_hashes(s: State, src: Expr, dst: Expr, fault: str | None = None) -> Step:
    """Re-point every key of ``src`` to ``dst`` (src's primary becomes dst's).
    Contract: both in range, dst not null and without keys."""
    pre = z3.And(in_range(s, src), in_range(s, dst), dst != NULL, z3.Not(s.hasp(dst)))

    def extra(b: Expr, k: Expr) -> Expr:
        moved = z3.BoolVal(False) if fault == "MoveDropsExtra" else s.extra(src, k)
        return z3.If(b == dst, moved, z3.If(b == src, False, s.extra(b, k)))

    def mm(k: Expr, b: Expr) -> Expr:
        moved = (
            z3.And(s.hasp(src), s.pkey(src) == k)
            if fault == "MoveDropsExtra"
            else carries(s, src, k)
        )
        stays = s.mm(k, b) if fault == "MoveLeavesSourceEntries" else z3.BoolVal(False)
        return z3.If(b == dst, moved, z3.If(b == src, stays, s.mm(k, b)))

    post = s.with_(
        hasp=lambda b: z3.If(b == dst, s.hasp(src), z3.If(b == src, False, s.hasp(b))),
        pkey=lambda b: z3.If(b == dst, s.pkey(src), s.pkey(b)),
        ptok=lambda b: z3.If(b == dst, s.ptok(src), s.ptok(b)),
        extra=extra,
        mm=mm,
    )
    return Step(pre, no_pre_at, post)


def reset_prefix_cache(s: State, fault: str | None = None) -> tuple[Step, Expr]:
    """Forget every key and watcher if no real block is held (the free queue holds all
    N-1 real blocks); else change nothing. Returns the step and its result."""
    idle = s.nfree == s.n - 1
    if fault == "ResetWhileHeld":
        idle = TRUE
    mm = s.mm if fault == "ResetKeepsMap" else (lambda k, b: z3.And(s.mm(k, b), z3.Not(idle)))
    post = s.with_(
        hasp=lambda b: z3.And(s.hasp(b), z3.Not(idle)),
        extra=lambda b, k: z3.And(s.extra(b, k), z3.Not(idle)),
        mm=mm,
        wat=lambda b: z3.And(s.wat(b), z3.Not(idle)),
    )
    return Step(TRUE, no_pre_at, post), idle


def cache_hit(s: State, key: Expr, b: Expr, fault: str | None = None) -> Expr:
    """``get_cached_block`` may answer ``b`` for ``key``: the multimap lists ``b`` under
    ``key``. Which of several blocks under one key comes first is not encoded."""
    if fault == "LookupIgnoresKey":
        return z3.And(in_range(s, b), s.hasp(b))
    return s.mm(key, b)


def is_block_writable(s: State, b: Expr, fault: str | None = None) -> Expr:
    """The answer of ``is_block_writable(b)`` (with a fault, the faulty answer)."""
    if fault == "WritableIgnoresRefCount":
        return z3.And(b != NULL, s.ref(b) >= 1, z3.Not(s.hasp(b)))
    if fault == "WritableIgnoresKey":
        return z3.And(b != NULL, s.ref(b) == 1)
    return z3.And(b != NULL, s.ref(b) == 1, z3.Not(s.hasp(b)))
