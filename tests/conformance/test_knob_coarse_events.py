"""Knob ``coarse_events_name_fine_hash``: vLLM 0.12-0.23 key a block spanning several hash
blocks by their hashes concatenated and publish event hashes as 64-bit integers by default;
the integer of a concatenation is the integer of its last fine hash, so a consumer cannot
tell that coarse key from the fine one. The profiles of those releases say so, and the
events level judges their streams as such a consumer reads them: the spec's events (which
stay the pool's, whole keys), the pool's keys and the consumer's answers are all read with
a coarse key named by its last fine hash."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kvpool.conformance.engines.vllm.entry import load_vllm
from kvpool.conformance.engines.vllm.target import INT_HASHES_SETTING
from kvpool.conformance.machines.pool.levels import level_for
from kvpool.conformance.machines.pool.lockstep import replay
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.targets.loading import described
from kvpool.spec import (
    SEED,
    BlockStored,
    CacheFullBlocks,
    EvictBlocks,
    GetNewBlocks,
    PoolConfig,
    TakeEvents,
    initial_state,
    pool_residency,
    run,
    step,
)
from kvpool.spec.consumer import served_blocks
from kvpool.spec.events import as_consumers_read
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.profile import profile_for_version

H = request_block_hashes([1, 2, 3, 4], 1)
#: One block keyed by H[0] and H[1] concatenated, and the same prefix in blocks of one hash
#: block (H[0], H[1]); then the fine H[1] is evicted, leaving the coarse key whose integer
#: is the same.
TWO_LAYOUTS = (
    GetNewBlocks(3),
    CacheFullBlocks(H[:2], (1,), 0, 1, 2),
    CacheFullBlocks(H[:2], (2, 3), 0, 2, 1),
    EvictBlocks((3,)),
)
EVENTS = level_for("events", "count")
CONFIG = PoolConfig(4, True, 1, True)


def test_consumers_read_a_coarse_key_by_its_last_fine_hash_where_the_knob_says() -> None:
    concatenating = replace(SEED, name="concatenating", coarse_hash_concatenates=True)
    for knob in (False, True):
        profile = replace(concatenating, coarse_events_name_fine_hash=knob)
        s = run(initial_state(CONFIG, profile), GetNewBlocks(1))
        s, seen = step(run(s, CacheFullBlocks(H[:2], (1,), 0, 1, 2)), TakeEvents())
        assert s.keys_of(1)[0].startswith(H[0] + H[1])  # the pool's key: the concatenation
        assert isinstance(seen.result, tuple) and isinstance(seen.result[0], BlockStored)
        assert seen.result[0].block_hashes == (H[0] + H[1],)  # what the pool emits
        named = H[1] if knob else H[0] + H[1]
        read = as_consumers_read(seen.result, knob)
        assert isinstance(read[0], BlockStored) and read[0].block_hashes == (named,)
        assert pool_residency(s) == {(0, named): 1}
        assert served_blocks(s, [named], 0) == 1


@pytest.fixture
def release_18() -> Iterator[Any]:
    release = load_vllm(described("vllm==0.18.0"))
    assert release.release is not None
    envs = release.release.modules["vllm.envs"]
    setattr(envs, INT_HASHES_SETTING, True)  # as released: integers
    yield release
    setattr(envs, INT_HASHES_SETTING, False)


def test_its_stream_is_judged_by_the_integers_it_publishes(release_18: Any) -> None:
    factory = release_18.target_factory("vllm==0.18.0")
    profile = profile_for_version("0.18.0")
    assert profile.coarse_events_name_fine_hash
    assert replay(factory, profile, EVENTS, CONFIG, TWO_LAYOUTS, True)[0] is None
    # without the knob the adapter reads the removal's integer as the coarse key it also
    # names, which no consumer can know: the run then judges the stream against that key
    wrong, _ = replay(
        factory, replace(profile, coarse_events_name_fine_hash=False), EVENTS, CONFIG,
        TWO_LAYOUTS, True,
    )  # fmt: skip
    assert wrong is not None and "property 'events-replay-index' broken" in wrong


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_coarse_block_published_under_its_first_fine_hash_is_caught(
    release_18: Any, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # a planted publisher fault: a concatenated key's integer taken from its first fine
    # hash, which a consumer reads as another prefix's block
    block_pool = release_18.release.modules["vllm.v1.core.block_pool"]
    convert = block_pool.maybe_convert_block_hash

    def first_fine(block_hash: bytes) -> object:
        return convert(block_hash[:32] if len(block_hash) > 32 else block_hash)

    monkeypatch.setattr(block_pool, "maybe_convert_block_hash", first_fine)
    factory = release_18.target_factory("vllm==0.18.0")
    profile = profile_for_version("0.18.0")
    result = run_level(factory, profile, EVENTS, max_examples=60, steps=30, seed=seed, max_blocks=8)
    assert result.failure is not None
    assert "property 'events-" in result.failure.message
