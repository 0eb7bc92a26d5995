"""The pool's key rules as small pure functions over flat data, each with its contract.

The transitions in :mod:`allocation`, :mod:`caching` and :mod:`queries` work on a whole
:class:`~kvpool.spec.state.PoolState`; the rules that decide what they do live here, over
tuples of ints and booleans, and the transitions call them. The docstrings state each rule
as PEP 316 conditions (``pre:`` / ``post:`` lines) that CrossHair reads: over flat inputs like
these, ``kvpool crosshair`` searches them for counterexamples in seconds. A search that finds
nothing is evidence, not proof; the Z3 proofs (``kvpool prove``) are the proofs.

Preconditions spell out ``0 <= b`` for every block id: Python reads a negative index from
the end, which would let a wrong id pass unnoticed. The lines that keep the inputs small (a
handful of blocks, so that the search covers the interesting shapes) are search bounds,
not contract: each calls a ``search_...`` predicate of :mod:`.bounds`.

Conventions: ``ref_cnt`` is one count per block, block 0 (the null block) included, whose
count is not maintained; ``queue`` is the free queue, front first.
"""

from __future__ import annotations

# the contracts' search bounds, read by CrossHair from the pre: lines
from .bounds import search_blocks, search_chain, search_usage  # noqa: F401

#: Block 0: never free, never cached, never handed out, never written.
NULL = 0

# --- shape predicates, used by the contracts ---------------------------------------------


def counts(ref_cnt: tuple[int, ...]) -> bool:
    """A pool's ref counts: at least the null block, none negative."""
    return len(ref_cnt) >= 1 and all(c >= 0 for c in ref_cnt)


def ids_in_range(blocks: tuple[int, ...], num_blocks: int) -> bool:
    """Every listed id names a block (``0 <= b``: no negative index sneaks through)."""
    return all(0 <= b < num_blocks for b in blocks)


def free_iff_zero(queue: tuple[int, ...], ref_cnt: tuple[int, ...]) -> bool:
    """Invariants 1, 2 and 5 over flat data: the queue holds each real block at most once,
    exactly the real blocks whose count is 0, never the null block."""
    return (
        len(queue) == len(set(queue))
        and all(0 < b < len(ref_cnt) for b in queue)
        and all((b in queue) == (ref_cnt[b] == 0) for b in range(1, len(ref_cnt)))
    )


def within_holds(ref_cnt: tuple[int, ...], blocks: tuple[int, ...]) -> bool:
    """No real block is listed more times than it is held (a release is a multiset)."""
    return all(blocks.count(b) <= ref_cnt[b] for b in blocks if b != NULL)


def newcomers(new: tuple[int, ...], old: tuple[int, ...]) -> tuple[int, ...]:
    """The entries of ``new`` that were not in ``old``, in ``new``'s order."""
    return tuple(b for b in new if b not in old)


def ahead_of(new: tuple[int, ...], old: tuple[int, ...], b: int) -> bool:
    """In queue ``new``, ``b`` sits ahead of every entry of the old queue ``old``."""
    return all(new.index(b) < new.index(q) for q in old)


def behind(new: tuple[int, ...], old: tuple[int, ...], b: int) -> bool:
    """In queue ``new``, ``b`` sits behind every entry of the old queue ``old``."""
    return all(new.index(b) > new.index(q) for q in old)


def reached_zero(after: tuple[int, ...], blocks: tuple[int, ...]) -> set[int]:
    """The real listed blocks whose count is 0 after a release."""
    return {b for b in set(blocks) if b != NULL and after[b] == 0}


def lru_rule(
    new: tuple[int, ...],
    old: tuple[int, ...],
    keyed: tuple[bool, ...],
    caching: bool,
    evict_first: bool,
) -> bool:
    """With caching on and no ``evict_first``, a keyed block joins behind the old queue."""
    if not caching or evict_first:
        return True
    return all(behind(new, old, b) for b in newcomers(new, old) if keyed[b])


