"""SGLang 0.4's scheduler files, loaded from the release (a pure wheel) for the engine
machine's driver (:mod:`.driver_0_4`).

These run whole, unchanged:

- the radix cache's files (as :mod:`.release` loads them): ``srt/mem_cache/
  base_prefix_cache.py``, ``memory_pool.py`` (``ReqToTokenPool``,
  ``TokenToKVPoolAllocator``), ``paged_allocator.py``, ``radix_cache.py``, and
  ``chunk_cache.py`` (the cache without prefix reuse);
- ``srt/managers/scheduler.py`` (the ``Scheduler`` class: its methods run on an object the
  driver builds without ``Scheduler.__init__``, which starts a GPU model worker, IPC
  sockets and a tokenizer) and ``scheduler_output_processor_mixin.py`` (what a batch's
  result does to its requests and the cache);
- ``srt/managers/schedule_batch.py`` (``Req``, ``ScheduleBatch``: ``prepare_for_extend``,
  ``prepare_for_decode``, ``check_decode_mem``, ``retract_decode``, ``filter_batch``,
  ``merge_batch``), ``schedule_policy.py`` (``SchedulePolicy``, the ``PrefillAdder``),
  ``io_struct.py`` (the tokenizer's ``TokenizedGenerateReqInput`` and the outputs the
  scheduler streams), ``managers/utils.py`` (``validate_input_length``);
- what they are built from: ``global_config.py``, ``srt/sampling/sampling_params.py``,
  ``srt/speculative/spec_info.py``, ``srt/metrics/collector.py`` (a request's
  ``TimeStats``; metrics are off) and the KV event records
  ``srt/disaggregation/kv_events.py`` (msgspec structs; it imports zmq and pydantic).

Definitions are read out of files too large or too entangled to load (:mod:`.definitions`):
``ServerArgs`` (its declared defaults: the driver's server settings start from them),
``ForwardMode`` and ``CaptureHiddenMode`` from ``forward_batch_info.py``,
``DisaggregationMode`` from ``disaggregation/utils.py`` and the helpers the loaded files
call from ``srt/utils.py`` (``get_bool_env_var``, which reads the environment as SGLang
does, ``next_power_of_2``, ``flatten_nested_list``).

Everything else the files import from the package is a placeholder that raises if called
(a name never reached on the paths that run: the model worker, grammars, sessions,
disaggregation queues, metrics), except these stand-ins: ``DynamicGradMode`` and
``debug_timing`` leave what they decorate as it is, ``get_compiler_backend`` names
torch's ``eager`` backend (``get_last_loc`` is wrapped in ``torch.compile``; with
``eager`` it runs as written, without generating code: there is no GPU to compile for),
the memory saver is off, and ``SamplingBatchInfo`` (the sampler's per-batch tensors, the
model's side: 0.5's :class:`~.scheduler_release.ModelSampling` serves). Triton's two
paged-allocation kernels (``alloc_extend_kernel``, ``alloc_decode_kernel``) need a GPU:
with pages of more than one token they run in triton's interpreter (the ``sglang-kernels``
extra; triton's Python modules imported anew for them: :func:`fresh_triton`), unchanged,
on a free-page list padded past its end (:class:`DeviceMemory`); with pages of one token
no kernel runs.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ...install import extra_hint
from ...targets.releases.files import ReleaseFiles
from .definitions import DefinitionsError, definitions_of
from .loader import (
    MemorySaver,
    Placeholder,
    SglangUnavailable,
    cached_root,
    load_files,
    module_name,
    require_extra,
    require_files,
    triton_stand_ins,
    unchanged,
)
from .release_0_5 import _stand_ins
from .scheduler_release import ModelSampling

#: The modules that run whole, relative to the package folder (each may import the ones
#: before it).
MODULES = (
    "global_config.py",
    "srt/disaggregation/kv_events.py",
    "srt/metrics/collector.py",
    "srt/sampling/sampling_params.py",
    "srt/speculative/spec_info.py",
    "srt/mem_cache/base_prefix_cache.py",
    "srt/mem_cache/memory_pool.py",
    "srt/mem_cache/chunk_cache.py",
    "srt/managers/schedule_batch.py",
    "srt/mem_cache/paged_allocator.py",
    "srt/mem_cache/radix_cache.py",
    "srt/managers/schedule_policy.py",
    "srt/managers/io_struct.py",
    "srt/managers/utils.py",
    "srt/managers/scheduler_output_processor_mixin.py",
    "srt/managers/scheduler.py",
)
#: Files read for a few definitions (file -> names).
DEFINED = {
    "srt/utils.py": ("get_bool_env_var", "next_power_of_2", "flatten_nested_list"),
    "srt/server_args.py": ("ServerArgs",),
    "srt/model_executor/forward_batch_info.py": ("ForwardMode", "CaptureHiddenMode"),
    "srt/disaggregation/utils.py": ("DisaggregationMode",),
}
#: Where the wheel keeps its version.
VERSION_FILE = "version.py"
#: Third-party modules the loaded files import but nothing that runs here calls.
ABSENT = ("psutil", "setproctitle")


def _eager() -> str:
    """``get_compiler_backend`` on a machine without a GPU to compile for."""
    return "eager"


@dataclass(frozen=True)
class SglangScheduler04:
    """The loaded scheduler modules of one 0.4 release."""

    label: str
    origin: Path
    scheduler: ModuleType
    schedule_batch: ModuleType
    io_struct: ModuleType
    sampling_params: ModuleType
    radix_cache: ModuleType
    memory_pool: ModuleType
    paged_allocator: ModuleType
    #: ``ServerArgs`` (its class attributes are the declared defaults).
    server_args: type
    #: Every module as loaded, by name.
    modules: dict[str, ModuleType]
    #: ``global_server_args_dict`` as ``schedule_batch.py`` left it at import (each
    #: scheduler starts from it, as in a fresh server process).
    server_globals: dict[str, object]

    @contextmanager
    def active(self) -> Iterator[None]:
        """The loaded modules in ``sys.modules`` while SGLang's code runs (triton's too,
        in its interpreter: :func:`fresh_triton`); what was there before is put back
        afterwards."""
        saved = {name: sys.modules[name] for name in self.modules if name in sys.modules}
        sys.modules.update(self.modules)
        try:
            with interpreting():
                yield
        finally:
            for name in self.modules:
                del sys.modules[name]
            sys.modules.update(saved)


#: The environment switch that puts triton in its interpreter.
INTERPRET = "TRITON_INTERPRET"


def _triton_names(name: str) -> bool:
    """Triton's Python modules (its compiled library, ``triton._C``, loads once a
    process and is shared)."""
    ours = name == "triton" or name.startswith("triton.")
    return ours and not name.startswith("triton._C")


@contextmanager
def interpreting() -> Iterator[None]:
    """``TRITON_INTERPRET=1`` while SGLang's code runs (triton reads it at every launch);
    the variable as it was afterwards."""
    before = os.environ.get(INTERPRET)
    os.environ[INTERPRET] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[INTERPRET]
        else:
            os.environ[INTERPRET] = before


@contextmanager
def fresh_triton(into: dict[str, ModuleType]) -> Iterator[None]:
    """Triton imported anew in its interpreter while the files load: triton decides at
    import whether its own library functions (``tl.sum``) are interpreted, so a triton
    another part of the process imported before cannot run the kernels. The new modules go
    to ``into`` (installed with the loaded files while SGLang's code runs); the triton that
    was there, and the environment, are put back."""
    saved = {n: m for n, m in sys.modules.items() if _triton_names(n)}
    for name in saved:
        del sys.modules[name]
    try:
        with interpreting():
            yield
    finally:
        into.update({n: m for n, m in sys.modules.items() if _triton_names(n)})
        for name in into:
            del sys.modules[name]
        sys.modules.update(saved)


class DeviceMemory:
    """One of the paged allocator's kernels, launched in triton's interpreter on a copy of
    the free-page list padded past its end. Both kernels read the page after the last free
    one they hand out without a mask, also when the list is too short (the allocator then
    sees the count and returns ``None``); on a GPU that read lands in device memory and its
    value is never used, in the interpreter it would read past a host buffer. The padding
    is what the GPU gives: memory to read, whose values nothing uses. The kernel runs
    unchanged; it only reads the list."""

    def __init__(self, kernel: Any, free_at: int, out_at: int) -> None:
        self.kernel, self.free_at, self.out_at = kernel, free_at, out_at

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        import torch

        launch = self.kernel[grid]

        def run(*args: Any) -> None:
            free, out = args[self.free_at], args[self.out_at]
            pad = torch.zeros(int(out.numel()) + grid[0] + 1, dtype=free.dtype)
            padded = list(args)
            padded[self.free_at] = torch.cat((free, pad))
            launch(*padded)

        return run


def require_kernels(page: int) -> None:
    """:class:`SglangUnavailable` when pages of ``page`` tokens need triton's interpreter
    and triton is not installed."""
    if page > 1 and importlib.util.find_spec("triton") is None:
        raise SglangUnavailable(
            "SGLang 0.4 allocates pages of more than one token with two triton kernels, "
            f"which run here in triton's interpreter; triton is not installed: "
            f"{extra_hint('sglang-kernels')} (or use page=1)"
        )


def load_scheduler_tree(root: Path, label: str) -> SglangScheduler04:
    """The scheduler of the 0.4 tree under ``root`` (which holds ``sglang/``)."""
    require_extra(
        ("torch", "numpy", "msgspec", "zmq", "pydantic"),
        "SGLang's scheduler keeps its tables in torch tensors and its event records import "
        "msgspec, zmq and pydantic",
    )
    import numpy
    import torch

    package = root / "sglang"
    require_files(root, (package / rel for rel in (*MODULES, *DEFINED)), " of the 0.4 layout")
    namespace: dict[str, object] = {
        "dataclasses": dataclasses,
        "torch": torch,
        "np": numpy,
        "os": os,
        "IntEnum": enum.IntEnum,
        "Enum": enum.Enum,
        "auto": enum.auto,
    }
    defined: dict[str, dict[str, object]] = {}
    try:
        for rel, names in DEFINED.items():
            defined[rel] = definitions_of(package / rel, names, namespace)
    except DefinitionsError as exc:
        raise SglangUnavailable(f"{label}: {exc}") from exc
    given: dict[str, dict[str, object]] = {module_name(r): dict(d) for r, d in defined.items()}
    given["sglang.srt.utils"].update(
        DynamicGradMode=lambda *_, **__: unchanged,
        debug_timing=unchanged,
        get_compiler_backend=_eager,
        is_cuda=lambda: False,
    )
    given["sglang.srt.torch_memory_saver_adapter"] = {"TorchMemorySaverAdapter": MemorySaver}
    given["sglang.srt.sampling.sampling_batch_info"] = {"SamplingBatchInfo": ModelSampling}
    modules = {module_name(rel): package / rel for rel in MODULES}
    stand_ins = _stand_ins(root, modules, given)
    for attributes in stand_ins.values():
        for name, value in list(attributes.items()):
            if value is Placeholder:  # each its own class: several may be one's bases
                attributes[name] = type(name, (Placeholder,), {})
    kernels = importlib.util.find_spec("triton") is not None
    outside: dict[str, dict[str, object]] = {name: {} for name in ABSENT}
    triton: dict[str, ModuleType] = {}
    if kernels:
        with fresh_triton(triton):
            loaded = load_files(label, modules, stand_ins, outside)
    else:  # the kernels' decorators leave them as they are; pages need triton
        loaded = load_files(label, modules, stand_ins, {**outside, **triton_stand_ins()})

    def module(rel: str) -> ModuleType:
        return loaded[module_name(rel)]

    if kernels:
        paged = loaded[module_name("srt/mem_cache/paged_allocator.py")]
        for kernel, free_at, out_at in (
            ("alloc_extend_kernel", 3, 4),
            ("alloc_decode_kernel", 2, 3),
        ):
            setattr(paged, kernel, DeviceMemory(getattr(paged, kernel), free_at, out_at))
    server_args = defined["srt/server_args.py"]["ServerArgs"]
    assert isinstance(server_args, type)
    return SglangScheduler04(
        label,
        root,
        scheduler=module("srt/managers/scheduler.py"),
        schedule_batch=module("srt/managers/schedule_batch.py"),
        io_struct=module("srt/managers/io_struct.py"),
        sampling_params=module("srt/sampling/sampling_params.py"),
        radix_cache=module("srt/mem_cache/radix_cache.py"),
        memory_pool=module("srt/mem_cache/memory_pool.py"),
        paged_allocator=module("srt/mem_cache/paged_allocator.py"),
        server_args=server_args,
        modules={**loaded, **triton},
        server_globals=dict(module("srt/managers/schedule_batch.py").global_server_args_dict),
    )


def scheduler_files() -> ReleaseFiles:
    """The members of a 0.4 wheel the scheduler's load keeps."""
    rels = (*MODULES, *DEFINED, VERSION_FILE)
    members = frozenset(f"sglang/{rel}" for rel in rels)
    return ReleaseFiles("sglang-scheduler", "sglang", members, label="SGLang", engine="sglang")


def load_scheduler_release(version: str) -> SglangScheduler04:
    """``sglang==version``'s scheduler, from the cache or downloaded into it once."""
    return load_scheduler_tree(cached_root(scheduler_files(), version), f"sglang {version}")
