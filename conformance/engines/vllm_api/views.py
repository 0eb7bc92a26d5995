"""What the adapter sees inside a pool: its free queue, ref counts, keys and index as a
:class:`~kvpool.conformance.machines.pool.target.PoolView`, and the keys an action names (which
the index probe looks up after the step)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from kvpool.spec import Action, CacheFullBlocks, CachePartialBlock, GetCachedBlock
from kvpool.spec.keys import make_key

from ...machines.pool.target import Index, Lookups, PoolView
from ...targets.free_list import free_list_order
from ...targets.hash_index import read_index

#: Asks a pool's lookups about keys, given the index and the keys its view read.
Probe = Callable[[Index | None, tuple[frozenset[bytes], ...] | None], Lookups]


def pool_view(
    pool: Any,
    observes: frozenset[str],
    index_readable: bool,
    peer: Any | None,
    probe: Probe | None = None,
) -> PoolView:
    """What ``pool`` shows of what ``observes`` names (``peer``: its peer pool, read too).
    ``probe`` then asks the pool's lookups about keys (given what was read: the index, the
    keys), after everything else was read."""
    blocks = pool.blocks
    queue = getattr(pool, "free_block_queue", None)
    order: tuple[int, ...] | None = None
    if "free_queue" in observes and queue is not None:
        walked = free_list_order(queue, len(blocks))
        if walked is None and "structure" not in observes:
            walked = [b.block_id for b in queue.get_all_free_blocks()]
        order = tuple(walked) if walked is not None else None
    ref_cnt = tuple(map(_REF_CNT, blocks)) if "ref_cnt" in observes else None
    keys = primary = None
    if "keys" in observes:
        primary = tuple(
            [h if h is None or type(h) is bytes else bytes(h) for h in map(_HASH, blocks)]
        )
        extra = getattr(pool, "cached_block_hashes_by_block", None)
        if extra:
            keys = tuple(
                [
                    frozenset(
                        ([p] if p is not None else [])
                        + [bytes(k) for k in extra.get(b.block_id, ())]
                    )
                    for b, p in zip(blocks, primary, strict=True)
                ]
            )
        else:  # no block has extra keys: each block's keys are its primary, or none
            keys = tuple([_NO_KEYS if p is None else frozenset((p,)) for p in primary])
    index = None
    if index_readable:
        index = read_index(pool.cached_block_hash_to_block)
    peer_view = None
    if peer is not None:
        peer_view = pool_view(peer, observes, index_readable, None)
    free_count = int(pool.get_num_free_blocks())
    return PoolView(
        free_count=free_count,
        free_queue=order,
        ref_cnt=ref_cnt,
        keys=keys,
        primary=primary,
        index=index,
        lookups=None if probe is None else probe(index, keys),
        peer=peer_view,
    )


_REF_CNT = attrgetter("ref_cnt")
_HASH = attrgetter("block_hash")
_NO_KEYS: frozenset[bytes] = frozenset()


def key_pairs(view: PoolView) -> Counter[tuple[int, bytes]]:
    """Every (block, key) of a view."""
    pairs: Counter[tuple[int, bytes]] = Counter()
    for b, keys in enumerate(view.keys or ()):
        pairs.update((b, k) for k in keys)
    return pairs


def keys_named(action: Action) -> list[bytes]:
    """The keys an action hands the pool: each hash of a caching call's request in that
    call's group (a block's key is one of them, or made of them), each group of a lookup."""
    match action:
        case (
            CacheFullBlocks(block_hashes=hashes, group_id=group)
            | CachePartialBlock(block_hashes=hashes, group_id=group)
        ):
            groups: tuple[object, ...] = (group,)
        case GetCachedBlock(block_hash=block_hash, group_ids=groups):
            hashes = (block_hash,)
        case _:
            return []
    # an out-of-contract group (robustness) names no key
    valid = [g for g in groups if isinstance(g, int) and 0 <= g < 2**32]
    return [make_key(h, g) for h in hashes for g in valid if isinstance(h, bytes)]
