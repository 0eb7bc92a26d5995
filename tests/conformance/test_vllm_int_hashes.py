"""Event hashes published as 64-bit integers (vLLM's default), for releases that key a
block spanning several hash blocks by their hashes concatenated (0.12-0.23): the integer
of such a key is the integer of its last fine hash, and must be read back as the key the
pool registered, not as that fine hash."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kvpool.conformance.engines.vllm.entry import load_vllm
from kvpool.conformance.engines.vllm.target import INT_HASHES_SETTING
from kvpool.conformance.engines.vllm_api.int_hashes import IntHashes, int_hash
from kvpool.conformance.machines.pool.levels import level_for
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.targets.loading import described
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.profile import profile_for_version

FINE = request_block_hashes([1, 2, 3, 4], 1)


def test_a_concatenated_hash_shares_the_integer_of_its_last_fine_hash() -> None:
    coarse = FINE[0] + FINE[1]
    assert int_hash(coarse) == int_hash(FINE[1])
    reader = IntHashes()
    reader.remember(FINE)
    reader.remember_coarse(2, [coarse])
    assert reader.bytes_of(int_hash(coarse), block_size=2) == coarse  # a stored coarse block
    assert reader.bytes_of(int_hash(FINE[1]), block_size=1) == FINE[1]  # a stored fine block
    assert reader.bytes_of(int_hash(coarse)) == coarse  # a removal: the key the pool registered
    assert reader.bytes_of(int_hash(FINE[2])) == FINE[2]


def events_run(version: str, int_hashes: bool, as_consumers_read: bool = True) -> Any:
    """The events level on ``version``; ``as_consumers_read``: under its profile, which
    names a coarse key by its last fine hash as a consumer of integers must
    (``coarse_events_name_fine_hash``), else with every hash read back exactly."""
    release = load_vllm(described(f"vllm=={version}"))
    assert release.release is not None
    setattr(release.release.modules["vllm.envs"], INT_HASHES_SETTING, int_hashes)
    factory = release.target_factory(f"vllm=={version}")
    level = level_for("events", "count")
    profile = profile_for_version(version)
    if not as_consumers_read:
        profile = replace(profile, coarse_events_name_fine_hash=False)
    return run_level(factory, profile, level, max_examples=60, steps=30, seed=1, max_blocks=8)


@pytest.mark.parametrize("version", ["0.18.0", "0.23.0"])
@pytest.mark.parametrize("as_consumers_read", [True, False])
def test_int_hashes_are_judged_as_the_bytes_they_stand_for(
    version: str, as_consumers_read: bool
) -> None:
    by_bytes = events_run(version, False, as_consumers_read)
    by_ints = events_run(version, True, as_consumers_read)
    assert by_bytes.failure is None, by_bytes.failure
    assert by_ints.failure is None, by_ints.failure
    assert by_ints.record.steps == by_bytes.record.steps


def test_reading_a_coarse_integer_as_its_fine_hash_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # read back exactly (the knob off), the reading before the fix: every integer maps
    # back to the fine hash it shares (what the knob states a consumer reads)
    monkeypatch.setattr(IntHashes, "remember_blocks", lambda *_: None)
    result = events_run("0.23.0", True, as_consumers_read=False)
    assert result.failure is not None
    assert "property 'events-replay-index' broken" in result.failure.message
