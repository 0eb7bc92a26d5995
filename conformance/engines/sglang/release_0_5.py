"""Which files of an SGLang release of the 0.5 generation the suite runs, and the stand-ins
they need: the radix cache's part, which the scheduler's loading (:mod:`.scheduler_release`,
for the engine machine's driver) widens.

From 0.5 on the memory cache is its own folder of small modules and the wheel is no longer
pure (it ships Rust and C++ extensions, none of which the radix cache needs). The files
that run, unchanged:

- ``srt/mem_cache/radix_cache.py`` (``RadixCache`` built from a ``CacheInitParams``,
  ``RadixKey``, ``TreeNode``), ``base_prefix_cache.py`` (the params and result records:
  ``MatchPrefixParams``, ``InsertParams``, ``EvictParams``, locks as ``TreeLock``
  receipts), ``cache_init_params.py``, ``evict_policy.py`` and ``utils.py`` (the eviction
  strategies, the node hash helpers);
- ``srt/mem_cache/allocator/`` (``token.py``: ``TokenToKVPoolAllocator``; ``paged.py``:
  ``PagedTokenToKVPoolAllocator`` with its torch paths ``alloc_extend_naive`` /
  ``alloc_decode_naive``, which SGLang itself runs where triton is not supported;
  ``base.py``, whose ``evict_to_free_tokens`` is the scheduler's eviction;
  ``page_interleave.py``, which ``common.py`` asks for the shard size);
- ``srt/mem_cache/common.py`` (the scheduler's calls into the cache: ``match_kv_cache``,
  ``checkpoint_kv_cache``, ``release_kv_cache``) and ``allocation.py`` (its allocation:
  ``alloc_for_extend``, ``alloc_for_decode``);
- the KV events: ``srt/mem_cache/events.py`` (``KVCacheEventRecorder``),
  ``srt/disaggregation/kv_events.py`` (the event records, msgspec structs) and the node
  hash ``srt/mem_cache/cpp_utils/native_hash.py``, which compiles the release's
  ``hash_binding.cpp`` with torch's extension builder on first use
  (``srt/utils/cpp_extension_loader.py``; needs a C++ compiler, ninja and OpenSSL's
  headers); the event records import msgspec, zmq and pydantic.

``srt/mem_cache/unified_cache/component_type.py`` (the ``ComponentType`` enum a request's
KV record is keyed by) runs too.

Three files too large to load are read for a few definitions only
(:mod:`.definitions`): ``ReqToTokenPool`` from ``srt/mem_cache/memory_pool.py`` (260 kB
of GPU pools), ``ReqKvInfo`` (a request's KV record) from ``srt/managers/schedule_batch.py``
and ``ceil_div``, ``ceil_align``, ``get_num_new_pages`` from ``srt/utils/common.py``
(180 kB of helpers).

Everything else the files import is a stand-in holding what is read at import or on the
paths that run: the platform queries answer "no GPU, no triton" (so the paged allocator
takes its torch paths), the server settings are their defaults (no speculative decoding,
``strip_thinking_cache`` off, ``SGLANG_RADIX_FORCE_MISS`` off), triton's decorators leave
the kernels as they are (never launched), and every other imported name is a placeholder
that raises if called.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

from ...targets.releases.files import ReleaseFiles
from .definitions import DefinitionsError, definitions_of
from .loader import (
    MemorySaver,
    Placeholder,
    SglangUnavailable,
    env_flag_off,
    load_files,
    module_name,
    next_power_of_2,
    require_extra,
    require_files,
    triton_stand_ins,
)

#: The modules that run whole, relative to the package folder.
MODULES = (
    "srt/disaggregation/kv_events.py",
    "srt/mem_cache/allocator/__init__.py",
    "srt/mem_cache/allocator/base.py",
    "srt/mem_cache/allocator/page_interleave.py",
    "srt/mem_cache/allocator/paged.py",
    "srt/mem_cache/allocator/token.py",
    "srt/mem_cache/allocation.py",
    "srt/mem_cache/base_prefix_cache.py",
    "srt/mem_cache/cache_init_params.py",
    "srt/mem_cache/common.py",
    "srt/mem_cache/cpp_utils/native_hash.py",
    "srt/mem_cache/events.py",
    "srt/mem_cache/evict_policy.py",
    "srt/mem_cache/radix_cache.py",
    "srt/mem_cache/unified_cache/component_type.py",
    "srt/mem_cache/utils.py",
    "srt/utils/cpp_extension_loader.py",
)
#: Files read for a few definitions (file -> names), in this order: a later file's
#: definitions may name an earlier one's (``ReqKvInfo`` calls ``ceil_align``).
DEFINED = {
    "srt/utils/common.py": ("ceil_div", "ceil_align", "get_num_new_pages"),
    "srt/mem_cache/memory_pool.py": ("ReqToTokenPool",),
    "srt/managers/schedule_batch.py": ("ReqKvInfo",),
}
#: Data files the modules read: the native hash's C++ source (compiled on first use).
DATA = ("srt/mem_cache/cpp_utils/hash_binding.cpp",)
#: Where a built wheel keeps its version (``__version__ = version = '0.5.23'``); a git
#: checkout has none (its ``version.py`` asks setuptools-scm).
VERSION_FILE = "_version.py"
#: What a tree of this generation has and 0.4.x's lacks.
MARKER = "srt/mem_cache/allocator/token.py"


class _Setting:
    """An ``envs.NAME`` of SGLang's ``environ.py`` at its default."""

    def __init__(self, value: object) -> None:
        self.value = value

    def get(self) -> object:
        return self.value


