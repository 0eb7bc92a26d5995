"""The Z3 encoding and the executable spec must not drift: random action sequences run
through ``kvpool.spec.step`` and through the encoded transition relation (Z3 asked for the
state after each concrete action) agree on the contract and on every state, step by step."""

from __future__ import annotations

import random

import pytest
from kvpool.conformance.proofs.bmc import concrete_run, key_hash, pool_config
from kvpool.spec import (
    CacheFullBlocks,
    EvictBlocks,
    FreeBlocks,
    GetNewBlocks,
    ResetPrefixCache,
    Touch,
    initial_state,
    step,
    violation,
)
from kvpool.spec.actions import Action

BLOCKS, KEYS = 4, 2


def draw(rng: random.Random) -> Action:
    kind = rng.choice(
        ["get", "get", "free1", "free2", "touch1", "touch2", "cache", "cache", "evict", "reset"]
    )
    x, y = rng.randrange(BLOCKS), rng.randrange(BLOCKS)
    if kind == "get":
        return GetNewBlocks(rng.randrange(BLOCKS))
    if kind == "free1":
        return FreeBlocks((x,))
    if kind == "free2":
        return FreeBlocks((x, y))
    if kind == "touch1":
        return Touch((x,))
    if kind == "touch2":
        return Touch((x, y))
    if kind == "cache":
        # the null block is left out: the spec skips it, the bounded pool has no such step
        return CacheFullBlocks(
            (key_hash(rng.randint(1, KEYS)),), (rng.randrange(1, BLOCKS),), 0, 1, 1, 0
        )
    if kind == "evict":
        return EvictBlocks((x,))
    return ResetPrefixCache()


@pytest.mark.parametrize("seed", range(4))
def test_encoding_and_spec_agree_step_by_step(seed: int) -> None:
    rng = random.Random(seed)
    actions = [draw(rng) for _ in range(14)]
    encoded = concrete_run(BLOCKS, KEYS, actions)
    state = initial_state(pool_config(BLOCKS))
    key_ids = {key_hash(k) + bytes(4): k for k in range(1, KEYS + 1)}
    allowed_steps = 0
    for i, (action, got) in enumerate(zip(actions, encoded, strict=True), 1):
        where = f"step {i} {action}"
        refused = violation(state, action)
        assert got.allowed == (refused is None), f"{where}: contract differs ({refused})"
        if refused is None:
            allowed_steps += 1
            state, _ = step(state, action)
        assert got.ref_cnt[1:] == state.ref_cnt[1:], where
        assert got.free_queue == state.free_queue, where
        assert got.nfree == len(state.free_queue), where
        primary = {b: key_ids[p.key] for b, p in enumerate(state.primary) if p is not None}
        assert got.primary == primary, where
        cache = {key_ids[k]: frozenset(bs) for k, bs in state.cache.items()}
        assert got.cache == cache, where
    assert allowed_steps >= 4  # the sequence did something
