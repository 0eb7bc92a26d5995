"""vLLM's own ``KVCacheManager`` built for a drawn setup: the ``KVCacheConfig`` the suite
writes (one ``FullAttentionSpec`` per full-attention group, one ``SlidingWindowSpec`` per
sliding-window group) and the spec registry told which manager serves each spec."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ...machines.requests.target import RequestSetup

#: The longest request the manager is told to expect (the manager allocates no table past
#: it): beyond what the suite draws and the bench's long prompts (128k tokens and output).
MAX_MODEL_LEN = 1 << 18
#: The layer shape written into every group's spec (never used: no KV memory is sized).
NUM_KV_HEADS = HEAD_SIZE = 1
#: Stands in for a ``torch.dtype``: the manager only compares dtypes, never sizes them.
DTYPE = "float16"


def sliding_window_tokens(setup: RequestSetup, group: int) -> int:
    """vLLM's ``sliding_window`` (tokens) for the spec's group ``group``: the same token
    count (vLLM's rule, ``cdiv(sliding_window - 1, block_size)`` blocks for a hit and the
    blocks before token ``num_computed_tokens - sliding_window + 1`` skipped, is the
    spec's)."""
    return setup.manager.window_tokens(group)


#: A release's modules by name (isolated or installed).
Modules = Mapping[str, ModuleType]


def kv_cache_config(modules: Modules, setup: RequestSetup, distinct_heads: bool) -> Any:
    """The release's ``KVCacheConfig`` for ``setup``: one group per spec group (each with
    a head size of its own when ``distinct_heads``)."""
    interface = modules["vllm.v1.kv_cache_interface"]
    bs = setup.manager.block_size
    groups = []
    for g, group in enumerate(setup.manager.groups):
        head = HEAD_SIZE + g if distinct_heads else HEAD_SIZE
        shape: dict[str, Any] = {"block_size": bs, "num_kv_heads": NUM_KV_HEADS, "head_size": head}
        if "use_mla" in {f.name for f in dataclasses.fields(interface.AttentionSpec)}:
            shape["use_mla"] = False  # a field without a default before 0.11
        if group.is_sliding:
            window = sliding_window_tokens(setup, g)
            spec = interface.SlidingWindowSpec(**shape, dtype=DTYPE, sliding_window=window)
        else:
            spec = interface.FullAttentionSpec(**shape, dtype=DTYPE)
        groups.append(interface.KVCacheGroupSpec(layer_names=[f"layer.{g}"], kv_cache_spec=spec))
    return interface.KVCacheConfig(
        num_blocks=setup.pool.num_gpu_blocks, kv_cache_tensors=[], kv_cache_groups=groups
    )


def register_managers(modules: Modules) -> None:
    """Tell the release's spec registry which single-type manager serves each spec the
    suite writes (vLLM registers every spec at startup, through its platform plugin, which
    is not loaded)."""
    registry = modules.get("vllm.v1.kv_cache_spec_registry")
    if registry is None:
        return
    interface = modules["vllm.v1.kv_cache_interface"]
    managers = modules["vllm.v1.core.single_type_kv_cache_manager"]
    for spec, manager in (
        (interface.FullAttentionSpec, managers.FullAttentionManager),
        (interface.SlidingWindowSpec, managers.SlidingWindowManager),
    ):
        registry.KVCacheSpecRegistry.register(spec, manager, uniform_type_base_spec=spec)


def build_manager(modules: Modules, setup: RequestSetup, distinct_heads: bool) -> Any:
    """The release's ``KVCacheManager`` for ``setup`` (``hash_block_size`` already fitted)."""
    register_managers(modules)
    module = modules["vllm.v1.core.kv_cache_manager"]
    bs = setup.manager.block_size
    arguments: dict[str, Any] = {
        "max_model_len": MAX_MODEL_LEN,
        "enable_caching": setup.pool.enable_caching,
        "enable_kv_cache_events": setup.pool.enable_kv_cache_events,
    }
    taken = inspect.signature(module.KVCacheManager).parameters
    if "scheduler_block_size" in taken:
        arguments["scheduler_block_size"] = bs
    if "hash_block_size" in taken:
        arguments["hash_block_size"] = setup.pool.hash_block_size
    config = kv_cache_config(modules, setup, distinct_heads)
    return module.KVCacheManager(config, **arguments)