#: ``envs`` as the loaded files read it: each setting at SGLang's default.
ENVS = SimpleNamespace(
    SGLANG_RADIX_FORCE_MISS=_Setting(False),
    SGLANG_MOONCAKE_CUSTOM_MEM_POOL=_Setting(None),
    SGLANG_DEBUG_MEMORY_POOL=_Setting(False),
)
#: The server settings the paths that run read, at their defaults.
SPEC = SimpleNamespace(speculative_algorithm=None)
SERVING = SimpleNamespace(strip_thinking_cache=False)
PARALLEL = SimpleNamespace(dcp_enabled=False, pp_rank=0, attn_tp_rank=0, attn_cp_rank=0)
#: No triton on this platform: the paged allocator runs its torch paths.
PLATFORM = SimpleNamespace(capabilities=SimpleNamespace(supports_triton=False))


#: The packages whose imported names get stand-ins (SGLang's and its kernel library's).
OURS = ("sglang", "sgl_kernel")


def _no(*_: object) -> bool:
    return False


def _imported_names(source: str) -> dict[str, set[str]]:
    """``module -> names`` of every ``from sglang... import`` in ``source`` (at any depth:
    imports inside functions run when those functions do)."""
    names: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or node.module is None or node.level:
            continue
        if node.module.split(".")[0] in OURS:
            names.setdefault(node.module, set()).update(a.name for a in node.names)
    return names


def _given(
    torch_module: ModuleType, defined: dict[str, dict[str, object]]
) -> dict[str, dict[str, object]]:
    """The stand-ins that hold something real: settings, platform answers, and the
    definitions read out of the two large files."""
    helpers = defined["srt/utils/common.py"]
    return {
        "sglang.srt.environ": {"envs": ENVS},
        "sglang.srt.platforms": {"current_platform": PLATFORM},
        "sglang.srt.runtime_context": {
            "get_spec": lambda: SPEC,
            "get_serving": lambda: SERVING,
            "get_parallel": lambda: PARALLEL,
            "attention_backends": lambda: ("torch_native", "torch_native"),
        },
        "sglang.srt.utils": {
            "get_bool_env_var": env_flag_off,
            "get_num_new_pages": helpers["get_num_new_pages"],
            "is_cpu": _no,
            "is_cuda": _no,
            "is_hip": _no,
            "is_npu": _no,
            "is_xpu": _no,
            "next_power_of_2": next_power_of_2,
            "support_triton": _no,
        },
        "sglang.srt.utils.common": {
            "ceil_align": helpers["ceil_align"],
            "ceil_div": helpers["ceil_div"],
            "is_pin_memory_available": _no,
        },
        "sglang.srt.mem_cache.memory_pool": dict(defined["srt/mem_cache/memory_pool.py"]),
    }


