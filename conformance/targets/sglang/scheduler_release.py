"""SGLang 0.5's scheduler files, loaded from the release as the radix cache's are
(:mod:`.release_0_5`), for the engine machine's driver.

Besides the radix cache's modules, these run whole, unchanged:

- ``srt/managers/schedule_batch.py`` (``Req``: ``init_next_round_input``,
  ``check_finished``, ``reset_for_retract``; ``ScheduleBatch``: ``init_new``,
  ``prepare_for_extend``, ``prepare_for_decode``, ``check_decode_mem``,
  ``retract_decode``, ``filter_batch``, ``merge_batch``);
- ``srt/managers/schedule_policy.py`` (``SchedulePolicy.calc_priority``, the
  ``PrefillAdder`` and its budget);
- ``srt/managers/scheduler.py`` (the ``Scheduler`` class: its methods run on an object the
  driver builds without ``Scheduler.__init__``, which starts a GPU model worker);
- what ``Req`` is built from: ``srt/environ.py`` (the ``SGLANG_*`` settings, read from the
  environment as SGLang reads them), ``srt/multimodal/modality.py``,
  ``srt/sampling/sampling_params.py`` with ``srt/sampling/watermarking/`` (``config``,
  ``detector``, ``core``: a request's parameters are normalised through them),
  ``srt/dllm/mixin/req.py`` (``Req``'s base class), ``srt/observability/trace.py`` and
  ``req_time_stats.py`` (the request's time stats, built in ``Req.__init__``).

``ForwardMode`` and ``CaptureHiddenMode`` are read out of
``srt/model_executor/forward_batch_info.py`` (2,400 lines of GPU batch code), and
``DisaggregationMode`` out of ``srt/disaggregation/utils.py``, as the radix cache's loader
reads ``ReqToTokenPool``.

**How far it runs today.** ``Req`` (built, ``init_next_round_input`` against the release's
``RadixCache``), ``SchedulePolicy`` and an empty ``ScheduleBatch`` run. ``calc_priority``,
the ``PrefillAdder`` and the batch's ``prepare_for_*`` read SGLang's server settings
through ``runtime_context`` (``get_disagg()``, ``get_context()``, ``get_exec()``, ...),
whose values ``ServerArgs`` resolves from the declarations in ``srt/arg_groups/fields/``;
those are placeholders still, so calling them is a loading error (the stand-in raises),
never a finding.

The stand-ins the scheduler's files need beyond the radix cache's: ``is_hip``, ``is_npu``,
``is_mps`` answer no; ``suppress_noisy_warnings`` (called at import) does nothing; two
decorators leave their methods as they are: ``DynamicGradMode`` (torch's inference mode)
and ``scheduler_stage_method`` (a timing recorder); ``psutil`` and ``setproctitle`` are
empty modules (the scheduler process's own bookkeeping, never run here). Every other name
the files import from SGLang is a placeholder class of its own (``Scheduler`` derives from
six mixins) that raises if it is built: a used placeholder is a loading error, never a
finding.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..releases.files import ReleaseFiles
from .loader import cached_root, unchanged
from .release_0_5 import DATA, DEFINED, MODULES, VERSION_FILE, Widening, load_files_of

#: The scheduler's modules, run whole beside the radix cache's (in this order: each may
#: import the ones before it).
SCHEDULER_MODULES = (
    "srt/environ.py",
    "srt/multimodal/modality.py",
    "srt/sampling/watermarking/config.py",
    "srt/sampling/watermarking/detector.py",
    "srt/sampling/watermarking/core.py",
    "srt/sampling/sampling_params.py",
    "srt/dllm/mixin/req.py",
    "srt/observability/trace.py",
    "srt/observability/req_time_stats.py",
    "srt/managers/schedule_batch.py",
    "srt/managers/schedule_policy.py",
    "srt/managers/scheduler.py",
)
#: The radix cache's definitions (``ReqKvInfo`` now comes with its whole module) and the
#: batch's forward modes.
SCHEDULER_DEFINED = {
    **{rel: names for rel, names in DEFINED.items() if rel not in SCHEDULER_MODULES},
    "srt/model_executor/forward_batch_info.py": ("ForwardMode", "CaptureHiddenMode"),
    "srt/disaggregation/utils.py": ("DisaggregationMode",),
}
#: The radix cache's stand-ins, widened (see the module docstring).
WIDENING = Widening(
    given={
        "sglang.srt.environ": None,  # loaded whole
        "sglang.srt.utils": {
            "is_mps": lambda: False,
            "DynamicGradMode": lambda *_, **__: unchanged,
        },
        "sglang.srt.utils.common": {
            "is_hip": lambda: False,
            "is_npu": lambda: False,
            "suppress_noisy_warnings": lambda: None,
        },
        "sglang.srt.observability.scheduler_stage_metrics": {
            "scheduler_stage_method": lambda *_, **__: unchanged,
        },
    },
    absent=("psutil", "setproctitle"),
    distinct=True,
)


@dataclass(frozen=True)
class SglangScheduler05:
    """The loaded scheduler modules of one 0.5 release (and the radix cache's)."""

    label: str
    origin: Path
    schedule_batch: ModuleType
    schedule_policy: ModuleType
    scheduler: ModuleType
    sampling_params: ModuleType
    #: Every module as loaded, by name.
    modules: dict[str, ModuleType]
    #: The definitions read out of files not loaded whole, by file.
    defined: dict[str, dict[str, object]]

    @contextmanager
    def active(self) -> Iterator[None]:
        """The loaded modules in ``sys.modules`` while SGLang's code runs (it imports more
        of the package when called); what was there before is put back afterwards."""
        saved = {name: sys.modules[name] for name in self.modules if name in sys.modules}
        sys.modules.update(self.modules)
        try:
            yield
        finally:
            for name in self.modules:
                del sys.modules[name]
            sys.modules.update(saved)


def load_scheduler_tree(root: Path, label: str) -> SglangScheduler05:
    """The scheduler of the 0.5 tree under ``root`` (which holds ``sglang/``)."""
    loaded, defined = load_files_of(
        root, label, (*MODULES, *SCHEDULER_MODULES), SCHEDULER_DEFINED, WIDENING
    )

    def module(rel: str) -> ModuleType:
        return loaded[f"sglang.{rel.removesuffix('.py').replace('/', '.')}"]

    return SglangScheduler05(
        label,
        root,
        schedule_batch=module("srt/managers/schedule_batch.py"),
        schedule_policy=module("srt/managers/schedule_policy.py"),
        scheduler=module("srt/managers/scheduler.py"),
        sampling_params=module("srt/sampling/sampling_params.py"),
        modules=loaded,
        defined=defined,
    )


def scheduler_files() -> ReleaseFiles:
    """The members of a 0.5 wheel the scheduler's load keeps."""
    rels = (*MODULES, *SCHEDULER_MODULES, *SCHEDULER_DEFINED, *DATA, VERSION_FILE)
    members = frozenset(f"sglang/{rel}" for rel in rels)
    return ReleaseFiles("sglang-scheduler", "sglang", members, label="SGLang", engine="sglang")


def load_scheduler_release(version: str) -> SglangScheduler05:
    """``sglang==version``'s scheduler, from the cache or downloaded into it once."""
    return load_scheduler_tree(cached_root(scheduler_files(), version), f"sglang {version}")
