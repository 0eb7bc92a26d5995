"""Shared checks for the impl tests: a full pool snapshot and a structural invariant walk."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kvpool.impl import BlockPool, KVCacheBlock

Snapshot = dict[str, Any]


def _walk(pool: BlockPool, forward: bool) -> list[int]:
    """Walk the free ring from the sentinel, capped at N + 2 steps."""
    root = pool.free_block_queue._root
    out: list[int] = []
    blk = root.next_free_block if forward else root.prev_free_block
    for _ in range(pool.num_gpu_blocks + 2):
        assert blk is not None, "a member has a None link"
        if blk is root:
            return out if forward else out[::-1]
        out.append(blk.block_id)
        blk = blk.next_free_block if forward else blk.prev_free_block
    raise AssertionError("free ring walk did not return to the sentinel")


def _link_id(blk: KVCacheBlock | None) -> int | None:
    return None if blk is None else blk.block_id


def take_snapshot(pool: BlockPool) -> Snapshot:
    """Everything observable about a pool, as plain values."""
    return {
        "forward": _walk(pool, True),
        "backward": _walk(pool, False),
        "num_free": pool.free_block_queue.num_free_blocks,
        "blocks": [
            (
                b.block_id,
                b.ref_cnt,
                b.block_hash,
                b.block_hash_num_tokens,
                _link_id(b.prev_free_block),
                _link_id(b.next_free_block),
                b.is_null,
            )
            for b in pool.blocks
        ],
        "map": [(k, [b.block_id for b in bl]) for k, bl in pool.cached_block_hash_to_block.items()],
        "extras": {k: sorted(v) for k, v in pool.cached_block_hashes_by_block.items()},
        "watchers": [(bid, id(w)) for bid, w in pool._reuse_watchers.items()],
        "events": list(pool.kv_event_queue),
    }


def check_invariants(pool: BlockPool) -> None:
    """Assert the pool's six invariants and the free ring's structure."""
    fwd = _walk(pool, True)
    bwd = _walk(pool, False)
    assert fwd == bwd, "forward and backward walks disagree"
    assert len(fwd) == len(set(fwd)) == pool.free_block_queue.num_free_blocks
    free = set(fwd)
    keys_of: dict[int, set[bytes]] = {}
    for key, blocks in pool.cached_block_hash_to_block.items():
        assert blocks, "a key with no block"
        ids = [b.block_id for b in blocks]
        assert len(ids) == len(set(ids))
        for b in blocks:
            assert pool.blocks[b.block_id] is b
            keys_of.setdefault(b.block_id, set()).add(key)
    for b in pool.blocks:
        assert b.pool is not None and b.pool() is pool
        if b.is_null:
            assert b.block_id == 0 and b.block_id not in free
            assert b.block_hash is None and b.block_id not in keys_of
            continue
        assert b.ref_cnt >= 0
        assert (b.block_id in free) == (b.ref_cnt == 0)
        if b.block_id not in free:
            assert b.prev_free_block is None and b.next_free_block is None
        extras = pool.cached_block_hashes_by_block.get(b.block_id, set())
        if extras:
            assert b.block_hash is not None, "extra keys without a primary"
        expected = set(extras) | ({b.block_hash} if b.block_hash is not None else set())
        assert keys_of.get(b.block_id, set()) == expected
        assert (b.block_hash is None) == (b.block_hash_num_tokens is None)


@pytest.fixture
def snapshot() -> Callable[[BlockPool], Snapshot]:
    return take_snapshot


@pytest.fixture
def check() -> Callable[[BlockPool], None]:
    return check_invariants