def _stand_ins(
    root: Path, modules: dict[str, Path], given: dict[str, dict[str, object]]
) -> dict[str, dict[str, object]]:
    """Every module the loaded files import from the package that is not one of them:
    ``given``'s attributes, and a placeholder for each other name imported from it."""
    wanted: dict[str, set[str]] = {}
    for path in modules.values():
        for module, names in _imported_names(path.read_text(encoding="utf-8")).items():
            wanted.setdefault(module, set()).update(names)
    stand_ins: dict[str, dict[str, object]] = {}
    for module, names in wanted.items():
        if module in modules:
            continue
        attributes: dict[str, object] = {n: Placeholder for n in names if n != "*"}
        attributes.update(given.get(module, {}))
        stand_ins[module] = attributes
    for module, attributes in given.items():
        stand_ins.setdefault(module, dict(attributes))
    return stand_ins


def is_generation(root: Path) -> bool:
    """Whether the tree under ``root`` (which holds ``sglang/``) is of the 0.5 layout."""
    return (root / "sglang" / MARKER).is_file()


@dataclass(frozen=True)
class Widening:
    """What a loader running more of the release than the radix cache's files adds to
    :func:`load_files_of`'s stand-ins (empty: the radix cache's own)."""

    #: Given attributes by module, over :func:`_given`'s (a module mapped to ``None`` is
    #: taken out of them: it is loaded whole instead).
    given: Mapping[str, Mapping[str, object] | None] = dataclasses.field(default_factory=dict)
    #: Third-party modules imported but never run, as empty stand-ins.
    absent: tuple[str, ...] = ()
    #: More names the definitions read out of files may name when they run.
    namespace: Mapping[str, object] = dataclasses.field(default_factory=dict)
    #: Whether each placeholder is a class of its own (a class deriving from several
    #: imported names needs distinct bases).
    distinct: bool = False


def load_files_of(
    root: Path,
    label: str,
    modules_wanted: tuple[str, ...],
    defined_wanted: Mapping[str, tuple[str, ...]],
    widening: Widening,
) -> tuple[dict[str, ModuleType], dict[str, dict[str, object]]]:
    """``modules_wanted`` of the tree under ``root`` loaded whole, and ``defined_wanted``'s
    definitions read out of their files, with the stand-ins the radix cache's files need
    widened by ``widening``: the loaded modules by name, the definitions by file."""
    _require_extra()
    package = root / "sglang"
    wanted = [*modules_wanted, *defined_wanted, *DATA]
    require_files(root, (package / rel for rel in wanted), " of the 0.5 layout")
    import numpy
    import torch

    # what the definitions' bodies name when they run (their annotations are strings)
    namespace: dict[str, object] = {
        "dataclasses": dataclasses,
        "torch": torch,
        "TorchMemorySaverAdapter": MemorySaver,
        "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
        "np": numpy,
        "is_pin_memory_available": _no,
        "Enum": enum.Enum,
        "IntEnum": enum.IntEnum,
        "auto": enum.auto,
        "total_ordering": functools.total_ordering,
    }
    namespace.update(widening.namespace)
    defined: dict[str, dict[str, object]] = {}
    try:
        for rel, names in defined_wanted.items():
            defined[rel] = definitions_of(package / rel, names, namespace)
            namespace.update(defined[rel])
    except DefinitionsError as exc:
        raise SglangUnavailable(f"{label}: {exc}") from exc
    modules = {module_name(rel): package / rel for rel in modules_wanted}
    given = _given(torch, defined)
    for rel, found in defined.items():  # a definition read out of a file stands in for it
        given.setdefault(module_name(rel), {}).update(found)
    for module, attributes in widening.given.items():
        if attributes is None:
            given.pop(module, None)
        else:
            given[module] = {**given.get(module, {}), **attributes}
    stand_ins = _stand_ins(root, modules, given)
    if widening.distinct:
        for attributes in stand_ins.values():
            for name, value in list(attributes.items()):
                if value is Placeholder:
                    attributes[name] = type(name, (Placeholder,), {})
    outside = {**triton_stand_ins(), "sgl_kernel": {}}
    outside.update({name: {} for name in widening.absent})
    return load_files(label, modules, stand_ins, outside), defined


def files_of() -> ReleaseFiles:
    members = frozenset(f"sglang/{rel}" for rel in (*MODULES, *DEFINED, *DATA, VERSION_FILE))
    return ReleaseFiles("sglang", "sglang", members, label="SGLang", engine="sglang")


def _require_extra() -> None:
    require_extra(
        ("torch", "numpy", "msgspec", "pydantic"),
        "SGLang's allocators keep their free lists in torch tensors and its event records "
        "import pydantic",
    )
