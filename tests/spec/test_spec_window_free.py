"""``window_unkeyed_free_first``: a sliding-window group frees its keyed blocks as usual,
then those without a key with ``evict_first`` (vLLM 0.23's ``SlidingWindowManager``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kvpool.spec import SEED, PoolConfig, PoolState, get_profile, initial_state
from kvpool.spec.manager import (
    Admit,
    Compute,
    Finish,
    KVGroup,
    ManagerConfig,
    ManagerResult,
    ManagerState,
    RequestAction,
    initial_manager_state,
    manager_step,
)
from kvpool.spec.profile import ProfileFileError

WINDOW = KVGroup(sliding_window_blocks=2)
#: A pool that frees blocks without a key to the back, as vLLM 0.23's does (so only the
#: manager's evict_first can send one to the front).
BACK = replace(SEED, name="unkeyed-to-back", unkeyed_free_to_front=False)


class System:
    """The spec's manager over a pool freeing blocks without a key to the back."""

    def __init__(self, group: KVGroup, free_first: bool) -> None:
        config = PoolConfig(6, hash_block_size=2)
        self.pool: PoolState = initial_state(config, BACK)
        self.manager: ManagerState = initial_manager_state(
            ManagerConfig(2, (group,)), config, window_unkeyed_free_first=free_first
        )

    def __call__(self, action: RequestAction) -> ManagerResult:
        self.pool, self.manager, result = manager_step(self.pool, self.manager, action)
        return result


def finished_queue(group: KVGroup, free_first: bool) -> tuple[int, ...]:
    system = System(group, free_first)
    system(Admit("a", (1, 2, 3)))  # blocks 1 (full) and 2 (one token)
    system(Compute("a"))  # block 1 is keyed, block 2 is not
    system(Finish("a"))
    return system.pool.free_queue


def test_a_window_frees_its_scratch_block_to_the_front_and_its_keyed_block_to_the_back() -> None:
    assert finished_queue(WINDOW, free_first=True) == (2, 3, 4, 5, 1)


def test_without_the_knob_both_go_to_the_back_tail_first() -> None:
    assert finished_queue(WINDOW, free_first=False) == (3, 4, 5, 2, 1)


def test_a_full_attention_group_is_not_split() -> None:
    assert finished_queue(KVGroup(), free_first=True) == (3, 4, 5, 2, 1)


def test_a_profile_with_the_knob_needs_evict_first(tmp_path: Path) -> None:
    path = tmp_path / "no-prepend.toml"
    path.write_text(
        'base = "vllm-0.24"\ndescription = "a manager that prepends over a pool that cannot"\n'
        '[knobs.window_unkeyed_free_first]\nvalue = true\nreason = "planted"\n',
        encoding="utf-8",
    )
    with pytest.raises(ProfileFileError, match="has_evict_first"):
        get_profile(str(path))
