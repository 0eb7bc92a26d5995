"""The scheduler of route-check's workload on an engine that runs whole requests.

Dynamo's mocker and SGLang's stream are sent one request at a time, each run to its
end by the engine itself; the workload's request actions (admissions, growth,
preemptions, finishes, resets) still need answers. :class:`Planner` is the spec's manager
answering them, as the target's manager does on vLLM's streams; the engine is sent each
prompt the planner admits.
"""

from __future__ import annotations

from kvpool.spec import PoolConfig, Profile, initial_state
from kvpool.spec.manager import ManagerConfig, ManagerResult, RequestAction
from kvpool.spec.manager.state import initial_manager_state
from kvpool.spec.manager.step import manager_step


class Planner:
    """The workload's scheduler: the spec's manager under ``profile``, with ``blocks`` of
    ``block_size`` tokens."""

    def __init__(self, block_size: int, blocks: int, profile: Profile) -> None:
        config = PoolConfig(blocks, hash_block_size=block_size)
        self.pool = initial_state(config, profile)
        self.state = initial_manager_state(
            ManagerConfig(block_size),
            config,
            profile.key_attributes,
            window_unkeyed_free_first=profile.window_unkeyed_free_first,
        )

    def apply(self, action: RequestAction) -> ManagerResult:
        self.pool, self.state, result = manager_step(self.pool, self.state, action)
        return result
