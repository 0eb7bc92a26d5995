"""Which files of an SGLang release the suite runs, and the stand-ins they need.

``sglang==0.4.6.post5`` is a pure wheel. Four of its files run:
``srt/mem_cache/radix_cache.py`` (``RadixCache``), ``srt/mem_cache/memory_pool.py``
(``TokenToKVPoolAllocator``: page size 1, its free list a torch tensor),
``srt/mem_cache/paged_allocator.py`` (``PagedTokenToKVPoolAllocator``: page size > 1, a
tensor of free pages) and ``srt/mem_cache/base_prefix_cache.py`` (the abstract base). They
need torch (the CPU build serves: the ``sglang`` extra); everything else they import is a
stand-in that the pool never calls: triton's decorators (the kernels in
``memory_pool.py`` and ``paged_allocator.py`` are never launched: they need a GPU),
SGLang's ``utils`` helpers used at import, the attention layer and memory-saver classes
named in annotations and the scheduler's ``global_server_args_dict``. The KV-event classes
(``disaggregation/kv_events.py`` needs msgspec and zmq) are small records of ours with the
same fields, so a cache built with ``enable_kv_cache_events`` runs its own event code.
Nothing else of the package is loaded.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ...targets.releases.files import ReleaseFiles
from .loader import (
    MemorySaver,
    Placeholder,
    cached_root,
    env_flag_off,
    load_files,
    module_name,
    next_power_of_2,
    require_extra,
    require_files,
    triton_stand_ins,
    unchanged,
    version_from,
)

DEFAULT_VERSION = "0.4.6.post5"
#: The files, relative to the package folder.
RELATIVE = (
    "srt/mem_cache/base_prefix_cache.py",
    "srt/mem_cache/memory_pool.py",
    "srt/mem_cache/paged_allocator.py",
    "srt/mem_cache/radix_cache.py",
)


@dataclass(frozen=True)
class SglangRelease:
    #: ``sglang 0.4.6.post5``, ``sglang@PATH``.
    label: str
    origin: Path
    radix_cache: ModuleType
    memory_pool: ModuleType
    paged_allocator: ModuleType


@dataclass(frozen=True)
class StoredEvent:
    """``BlockStored`` as ``RadixCache`` makes it: one tree node's tokens."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None


@dataclass(frozen=True)
class RemovedEvent:
    """``BlockRemoved``: the hashes of tree nodes that left."""

    block_hashes: list[int]


@dataclass(frozen=True)
class ClearedEvent:
    """``AllBlocksCleared``: the tree was reset."""


def _stand_ins() -> tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]]:
    ours: dict[str, dict[str, object]] = {
        "sglang.srt.utils": {
            "debug_timing": unchanged,
            "get_compiler_backend": lambda: "inductor",
            "get_bool_env_var": env_flag_off,
            "is_cuda": lambda: False,
            "next_power_of_2": next_power_of_2,
        },
        "sglang.srt.layers.radix_attention": {"RadixAttention": Placeholder},
        "sglang.srt.torch_memory_saver_adapter": {"TorchMemorySaverAdapter": MemorySaver},
        "sglang.srt.disaggregation.kv_events": {
            "AllBlocksCleared": ClearedEvent,
            "BlockRemoved": RemovedEvent,
            "BlockStored": StoredEvent,
            "KVCacheEvent": Placeholder,
        },
        "sglang.srt.managers.schedule_batch": {"global_server_args_dict": {}},
    }
    outside = triton_stand_ins()
    if importlib.util.find_spec("psutil") is None:
        outside["psutil"] = {}
    return ours, outside


def load_tree(root: Path, label: str) -> SglangRelease:
    """The radix cache and allocator under ``root`` (which holds ``sglang/``)."""
    _require_extra()
    files = {module_name(rel): root / "sglang" / rel for rel in RELATIVE}
    require_files(root, files.values())
    ours, outside = _stand_ins()
    _prepare_torch_compile()
    modules = load_files(label, files, ours, outside)
    return SglangRelease(
        label,
        root,
        modules["sglang.srt.mem_cache.radix_cache"],
        modules["sglang.srt.mem_cache.memory_pool"],
        modules["sglang.srt.mem_cache.paged_allocator"],
    )


def _prepare_torch_compile() -> None:
    """``memory_pool.py`` decorates two helpers with ``torch.compile`` at import (they are
    never called here). The first ``torch.compile`` imports much of torch, which asks
    whether triton is installed: it must do so before the triton stand-in exists, so the
    same two decorations are made once here, on a function of ours."""
    import torch

    def nothing() -> None:
        return None

    torch.compile(nothing)
    torch.compile(dynamic=True, backend="inductor")(nothing)


def files_of() -> ReleaseFiles:
    return ReleaseFiles(
        "sglang",
        "sglang",
        frozenset(f"sglang/{rel}" for rel in RELATIVE),
        label="SGLang",
        engine="sglang",
    )


def load_release(version: str) -> SglangRelease:
    """``sglang==version``'s files, from the cache or downloaded into it once."""
    _require_extra()
    return load_tree(cached_root(files_of(), version), f"sglang {version}")


def _require_extra() -> None:
    """:class:`SglangUnavailable` naming the install line when torch or numpy is absent."""
    require_extra(
        ("torch", "numpy"),
        "SGLang's allocator keeps its free list in a torch tensor and its module imports numpy",
    )


def version_label(root: Path) -> str:
    """What a tree says it is (its ``version.py``)."""
    return version_from(root, ("version.py",))
