"""Pools for the tests of honest runs: each has one planted fault, passed to
``kvpool conform`` as ``honest_pools:NAME`` or built directly."""

from __future__ import annotations

from kvpool.conformance.engines.builtin.spec_target import SpecTarget
from kvpool.spec import Action, GetNumFreeBlocks, Observation
from tiny_pool import Block, TinyPool  # pytest puts this folder on sys.path


class TouchForgetsItsCount(TinyPool):
    """``touch`` takes no reference: a held block touched is freed one call too early."""

    def touch(self, blocks: list[Block]) -> None:
        return None


class NullCountedOnFree(TinyPool):
    """Freeing the null block counts it down, as vLLM 0.10 to 0.32 do (0.33 skips it)."""

    def free_blocks(self, blocks: list[Block]) -> None:
        for block in blocks:
            if block.is_null:
                block.ref_cnt -= 1
        super().free_blocks(blocks)


class OnlyAWrongFreeCount(SpecTarget):
    """Offers nothing but ``get_num_free_blocks``, and answers it wrong: every test case
    that draws an action runs into the same finding, so after it is found every later test
    case is rejected."""

    name = "only-a-wrong-free-count"
    operations = frozenset({"get_num_free_blocks"})

    def apply(self, action: Action) -> Observation:
        observation = super().apply(action)
        if isinstance(action, GetNumFreeBlocks):
            assert isinstance(observation.result, int)
            return Observation(observation.result + 1)
        return observation
