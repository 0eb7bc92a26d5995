"""Random valid action sequences keep every invariant; refused actions agree with violation()."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kvpool.spec import (
    CacheFullBlocks,
    CachePartialBlock,
    ContractViolation,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    PoolConfig,
    PoolState,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
    broken_invariants,
    initial_state,
    step,
    violation,
)
from kvpool.spec.actions import Action
from kvpool.spec.hashing import request_block_hashes

# Prompts sharing prefixes, so hits and duplicate keys are common.
PROMPTS = ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 0, 0])
HASHES = {hbs: [request_block_hashes(p, hbs) for p in PROMPTS] for hbs in (1, 2)}

configs = st.builds(
    PoolConfig,
    num_gpu_blocks=st.integers(1, 7),
    enable_caching=st.booleans(),
    hash_block_size=st.sampled_from((1, 2)),
    enable_kv_cache_events=st.booleans(),
    peer_blocks=st.sampled_from((0, 3)),
)


def held_blocks(state: PoolState) -> list[int]:
    return [b for b in range(1, state.num_blocks) if state.ref_cnt[b] >= 1]


@st.composite
def actions(draw: st.DrawFn, state: PoolState) -> Action:
    """A likely-valid action for ``state`` (the caller filters with ``violation``)."""
    hbs = state.config.hash_block_size
    held = held_blocks(state)
    some_held = st.lists(st.sampled_from([0, *held]), max_size=4)
    any_block = st.integers(0, state.num_blocks - 1)
    hashes = tuple(draw(st.sampled_from(HASHES[hbs])))
    group = draw(st.integers(0, 1))
    kind = draw(st.integers(0, 14))
    if kind == 0:
        return GetNewBlocks(draw(st.integers(0, len(state.free_queue))))
    if kind == 1:
        foreign: list[int] = []
        if state.peer is not None:
            peer_held = held_blocks(state.peer)
            if peer_held:
                foreign = draw(st.lists(st.sampled_from(peer_held), max_size=2, unique=True))
        return FreeBlocks(
            tuple(draw(some_held)), evict_first=draw(st.booleans()), foreign=tuple(foreign)
        )
    if kind == 2:
        hittable = [
            b
            for b in range(state.num_blocks)
            if b == 0 or state.keys_of(b) or state.ref_cnt[b] >= 1
        ]
        return Touch(tuple(draw(st.lists(st.sampled_from(hittable), max_size=3))))
    if kind == 3:
        return UnpinBlocks(
            tuple(draw(st.lists(st.sampled_from(held or [1]), max_size=2))),
            draw(st.sampled_from(("a", "b"))),
        )
    if kind == 4:
        block_size = hbs * draw(st.integers(1, 2))
        blocks = tuple(draw(st.lists(st.sampled_from([0, *held]), max_size=4)))
        limit = min(len(blocks), len(hashes) // (block_size // hbs))
        nf = draw(st.integers(0, limit))
        nc = draw(st.integers(0, nf))
        mask = None
        if draw(st.booleans()):
            mask = tuple(draw(st.lists(st.booleans(), min_size=nf - nc, max_size=nf - nc)))
        return CacheFullBlocks(hashes, blocks, nc, nf, block_size, group, mask)
    if kind == 5:
        return CachePartialBlock(
            hashes,
            draw(st.sampled_from([0, *held])),
            hbs * draw(st.integers(1, len(hashes))),
            group,
            hbs * draw(st.integers(1, 4)),
            draw(st.booleans()),
        )
    if kind == 6:
        return GetCachedBlock(
            draw(st.sampled_from(hashes)), (group, *draw(st.sampled_from(((), (1 - group,)))))
        )
    if kind == 7:
        return EvictBlocks(tuple(draw(st.lists(any_block, max_size=2))))
    if kind == 8:
        return MoveBlockHashes(draw(any_block), draw(any_block))
    if kind == 9:
        return ResetPrefixCache()
    if kind == 10:
        return IsBlockWritable(draw(any_block))
    if kind == 11:
        return GetUsage()
    if kind == 12:
        return GetNumFreeBlocks()
    if kind == 13:
        return TakeEvents()
    return PeerGetNewBlocks(draw(st.integers(0, 2)))


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(config=configs, data=st.data())
def test_random_valid_sequences_keep_every_invariant(
    config: PoolConfig, data: st.DataObject
) -> None:
    state = initial_state(config)
    assert broken_invariants(state) == []
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        action = data.draw(actions(state), label="action")
        problem = violation(state, action)
        event(f"{action.operation}: {'refused' if problem else 'valid'}")
        if problem is not None:
            with pytest.raises(ContractViolation) as info:
                step(state, action)
            assert info.value.rule == problem.rule
            continue
        before = state
        state, obs = step(state, action)
        assert broken_invariants(state) == [], (action, broken_invariants(state))
        if isinstance(action, GetNewBlocks):
            # invariant 6: a block handed out again has lost every key first
            assert obs.result == before.free_queue[: action.num_blocks]
            assert isinstance(obs.result, tuple)
            for b in obs.result:
                assert state.keys_of(b) == ()
                assert state.ref_cnt[b] == 1
                assert b != 0
        if isinstance(action, ResetPrefixCache) and obs.result:
            assert state.cache == {}
