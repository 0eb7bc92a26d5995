"""Every refused call names its rule and leaves the pool exactly as it was."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
from kvpool.impl import BlockPool, BlockPoolError, KVCacheBlock, Request

Snapshot = Callable[[BlockPool], dict[str, Any]]
Check = Callable[[BlockPool], None]


def busy_pool() -> tuple[BlockPool, Request]:
    """Blocks 1-3 held (1, 2 keyed; 2 held twice), 4 cached and free with an extra key,
    5 unpinned with a watcher, 6-7 free; some events pending."""
    pool = BlockPool(8, enable_caching=True, hash_block_size=2, enable_kv_cache_events=True)
    req = Request.from_tokens("r", list(range(10)), 2)
    b = pool.get_new_blocks(5)
    pool.cache_full_blocks(req, b[:2], 0, 2, 2, 0)
    pool.touch([b[1]])
    pool.cache_full_blocks(req, [b[0], b[1], b[2], b[3]], 3, 4, 2, 0)
    pool.cache_partial_block(req, b[3], 2, 0, 2)
    pool.free_blocks([b[3]])
    pool.unpin_blocks([b[4]], lambda blk: None)
    return pool, req


def blk(pool: BlockPool, i: int) -> KVCacheBlock:
    return pool.blocks[i]


def other_pool_block() -> tuple[BlockPool, KVCacheBlock]:
    other = BlockPool(4, enable_caching=True, hash_block_size=2)
    return other, other.get_new_blocks(1)[0]


REFUSALS: list[tuple[str, str, Callable[[BlockPool, Request], object]]] = [
    ("get_new_blocks too many", "get-new-blocks-count", lambda p, r: p.get_new_blocks(5)),
    ("get_new_blocks negative", "get-new-blocks-count", lambda p, r: p.get_new_blocks(-1)),
    ("get_new_blocks float", "get-new-blocks-count", lambda p, r: p.get_new_blocks(1.0)),  # type: ignore[arg-type]
    ("get_new_blocks bool", "get-new-blocks-count", lambda p, r: p.get_new_blocks(True)),
    ("free a free block", "free-held", lambda p, r: p.free_blocks([blk(p, 3), blk(p, 6)])),
    ("free held once, twice", "free-held", lambda p, r: p.free_blocks([blk(p, 1), blk(p, 1)])),
    (
        "free thrice a twice-held block",
        "free-held",
        lambda p, r: p.free_blocks([blk(p, 2), blk(p, 1), blk(p, 2), blk(p, 2)]),
    ),
    ("free evict_first refused too", "free-held", lambda p, r: p.free_blocks([blk(p, 7)], True)),
    ("touch free unkeyed block", "touch-identity", lambda p, r: p.touch([blk(p, 1), blk(p, 6)])),
    (
        "touch foreign block",
        "foreign-block",
        lambda p, r: p.touch([blk(p, 1), KVCacheBlock(2)]),
    ),
    ("touch id out of range", "block-id-range", lambda p, r: p.touch([KVCacheBlock(99)])),
    # The one-pass touch and free take blocks before they reach the bad one: a refusal
    # must give back every hold and put every free block back in its place.
    (
        "touch a free cached block, then a free unkeyed one",
        "touch-identity",
        lambda p, r: p.touch([blk(p, 4), blk(p, 2), blk(p, 4), blk(p, 6)]),
    ),
    (
        "touch a free cached block, then a foreign one (tuple)",
        "foreign-block",
        lambda p, r: p.touch((blk(p, 0), blk(p, 4), other_pool_block()[1])),
    ),
    (
        "free down to zero, then a free block (generator)",
        "free-held",
        lambda p, r: p.free_blocks(b for b in [blk(p, 3), blk(p, 2), blk(p, 1), blk(p, 5)]),
    ),
    (
        "free a held block, then a dead pool's",
        "foreign-route",
        lambda p, r: p.free_blocks([blk(p, 1), other_pool_block()[1]]),
    ),
    ("unpin null", "null-unpin", lambda p, r: p.unpin_blocks([blk(p, 0)], print)),
    ("unpin free", "unpin-held", lambda p, r: p.unpin_blocks([blk(p, 1), blk(p, 4)], print)),
    ("unpin twice", "unpin-held", lambda p, r: p.unpin_blocks([blk(p, 1), blk(p, 1)], print)),
    ("unpin foreign", "foreign-block", lambda p, r: p.unpin_blocks([KVCacheBlock(1)], print)),
    (
        "cache_full bad block size",
        "block-size-multiple",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)], 0, 1, 3, 0),
    ),
    (
        "cache_full zero block size",
        "block-size-multiple",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)], 0, 1, 0, 0),
    ),
    (
        "cache_full range reversed",
        "cache-range",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)], 1, 0, 2, 0),
    ),
    (
        "cache_full range past blocks",
        "cache-range",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)], 0, 2, 2, 0),
    ),
    (
        "cache_full mask length",
        "cache-range",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)], 0, 1, 2, 0, [True, True]),
    ),
    (
        "cache_full too few hashes",
        "hashes-available",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)] * 6, 5, 6, 2, 0),
    ),
    (
        "cache_full too few hashes at coarse view",
        "hashes-available",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)] * 3, 2, 3, 4, 0),
    ),
    (
        "cache_full free block",
        "cache-held",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 0), blk(p, 3), blk(p, 6)], 1, 3, 2, 1),
    ),
    (
        "cache_full same block twice",
        "cache-distinct",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3), blk(p, 3)], 0, 2, 2, 1),
    ),
    (
        "cache_full already fully keyed",
        "cache-fresh",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3), blk(p, 2)], 0, 2, 2, 0),
    ),
    (
        "cache_full foreign block",
        "foreign-block",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3), KVCacheBlock(2)], 0, 2, 2, 0),
    ),
    (
        "cache_full bad group",
        "group-id-range",
        lambda p, r: p.cache_full_blocks(r, [blk(p, 3)], 0, 1, 2, -1),
    ),
    (
        "cache_partial free block",
        "cache-held",
        lambda p, r: p.cache_partial_block(r, blk(p, 6), 2, 0, 2),
    ),
    (
        "cache_partial odd tokens",
        "partial-tokens",
        lambda p, r: p.cache_partial_block(r, blk(p, 3), 3, 0, 2),
    ),
    (
        "cache_partial zero tokens",
        "partial-tokens",
        lambda p, r: p.cache_partial_block(r, blk(p, 3), 0, 0, 2),
    ),
    (
        "cache_partial too few hashes",
        "hashes-available",
        lambda p, r: p.cache_partial_block(r, blk(p, 3), 12, 0, 2),
    ),
    (
        "cache_partial bad block size",
        "block-size-multiple",
        lambda p, r: p.cache_partial_block(r, blk(p, 3), 2, 0, 5),
    ),
    (
        "cache_partial foreign",
        "foreign-block",
        lambda p, r: p.cache_partial_block(r, KVCacheBlock(3), 2, 0, 2),
    ),
    ("evict id out of range", "block-id-range", lambda p, r: p.evict_blocks([1, 8])),
    ("evict negative id", "block-id-range", lambda p, r: p.evict_blocks([1, -1])),
    ("evict non-int id", "block-id-range", lambda p, r: p.evict_blocks([1, "2"])),  # type: ignore[list-item]
    ("move to null", "move-null", lambda p, r: p.move_block_hashes(blk(p, 1), blk(p, 0))),
    (
        "move to keyed block",
        "move-dst-unkeyed",
        lambda p, r: p.move_block_hashes(blk(p, 1), blk(p, 2)),
    ),
    (
        "move from foreign",
        "foreign-block",
        lambda p, r: p.move_block_hashes(KVCacheBlock(1), blk(p, 3)),
    ),
    (
        "is_block_writable foreign",
        "foreign-block",
        lambda p, r: p.is_block_writable(KVCacheBlock(3)),
    ),
    ("lookup bad group", "group-id-range", lambda p, r: p.get_cached_block(b"h", [0, 1 << 32])),
]


@pytest.mark.parametrize(
    ("rule", "call"), [(rule, call) for _, rule, call in REFUSALS], ids=[n for n, _, _ in REFUSALS]
)
def test_refusal_names_rule_and_leaves_pool_unchanged(
    rule: str,
    call: Callable[[BlockPool, Request], object],
    snapshot: Snapshot,
    check: Check,
) -> None:
    pool, req = busy_pool()
    check(pool)
    before = snapshot(pool)
    with pytest.raises(BlockPoolError) as err:
        call(pool, req)
    assert err.value.rule == rule
    assert rule in str(err.value)
    assert str(err.value).startswith(err.value.operation + ":")
    assert snapshot(pool) == before
    check(pool)


def test_caching_off_refuses_cache_calls_unchanged(snapshot: Snapshot) -> None:
    pool = BlockPool(4, enable_caching=False, hash_block_size=2)
    req = Request.from_tokens("r", list(range(4)), 2)
    blocks = pool.get_new_blocks(2)
    before = snapshot(pool)
    for call in (
        lambda: pool.cache_full_blocks(req, blocks, 0, 2, 2, 0),
        lambda: pool.cache_partial_block(req, blocks[0], 2, 0, 2),
    ):
        with pytest.raises(BlockPoolError) as err:
            call()
        assert err.value.rule == "caching-enabled"
        assert snapshot(pool) == before


def test_free_held_message_names_operation_block_and_counts() -> None:
    pool, _ = busy_pool()
    with pytest.raises(BlockPoolError) as err:
        pool.free_blocks([blk(pool, 1), blk(pool, 1)])
    e = err.value
    assert (e.operation, e.rule, e.block_id) == ("free_blocks", "free-held", 1)
    assert str(e) == (
        "free_blocks: block 1: rule 'free-held': block 1 is released 2 times in this call "
        "but held 1 time(s)"
    )


def test_block_pool_error_is_a_value_error_and_pickles() -> None:
    e = BlockPoolError("touch", "foreign-block", "nope", 3)
    assert isinstance(e, ValueError)
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.operation, e2.rule, e2.block_id, str(e2)) == ("touch", "foreign-block", 3, str(e))


@pytest.mark.parametrize(("n", "hbs"), [(0, 1), (2, 0), (True, 1)])
def test_bad_pool_config_is_refused(n: int, hbs: int) -> None:
    with pytest.raises(BlockPoolError) as err:
        BlockPool(n, enable_caching=True, hash_block_size=hbs)
    assert err.value.rule == "pool-config"


def test_a_refused_free_does_not_leak_scratch_counts(check: Check) -> None:
    pool, _ = busy_pool()
    with pytest.raises(BlockPoolError):
        pool.free_blocks([blk(pool, 2), blk(pool, 3), blk(pool, 1), blk(pool, 1)])
    check(pool)  # the refused call left the pool as it was
    pool.free_blocks([blk(pool, 2), blk(pool, 2), blk(pool, 1)])
    assert blk(pool, 2).ref_cnt == 0 and blk(pool, 1).ref_cnt == 0
    check(pool)


def test_a_malformed_block_after_good_ones_leaves_the_pool_unchanged(
    snapshot: Snapshot, check: Check
) -> None:
    pool, _ = busy_pool()
    before = snapshot(pool)
    for call in (
        lambda: pool.free_blocks([blk(pool, 1), blk(pool, 3), object()]),  # type: ignore[list-item]
        lambda: pool.touch([blk(pool, 4), blk(pool, 1), object()]),  # type: ignore[list-item]
    ):
        with pytest.raises(AttributeError):
            call()
        assert snapshot(pool) == before
    check(pool)


def test_a_free_with_a_live_foreign_block_routes_after_the_pass_stopped(check: Check) -> None:
    pool, _ = busy_pool()
    other, x = other_pool_block()
    pool.free_blocks([blk(pool, 3), x, blk(pool, 2)])
    assert (blk(pool, 3).ref_cnt, blk(pool, 2).ref_cnt, x.ref_cnt) == (0, 1, 0)
    check(pool)
    check(other)
