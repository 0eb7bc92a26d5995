"""Effects of the prefix-cache operations via step(): cache_full_blocks, cache_partial_block,
get_cached_block, evict_blocks, move_block_hashes, reset_prefix_cache."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kvpool.spec import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    MoveBlockHashes,
    PoolConfig,
    PoolState,
    PrimaryKey,
    ResetPrefixCache,
    UnpinBlocks,
    get_profile,
    initial_state,
    run,
    step,
    violation,
)
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.keys import make_key

TOKENS = list(range(200, 216))
H1 = request_block_hashes(TOKENS, 1)  # one hash per token
H2 = request_block_hashes(TOKENS, 2)  # one hash per two tokens


def pool(n: int = 8, held: int = 3, **config: object) -> PoolState:
    state = initial_state(PoolConfig(num_gpu_blocks=n, **config))  # type: ignore[arg-type]
    return run(state, GetNewBlocks(held))


# --- cache_full_blocks ------------------------------------------------------------------


def test_cache_full_blocks_keys_each_block_with_its_prefix_hash_and_group() -> None:
    state = run(pool(), CacheFullBlocks(H1, (1, 2, 3), 0, 3, 1, group_id=7))
    for i, b in enumerate((1, 2, 3)):
        key = make_key(H1[i], 7)
        assert state.primary[b] == PrimaryKey(key, i + 1)
        assert state.cache[key] == (b,)
    assert state.free_queue == (4, 5, 6, 7)
    assert state.ref_cnt[1:4] == (1, 1, 1)


def test_cache_full_blocks_coarse_block_takes_last_fine_hash_inside_it() -> None:
    # hash_block_size 2, block_size 6: block i ends at fine hash 3*(i+1) - 1.
    state = pool(hash_block_size=2)
    state = run(state, CacheFullBlocks(H2, (1, 2), 0, 2, 6))
    assert state.primary[1] == PrimaryKey(make_key(H2[2], 0), 6)
    assert state.primary[2] == PrimaryKey(make_key(H2[5], 0), 12)


def test_cache_full_blocks_respects_block_mask() -> None:
    state = run(pool(), CacheFullBlocks(H1, (1, 2, 3), 0, 3, 1, block_mask=(True, False, True)))
    assert state.keys_of(1) == (make_key(H1[0], 0),)
    assert state.keys_of(2) == ()
    assert state.keys_of(3) == (make_key(H1[2], 0),)


def test_cache_full_blocks_skips_null_and_keeps_request_positions() -> None:
    state = run(pool(), CacheFullBlocks(H1, (0, 2, 0), 0, 3, 1))
    assert state.keys_of(0) == ()
    assert state.primary[2] == PrimaryKey(make_key(H1[1], 0), 2)
    assert set(state.cache) == {make_key(H1[1], 0)}


def test_cache_full_blocks_only_caches_the_new_range() -> None:
    state = run(pool(), CacheFullBlocks(H1, (1, 2, 3), 1, 2, 1))
    assert state.keys_of(1) == () and state.keys_of(3) == ()
    assert state.keys_of(2) == (make_key(H1[1], 0),)


def test_cache_full_blocks_promotes_a_partial_entry_removing_its_old_keys() -> None:
    state = pool()
    state = run(
        state,
        CachePartialBlock(H1, 1, 2, 0, 4),
        CachePartialBlock(H1, 1, 2, 1, 4),  # an extra key in group 1
    )
    old = {make_key(H1[1], 0), make_key(H1[1], 1)}
    assert set(state.keys_of(1)) == old
    state = replace(state, events=())
    state = run(state, CacheFullBlocks(H1, (1,), 0, 1, 4))
    new = make_key(H1[3], 0)
    assert state.primary[1] == PrimaryKey(new, 4)
    assert state.extra[1] == frozenset()
    assert set(state.cache) == {new}
    removed = sorted(e for e in state.events if isinstance(e, BlockRemoved))
    assert removed == sorted([BlockRemoved(H1[1], 0), BlockRemoved(H1[1], 1)])
    assert isinstance(state.events[-1], BlockStored)


def test_cache_full_blocks_emits_one_block_stored_with_parent_and_token_count() -> None:
    state = run(pool(), CacheFullBlocks(H1, (1, 2, 3), 1, 3, 1, group_id=2))
    assert state.events == (
        BlockStored(
            block_hashes=(H1[1], H1[2]),
            parent_block_hash=H1[0],
            group_id=2,
            block_size=1,
            num_tokens=2,
        ),
    )


def test_cache_full_blocks_first_batch_has_no_parent_and_coarse_token_count() -> None:
    state = run(pool(hash_block_size=2), CacheFullBlocks(H2, (1, 2), 0, 2, 4))
    assert state.events == (BlockStored((H2[1], H2[3]), None, 0, 4, 8),)


def test_cache_full_blocks_with_nothing_new_emits_nothing() -> None:
    state = pool()
    after = run(state, CacheFullBlocks(H1, (1, 2), 2, 2, 1))
    assert after == state


# --- cache_partial_block ----------------------------------------------------------------


def test_cache_partial_block_sets_primary_and_returns_the_key() -> None:
    state, obs = step(pool(), CachePartialBlock(H1, 1, 3, 5, 4))
    key = make_key(H1[2], 5)
    assert obs.result == key
    assert state.primary[1] == PrimaryKey(key, 3)
    assert state.cache[key] == (1,)
    # the event covers the entry's block from its start: in a request's first block, no
    # parent (a subscriber could not place the fine hash H1[1]: upstream issue 58119)
    assert state.events == (BlockStored((H1[2],), None, 5, 3, 3),)


def test_partial_events_of_releases_name_the_fine_hash_before() -> None:
    """vLLM 0.24 on publish the last hash block only, after the fine hash before it."""
    config = PoolConfig(num_gpu_blocks=4)
    state = initial_state(config, get_profile("vllm-0.33"))
    state, _ = step(state, GetNewBlocks(2))
    state, _ = step(state, CachePartialBlock(H1, 1, 3, 5, 4))
    assert state.events == (BlockStored((H1[2],), H1[1], 5, 1, 1),)
    # in a later block the seed names the block before as parent
    state = initial_state(config)
    state, _ = step(state, GetNewBlocks(2))
    state, _ = step(state, CachePartialBlock(H1, 2, 6, 0, 4))  # block 1 of 4 tokens
    assert state.events == (BlockStored((H1[5],), H1[3], 0, 2, 2),)


def test_cache_partial_block_on_a_keyed_block_adds_an_extra_key() -> None:
    state = run(pool(), CachePartialBlock(H1, 1, 2, 0, 4))
    state, obs = step(state, CachePartialBlock(H1, 1, 2, 1, 4))
    assert obs.result == make_key(H1[1], 1)
    assert state.primary[1] == PrimaryKey(make_key(H1[1], 0), 2)
    assert state.extra[1] == frozenset({make_key(H1[1], 1)})


def test_cache_partial_block_drops_shorter_older_keys() -> None:
    state = run(pool(), CachePartialBlock(H1, 1, 1, 0, 4), CachePartialBlock(H1, 1, 1, 1, 4))
    state = replace(state, events=())
    state = run(state, CachePartialBlock(H1, 1, 3, 0, 4))
    key = make_key(H1[2], 0)
    assert state.keys_of(1) == (key,)
    assert state.primary[1] == PrimaryKey(key, 3)
    assert set(state.cache) == {key}
    assert sorted(e for e in state.events if isinstance(e, BlockRemoved)) == sorted(
        [BlockRemoved(H1[0], 0), BlockRemoved(H1[0], 1)]
    )


def test_cache_partial_block_keeps_a_longer_key_and_adds_the_shorter_as_extra() -> None:
    state = run(pool(), CachePartialBlock(H1, 1, 3, 0, 4))
    state = run(state, CachePartialBlock(H1, 1, 2, 0, 4))
    assert state.primary[1] == PrimaryKey(make_key(H1[2], 0), 3)
    assert state.extra[1] == frozenset({make_key(H1[1], 0)})


def test_cache_partial_block_replace_existing_hashes_drops_every_old_key() -> None:
    state = run(pool(), CachePartialBlock(H1, 1, 3, 0, 4))
    state = run(state, CachePartialBlock(H1, 1, 2, 1, 4, replace_existing_hashes=True))
    key = make_key(H1[1], 1)
    assert state.keys_of(1) == (key,)
    assert state.primary[1] == PrimaryKey(key, 2)
    assert set(state.cache) == {key}


def test_cache_partial_block_returns_none_for_the_null_block() -> None:
    state = pool()
    after, obs = step(state, CachePartialBlock(H1, 0, 2, 0, 4))
    assert obs.result is None
    assert after == state


def test_cache_partial_block_already_cached_emits_no_event() -> None:
    state = run(pool(), CachePartialBlock(H1, 1, 2, 0, 4))
    state = replace(state, events=())
    after, obs = step(state, CachePartialBlock(H1, 1, 2, 0, 4))
    assert obs.result == make_key(H1[1], 0)
    assert after == state


# --- get_cached_block -------------------------------------------------------------------


def test_get_cached_block_returns_earliest_duplicate_still_present() -> None:
    state = run(
        pool(),
        CacheFullBlocks(H1, (3,), 0, 1, 1),
        CacheFullBlocks(H1, (1,), 0, 1, 1),
    )
    assert state.cache[make_key(H1[0], 0)] == (3, 1)
    _, obs = step(state, GetCachedBlock(H1[0], (0,)))
    assert obs.result == (3,)
    state = run(state, EvictBlocks((3,)))
    _, obs = step(state, GetCachedBlock(H1[0], (0,)))
    assert obs.result == (1,)


def test_get_cached_block_is_all_or_nothing_over_groups() -> None:
    state = run(
        pool(),
        CacheFullBlocks(H1, (1,), 0, 1, 1, group_id=0),
        CacheFullBlocks(H1, (2,), 0, 1, 1, group_id=1),
    )
    after, hit = step(state, GetCachedBlock(H1[0], (1, 0)))
    assert hit.result == (2, 1)
    assert after == state
    _, miss = step(state, GetCachedBlock(H1[0], (0, 1, 2)))
    assert miss.result is None
    _, other = step(state, GetCachedBlock(H1[1], (0,)))
    assert other.result is None


# --- evict_blocks -----------------------------------------------------------------------


def test_evict_blocks_strips_keys_but_frees_and_moves_nothing() -> None:
    state = run(pool(), CacheFullBlocks(H1, (1, 2, 3), 0, 3, 1), FreeBlocks((1, 2)))
    state = replace(state, events=())
    after = run(state, EvictBlocks((2, 3, 2)))
    assert after.keys_of(2) == () and after.keys_of(3) == ()
    assert after.keys_of(1) == (make_key(H1[0], 0),)
    assert after.free_queue == state.free_queue
    assert after.ref_cnt == state.ref_cnt
    assert sorted(after.events) == sorted([BlockRemoved(H1[1], 0), BlockRemoved(H1[2], 0)])


# --- move_block_hashes ------------------------------------------------------------------


def test_move_block_hashes_repoints_primary_and_extras_without_events() -> None:
    state = run(
        pool(),
        CachePartialBlock(H1, 1, 2, 0, 4),
        CachePartialBlock(H1, 1, 2, 1, 4),
        CachePartialBlock(H1, 3, 2, 0, 4),  # a later duplicate of block 1's primary
    )
    k0, k1 = make_key(H1[1], 0), make_key(H1[1], 1)
    assert state.cache[k0] == (1, 3)
    events_before = state.events
    state = run(state, MoveBlockHashes(1, 2))
    assert state.keys_of(1) == ()
    assert state.primary[2] == PrimaryKey(k0, 2)
    assert state.extra[2] == frozenset({k1})
    assert state.cache[k0] == (3, 2)  # the moved entry is the newest duplicate
    assert state.cache[k1] == (2,)
    assert state.events == events_before
    _, obs = step(state, GetCachedBlock(H1[1], (0,)))
    assert obs.result == (3,)


def test_move_block_hashes_from_an_unkeyed_block_changes_nothing() -> None:
    state = pool()
    assert run(state, MoveBlockHashes(1, 2)) == state


# --- reset_prefix_cache -----------------------------------------------------------------


def test_reset_prefix_cache_refuses_while_a_block_is_held() -> None:
    state = run(pool(held=2), CacheFullBlocks(H1, (1, 2), 0, 2, 1), FreeBlocks((1,)))
    after, obs = step(state, ResetPrefixCache())
    assert obs.result is False
    assert after == state


def test_reset_prefix_cache_clears_keys_fires_watchers_sorted_and_emits_cleared() -> None:
    state = run(
        pool(),
        CacheFullBlocks(H1, (1, 2, 3), 0, 3, 1),
        UnpinBlocks((3,), "c"),
        FreeBlocks((2,)),
        UnpinBlocks((1,), "a"),
    )
    queue = state.free_queue
    state = replace(state, events=())
    state, obs = step(state, ResetPrefixCache())
    assert obs.result is True
    assert obs.fired == ((1, "a"), (3, "c"))
    assert state.watchers == {}
    assert state.cache == {}
    assert all(state.keys_of(b) == () for b in range(state.num_blocks))
    assert state.free_queue == queue
    assert state.events == (AllBlocksCleared(),)


# --- group ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("group_id", [-1, 2**32])
def test_out_of_range_group_id_is_a_contract_violation(group_id: int) -> None:
    # Regression: this used to leak OverflowError from keys.make_key instead of a rule.
    state = pool()
    for action in (
        CacheFullBlocks(H1, (1,), 0, 1, 1, group_id=group_id),
        CachePartialBlock(H1, 1, 1, group_id, 1),
        GetCachedBlock(H1[0], (0, group_id)),
    ):
        found = violation(state, action)
        assert found is not None and found.rule == "group-id-range"


def test_largest_group_id_fits_the_key() -> None:
    state = run(pool(), CacheFullBlocks(H1, (1,), 0, 1, 1, group_id=2**32 - 1))
    _, obs = step(state, GetCachedBlock(H1[0], (2**32 - 1,)))
    assert obs.result == (1,)