def lifo_rule(
    new: tuple[int, ...],
    old: tuple[int, ...],
    keyed: tuple[bool, ...],
    caching: bool,
    unkeyed_to_front: bool,
) -> bool:
    """With caching on, a profile that reuses unkeyed blocks first puts them ahead of the old
    queue."""
    if not caching or not unkeyed_to_front:
        return True
    return all(ahead_of(new, old, b) for b in newcomers(new, old) if not keyed[b])


def evict_first_rule(new: tuple[int, ...], old: tuple[int, ...], evict_first: bool) -> bool:
    """``evict_first`` puts every freed block ahead of the old queue."""
    return not evict_first or all(ahead_of(new, old, b) for b in newcomers(new, old))


def caching_off_rule(
    new: tuple[int, ...], old: tuple[int, ...], caching: bool, evict_first: bool, to_front: bool
) -> bool:
    """With caching off (and no ``evict_first``) every freed block joins on the profile's
    side."""
    if caching or evict_first:
        return True
    side = ahead_of if to_front else behind
    return all(side(new, old, b) for b in newcomers(new, old))


# --- where a freed block goes ------------------------------------------------------------


def free_goes_to_front(
    keyed: bool,
    caching: bool,
    evict_first: bool,
    unkeyed_to_front: bool,
    caching_off_to_front: bool,
) -> bool:
    """Whether a block reaching ref_cnt 0 joins the free queue at the front (reused first)
    rather than the back (the LRU end: evicted last).

    ``unkeyed_to_front`` and ``caching_off_to_front`` are the profile's choices.

    post: __return__ or not evict_first
    post: not __return__ or evict_first or not (caching and keyed)
    post: evict_first or not caching or keyed or __return__ == unkeyed_to_front
    post: evict_first or caching or __return__ == caching_off_to_front
    """
    if evict_first:
        return True
    if not caching:
        return caching_off_to_front
    if not keyed:
        return unkeyed_to_front
    return False


def requeue(
    queue: tuple[int, ...], front: tuple[int, ...], back: tuple[int, ...]
) -> tuple[int, ...]:
    """``queue`` with ``front`` ahead of its old front and ``back`` behind its old back,
    each kept in the given order.

    pre: search_blocks(queue + front + back)
    post: __return__[: len(front)] == front
    post: __return__[len(front) : len(front) + len(queue)] == queue
    post: __return__[len(front) + len(queue) :] == back
    """
    return (*front, *queue, *back)


# --- releasing, taking, touching ---------------------------------------------------------


