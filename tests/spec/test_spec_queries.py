"""is_block_writable, get_usage, get_num_free_blocks, take_events, and pools without events."""

from __future__ import annotations

import pytest
from kvpool.spec import (
    AllBlocksCleared,
    BlockStored,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    PoolConfig,
    PoolState,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    initial_state,
    run,
    step,
)
from kvpool.spec.hashing import request_block_hashes

H = request_block_hashes(list(range(300, 308)), 1)


def result(state: PoolState, action: object) -> object:
    after, obs = step(state, action)  # type: ignore[arg-type]
    assert after == state or isinstance(action, TakeEvents)
    return obs.result


def test_is_block_writable_only_for_sole_owner_of_an_unkeyed_real_block() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=6)), GetNewBlocks(4))
    state = run(state, CacheFullBlocks(H, (2,), 0, 1, 1), Touch((3,)), FreeBlocks((4,)))
    assert result(state, IsBlockWritable(1)) is True  # private tail
    assert result(state, IsBlockWritable(0)) is False  # null
    assert result(state, IsBlockWritable(2)) is False  # registered
    assert result(state, IsBlockWritable(3)) is False  # shared
    assert result(state, IsBlockWritable(4)) is False  # free
    assert result(state, IsBlockWritable(5)) is False  # never handed out


def test_is_block_writable_false_for_a_partial_entry() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=3)), GetNewBlocks(1))
    state = run(state, CachePartialBlock(H, 1, 1, 0, 4))
    assert result(state, IsBlockWritable(1)) is False


@pytest.mark.parametrize(("n", "taken", "usage"), [(5, 0, 0.0), (5, 2, 0.5), (5, 4, 1.0)])
def test_get_usage_is_fraction_of_real_blocks_out_of_the_queue(
    n: int, taken: int, usage: float
) -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=n)), GetNewBlocks(taken))
    assert result(state, GetUsage()) == pytest.approx(usage)
    assert result(state, GetNumFreeBlocks()) == n - 1 - taken


def test_get_usage_is_zero_for_a_pool_of_only_the_null_block() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=1))
    assert result(state, GetUsage()) == 0.0
    assert result(state, GetNumFreeBlocks()) == 0


def test_cached_free_blocks_count_as_free() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=5)), GetNewBlocks(2))
    state = run(state, CacheFullBlocks(H, (1, 2), 0, 2, 1), FreeBlocks((2, 1)))
    assert state.cache
    assert result(state, GetUsage()) == 0.0
    assert result(state, GetNumFreeBlocks()) == 4


def test_take_events_returns_pending_events_and_clears_them() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=3)), GetNewBlocks(1))
    state = run(state, CacheFullBlocks(H, (1,), 0, 1, 1))
    state, obs = step(state, TakeEvents())
    assert obs.result == (BlockStored((H[0],), None, 0, 1, 1),)
    assert state.events == ()
    _, again = step(state, TakeEvents())
    assert again.result == ()


def test_events_off_records_nothing() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=3, enable_kv_cache_events=False))
    on = initial_state(PoolConfig(num_gpu_blocks=3))
    actions = (
        GetNewBlocks(2),
        CacheFullBlocks(H, (1, 2), 0, 2, 1),
        EvictBlocks((2,)),
        FreeBlocks((2, 1)),
        GetNewBlocks(2),  # evicts block 1's key
        FreeBlocks((1, 2)),
        ResetPrefixCache(),
    )
    state = run(state, *actions)
    on = run(on, *actions)
    assert AllBlocksCleared() in on.events and len(on.events) >= 3  # the same run does emit
    assert state.events == ()
    _, obs = step(state, TakeEvents())
    assert obs.result == ()
