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
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..isolated_files import IsolatedLoadError, load_isolated
from ..releases.files import ReleaseFiles, ReleaseFilesError, cached_files

INSTALL_LINE = "pip install 'kvpool-spec[sglang]'"
DEFAULT_VERSION = "0.4.6.post5"
#: The files, relative to the package folder.
RELATIVE = (
    "srt/mem_cache/base_prefix_cache.py",
    "srt/mem_cache/memory_pool.py",
    "srt/mem_cache/paged_allocator.py",
    "srt/mem_cache/radix_cache.py",
)


class SglangUnavailable(Exception):
    """The radix cache cannot be loaded; the message says what to install or fix."""


@dataclass(frozen=True)
class SglangRelease:
    #: ``sglang 0.4.6.post5``, ``sglang@PATH``.
    label: str
    origin: Path
    radix_cache: ModuleType
    memory_pool: ModuleType
    paged_allocator: ModuleType


class _Placeholder:
    """A class a pool file names (annotations, base classes) but the pool never builds."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("a stand-in of kvpool's SGLang loader was called")


class MemorySaver:
    """Stand-in for ``TorchMemorySaverAdapter`` as ``ReqToTokenPool`` uses it, disabled:
    ``create(enable=False)`` and a ``region()`` that changes nothing."""

    @classmethod
    def create(cls, enable: bool) -> MemorySaver:
        if enable:
            raise RuntimeError("kvpool's SGLang loader has no torch memory saver")
        return cls()

    @contextmanager
    def region(self) -> Iterator[None]:
        yield


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


def _unchanged(fn: Callable[..., Any] | None = None, **_: object) -> Any:
    """A decorator that leaves the function as it is (``triton.jit``, ``debug_timing``)."""
    if fn is None:
        return _unchanged
    return fn


def _stand_ins() -> tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]]:
    ours: dict[str, dict[str, object]] = {
        "sglang.srt.utils": {
            "debug_timing": _unchanged,
            "get_compiler_backend": lambda: "inductor",
            "get_bool_env_var": lambda name, default="false": False,
            "is_cuda": lambda: False,
            "next_power_of_2": lambda n: 1 << max(0, int(n) - 1).bit_length(),
        },
        "sglang.srt.layers.radix_attention": {"RadixAttention": _Placeholder},
        "sglang.srt.torch_memory_saver_adapter": {"TorchMemorySaverAdapter": MemorySaver},
        "sglang.srt.disaggregation.kv_events": {
            "AllBlocksCleared": ClearedEvent,
            "BlockRemoved": RemovedEvent,
            "BlockStored": StoredEvent,
            "KVCacheEvent": _Placeholder,
        },
        "sglang.srt.managers.schedule_batch": {"global_server_args_dict": {}},
    }
    outside: dict[str, dict[str, object]] = {
        "triton": {"jit": _unchanged, "cdiv": lambda a, b: -(-a // b)},
        "triton.language": {"constexpr": int},
    }
    if importlib.util.find_spec("psutil") is None:
        outside["psutil"] = {}
    return ours, outside


def load_tree(root: Path, label: str) -> SglangRelease:
    """The radix cache and allocator under ``root`` (which holds ``sglang/``)."""
    _require_extra()
    files = {
        f"sglang.{rel.removesuffix('.py').replace('/', '.')}": root / "sglang" / rel
        for rel in RELATIVE
    }
    absent = [str(p) for p in files.values() if not p.is_file()]
    if absent:
        raise SglangUnavailable(
            f"{root} lacks {', '.join(absent)}: not an SGLang checkout's python/ folder or "
            "an unpacked sglang wheel"
        )
    ours, outside = _stand_ins()
    _prepare_torch_compile()
    try:
        modules = load_isolated("sglang", files, ours, outside=outside, allow=frozenset({"torch"}))
    except IsolatedLoadError as exc:
        raise SglangUnavailable(f"{label}: {exc}") from exc
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
    try:
        root = cached_files(files_of(), version)
    except ReleaseFilesError as exc:
        raise SglangUnavailable(str(exc)) from exc
    return load_tree(root, f"sglang {version}")


def _require_extra() -> None:
    """:class:`SglangUnavailable` naming the install line when torch or numpy is absent."""
    missing = [m for m in ("torch", "numpy") if not _importable(m)]
    if missing:
        raise SglangUnavailable(
            f"SGLang's allocator keeps its free list in a torch tensor and its module "
            f"imports numpy; {' and '.join(missing)} not installed: {INSTALL_LINE}"
        )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # a module set to None in sys.modules
        return False


def version_label(root: Path) -> str:
    """What a tree says it is (its ``version.py`` or a dist-info beside it)."""
    version_file = root / "sglang" / "version.py"
    if version_file.is_file():
        found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version_file.read_text("utf-8"))
        if found:
            return f"sglang {found.group(1)} at {root}"
    return f"sglang at {root}"