def release_counts(
    ref_cnt: tuple[int, ...], blocks: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop one reference per listed real block (the null block is skipped).

    Returns the new counts and the blocks that reached 0, in the order they did.

    pre: counts(ref_cnt)
    pre: search_blocks(ref_cnt)
    pre: search_blocks(blocks)
    pre: ids_in_range(blocks, len(ref_cnt))
    pre: within_holds(ref_cnt, blocks)
    post: len(__return__[0]) == len(ref_cnt)
    post: __return__[0][0] == ref_cnt[0]
    post: all(__return__[0][b] == ref_cnt[b] - blocks.count(b) for b in range(1, len(ref_cnt)))
    post: all(c >= 0 for c in __return__[0])
    post: NULL not in __return__[1]
    post: len(set(__return__[1])) == len(__return__[1])
    post: set(__return__[1]) == reached_zero(__return__[0], blocks)
    """
    counts = list(ref_cnt)
    reached: list[int] = []
    for b in blocks:
        if b == NULL:
            continue
        counts[b] -= 1
        if counts[b] == 0:
            reached.append(b)
    return tuple(counts), tuple(reached)


def free_into_queue(
    queue: tuple[int, ...],
    ref_cnt: tuple[int, ...],
    keyed: tuple[bool, ...],
    blocks: tuple[int, ...],
    caching: bool,
    evict_first: bool,
    unkeyed_to_front: bool,
    caching_off_to_front: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``free_blocks`` over flat data: the new counts and the new free queue.

    Blocks reaching 0 that go to the front keep the given order ahead of the old front; the
    others keep the given order behind the old back.

    pre: counts(ref_cnt)
    pre: search_blocks(ref_cnt)
    pre: len(keyed) == len(ref_cnt)
    pre: search_blocks(blocks)
    pre: free_iff_zero(queue, ref_cnt)
    pre: ids_in_range(blocks, len(ref_cnt))
    pre: within_holds(ref_cnt, blocks)
    post: free_iff_zero(__return__[1], __return__[0])
    post: tuple(b for b in __return__[1] if b in queue) == queue
    post: set(newcomers(__return__[1], queue)) == reached_zero(__return__[0], blocks)
    post: lru_rule(__return__[1], queue, keyed, caching, evict_first)
    post: lifo_rule(__return__[1], queue, keyed, caching, unkeyed_to_front)
    post: evict_first_rule(__return__[1], queue, evict_first)
    post: caching_off_rule(__return__[1], queue, caching, evict_first, caching_off_to_front)
    """
    counts, reached = release_counts(ref_cnt, blocks)
    front = tuple(
        b
        for b in reached
        if free_goes_to_front(
            keyed[b], caching, evict_first, unkeyed_to_front, caching_off_to_front
        )
    )
    back = tuple(b for b in reached if b not in front)
    return counts, requeue(queue, front, back)


def unpin_into_queue(
    queue: tuple[int, ...], ref_cnt: tuple[int, ...], blocks: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``unpin_blocks`` over flat data: blocks reaching 0 go to the back whatever their key.

    pre: counts(ref_cnt)
    pre: search_blocks(ref_cnt)
    pre: search_blocks(blocks)
    pre: free_iff_zero(queue, ref_cnt)
    pre: ids_in_range(blocks, len(ref_cnt))
    pre: NULL not in blocks
    pre: within_holds(ref_cnt, blocks)
    post: free_iff_zero(__return__[1], __return__[0])
    post: __return__[1][: len(queue)] == queue
    post: all(__return__[0][b] == ref_cnt[b] - blocks.count(b) for b in range(1, len(ref_cnt)))
    """
    counts, reached = release_counts(ref_cnt, blocks)
    return counts, requeue(queue, (), reached)


def take_from_front(
    queue: tuple[int, ...], ref_cnt: tuple[int, ...], n: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``get_new_blocks(n)`` over flat data: the blocks handed out, the new counts, the new
    queue. Each block handed out is held once.

    pre: counts(ref_cnt)
    pre: search_blocks(ref_cnt)
    pre: free_iff_zero(queue, ref_cnt)
    pre: 0 <= n <= len(queue)
    post: __return__[0] == queue[:n]
    post: __return__[2] == queue[n:]
    post: all(__return__[1][b] == 1 for b in __return__[0])
    post: NULL not in __return__[0]
    post: free_iff_zero(__return__[2], __return__[1])
    """
    taken = queue[:n]
    counts = list(ref_cnt)
    for b in taken:
        counts[b] = 1
    return taken, tuple(counts), queue[n:]


def touch_counts(
    queue: tuple[int, ...], ref_cnt: tuple[int, ...], blocks: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``touch`` over flat data: one more reference per listed real block; touched free
    blocks leave the queue, which otherwise keeps its order.

    pre: counts(ref_cnt)
    pre: search_blocks(ref_cnt)
    pre: search_blocks(blocks)
    pre: free_iff_zero(queue, ref_cnt)
    pre: ids_in_range(blocks, len(ref_cnt))
    post: all(__return__[0][b] == ref_cnt[b] + blocks.count(b) for b in range(1, len(ref_cnt)))
    post: __return__[0][0] == ref_cnt[0]
    post: __return__[1] == tuple(b for b in queue if b not in blocks)
    post: free_iff_zero(__return__[1], __return__[0])
    """
    counts = list(ref_cnt)
    for b in blocks:
        if b != NULL:
            counts[b] += 1
    return tuple(counts), tuple(b for b in queue if counts[b] == 0)


# --- queries ---------------------------------------------------------------------------


def block_writable(ref_cnt: int, has_key: bool, block: int) -> bool:
    """The write guard: only the sole holder of a block no key names may write it in place.

    pre: 0 <= block
    pre: ref_cnt >= 0
    post: not __return__ or block != NULL
    post: not __return__ or ref_cnt == 1
    post: not __return__ or not has_key
    post: __return__ or block == NULL or ref_cnt != 1 or has_key
    """
    return block != NULL and ref_cnt == 1 and not has_key


def usage_fraction(num_free: int, num_blocks: int) -> float:
    """The fraction of real blocks out of the free queue; 0.0 for a pool of only the null
    block. Cached blocks in the queue count as free.

    pre: 1 <= num_blocks
    pre: search_usage(num_blocks)
    pre: 0 <= num_free <= num_blocks - 1
    post: 0.0 <= __return__ <= 1.0
    post: (__return__ == 0.0) == (num_free == num_blocks - 1)
    post: (__return__ == 1.0) == (num_free == 0 and num_blocks > 1)
    """
    real = num_blocks - 1
    if not real:
        return 0.0
    return 1.0 - num_free / real


# --- the key layout and the coarse view of the hash chain --------------------------------


def fine_hash_index(hash_block_size: int, block_size: int, index: int) -> int:
    """Which of a request's fine hashes (one per ``hash_block_size`` tokens) names its block
    ``index`` viewed at ``block_size``: the last one inside that block.

    pre: 1 <= hash_block_size and 1 <= block_size
    pre: block_size % hash_block_size == 0
    pre: 0 <= index
    pre: search_chain(hash_block_size, block_size, index)
    post: __return__ >= 0
    post: (__return__ + 1) * hash_block_size == (index + 1) * block_size
    post: __return__ * hash_block_size >= index * block_size
    """
    scale = block_size // hash_block_size
    return (index + 1) * scale - 1


def coarse_blocks(num_hashes: int, hash_block_size: int, block_size: int) -> int:
    """How many blocks of ``block_size`` tokens ``num_hashes`` fine hashes cover.

    pre: 0 <= num_hashes
    pre: 1 <= hash_block_size and 1 <= block_size
    pre: block_size % hash_block_size == 0
    pre: search_chain(hash_block_size, block_size, num_hashes)
    post: __return__ >= 0
    post: __return__ * block_size <= num_hashes * hash_block_size
    post: num_hashes * hash_block_size < (__return__ + 1) * block_size
    post: not __return__ or fine_hash_index(hash_block_size, block_size, __return__ - 1)<num_hashes
    """
    return num_hashes // (block_size // hash_block_size)


def cache_positions(
    blocks: tuple[int, ...],
    num_cached: int,
    num_full: int,
    mask: tuple[bool, ...] | None,
) -> tuple[tuple[int, int], ...]:
    """``(index, block)`` of the blocks ``cache_full_blocks`` registers: the new full ones,
    ``blocks[num_cached:num_full]``, less the null block and the masked-out ones.

    pre: search_blocks(blocks)
    pre: all(0 <= b for b in blocks)
    pre: 0 <= num_cached <= num_full <= len(blocks)
    pre: mask is None or len(mask) == num_full - num_cached
    post: all(num_cached <= i < num_full and blocks[i] == b != NULL for i, b in __return__)
    post: all(a[0] < b[0] for a, b in zip(__return__, __return__[1:]))
    post: mask is None or all(mask[i - num_cached] for i, _ in __return__)
    post: len(__return__) == len(new_real_blocks(blocks, num_cached, num_full, mask))
    """
    chosen = []
    for i, b in enumerate(blocks[num_cached:num_full]):
        masked_out = mask is not None and not mask[i]
        if b != NULL and not masked_out:
            chosen.append((num_cached + i, b))
    return tuple(chosen)


def new_real_blocks(
    blocks: tuple[int, ...], num_cached: int, num_full: int, mask: tuple[bool, ...] | None
) -> list[int]:
    """The new full blocks that are real and not masked out (contract helper)."""
    window = blocks[num_cached:num_full]
    return [b for i, b in enumerate(window) if b != NULL and (mask is None or mask[i])]
