"""The two configs LMDeploy's ``Scheduler`` is built from, as the suite fills them.

``lmdeploy/pytorch/config.py`` imports torch and the engine's whole configuration, so the
``SchedulerConfig`` and ``CacheConfig`` the scheduler reads are given as these dataclasses
instead: the fields the paging files of 0.16.0 and 0.18.0 read (``scheduler_config.X``,
``cache_config.X`` in ``lmdeploy/pytorch/paging/``), under the release's names and at its
defaults where the suite has no reason to differ. The engine builds them from
``PytorchEngineConfig``; nothing else of that file is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: LMDeploy's default prefill token budget (``CacheConfig.max_prefill_token_num``).
PREFILL_TOKEN_BUDGET = 8192


@dataclass(frozen=True)
class SchedulerLimits:
    """``SchedulerConfig``: ``max_batches`` sequences per batch, recompute eviction, and
    ``prefill_interval``, which is also the tokens a scheduled sequence gets reserved
    beyond its end (``ARStrategy.get_prealloc_size``)."""

    max_batches: int = 1
    max_session_len: int = 1 << 20
    eviction_type: str = "recompute"
    prefill_interval: int = 16


@dataclass(frozen=True)
class CacheLimits:
    """``CacheConfig``: the pool's blocks, the prefix cache on or off, full attention
    only, no recurrent state, no CPU blocks, no KV transfer."""

    block_size: int
    num_gpu_blocks: int
    enable_prefix_caching: bool
    max_batches: int = 1
    num_cpu_blocks: int = 0
    window_size: int = -1
    num_reserved_gpu_blocks: int = 0
    max_prefill_token_num: int = PREFILL_TOKEN_BUDGET
    num_state_caches: int | None = None
    prefix_cache_state_budget: int = 0
    states_shapes: list[tuple[int, ...]] = field(default_factory=list)
    kv_transfer_config: None = None
