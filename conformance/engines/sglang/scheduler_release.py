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
  driver builds without ``Scheduler.__init__``, which starts a GPU model worker) and
  ``scheduler_components/batch_result_processor.py`` (what a batch's result does to its
  requests and the cache), with ``managers/utils.py`` (``GenerationBatchResult``),
  ``prefill_delayer.py``, ``scheduler_components/new_token_ratio_tracker.py``;
- what they call into: ``srt/mem_cache/prefill_budget.py`` (the adder's memory budget),
  ``srt/speculative/spec_info.py`` (``SpeculativeAlgorithm``: none),
  ``srt/beam_search/batch_tail.py`` and ``fork.py`` (the batch's beam rows: none);
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

The scheduler's methods read SGLang's server settings through ``runtime_context``
(``get_exec()``, ``get_schedule()``, ...): :class:`Published` answers them with the bags
of :mod:`.settings` (the release's declared defaults and the driver's own), installed by
:meth:`SglangScheduler05.active` while a driver's call runs. ``SamplingBatchInfo`` (the
sampler's tensors), ``PrefillStats`` (a batch's figures for the logs) and the expert and
indexer capturers (none: the model captures nothing) are stand-ins of the model's and the
logs' side, named below; they decide nothing of the cache.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ...targets.releases.files import ReleaseFiles
from .loader import cached_root, unchanged
from .release_0_5 import DATA, DEFINED, MODULES, VERSION_FILE, Widening, load_files_of
from .settings import FIELDS, Bag, SettingNotGiven, declared_settings

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
    "srt/speculative/spec_info.py",
    "srt/mem_cache/prefill_budget.py",
    "srt/beam_search/batch_tail.py",
    "srt/beam_search/fork.py",
    "srt/managers/schedule_batch.py",
    "srt/managers/prefill_delayer.py",
    "srt/managers/scheduler_components/new_token_ratio_tracker.py",
    "srt/managers/schedule_policy.py",
    "srt/managers/utils.py",
    "srt/managers/scheduler_components/batch_result_processor.py",
    "srt/managers/scheduler.py",
)
#: The radix cache's definitions (``ReqKvInfo`` now comes with its whole module) and the
#: batch's forward modes.
SCHEDULER_DEFINED = {
    **{rel: names for rel, names in DEFINED.items() if rel not in SCHEDULER_MODULES},
    "srt/utils/common.py": (
        *DEFINED["srt/utils/common.py"],
        "flatten_arrays_to_pinned_cpu",
        "async_h2d",
    ),
    "srt/model_executor/forward_batch_info.py": (
        "ForwardMode",
        "CaptureHiddenMode",
        "get_server_return_hidden_states_mode",
        "get_required_capture_hidden_mode",
    ),
    "srt/disaggregation/utils.py": ("DisaggregationMode",),
}


class _NoPenalties:
    """A batch's penalizers with none asked for (the suite's requests set no penalty)."""

    is_required = False

    def cumulate_output_tokens(self, *_: object) -> None:
        return None


class ModelSampling:
    """Stand-in for ``SamplingBatchInfo``: the sampler's per-batch tensors (temperatures,
    penalties, grammar masks), the model's side, which the suite plays. It decides nothing
    of the cache; the batch builds, filters and merges it, and nothing else is read."""

    penalizer_orchestrator = _NoPenalties()

    @classmethod
    def from_schedule_batch(cls, *_: object) -> ModelSampling:
        return cls()

    def filter_batch(self, *_: object) -> None:
        return None

    def merge_batch(self, *_: object) -> None:
        return None


class NoStats:
    """Stand-in for ``PrefillStats``: a prefill batch's figures for the logs and metrics
    (observability only; nothing reads them back)."""

    @classmethod
    def from_adder(cls, *_: object, **__: object) -> None:
        return None


#: The radix cache's stand-ins, widened (see the module docstring).
WIDENING = Widening(
    given={
        "sglang.srt.environ": None,  # loaded whole
        "sglang.srt.utils": {
            "is_mps": lambda: False,
            "is_gfx95_supported": lambda: False,
            "DynamicGradMode": lambda *_, **__: unchanged,
        },
        "sglang.srt.utils.common": {
            "is_hip": lambda: False,
            "is_npu": lambda: False,
            "suppress_noisy_warnings": lambda: None,
        },
        "sglang.srt.sampling.sampling_batch_info": {"SamplingBatchInfo": ModelSampling},
        "sglang.srt.managers.scheduler_components.metrics_reporter": {"PrefillStats": NoStats},
        # the model captures no expert routing and no indexer top-k
        "sglang.srt.state_capturer.indexer_topk": {"get_global_indexer_capturer": lambda: None},
        "sglang.srt.state_capturer.routed_experts": {"get_global_experts_capturer": lambda: None},
        "sglang.srt.observability.scheduler_stage_metrics": {
            "scheduler_stage_method": lambda *_, **__: unchanged,
        },
    },
    absent=("psutil", "setproctitle"),
    distinct=True,
)


class Published:
    """What ``runtime_context`` answers while SGLang's scheduler code runs: the settings
    bags of the driver running it (:meth:`SglangScheduler05.active` installs them)."""

    def __init__(self) -> None:
        self.bags: dict[str, Bag] = {}

    def bag(self, name: str) -> Bag:
        if name not in self.bags:
            raise SettingNotGiven(f"SGLang read its {name!r} settings outside a driver's run")
        return self.bags[name]

    def is_config_namespace_published(self, name: str) -> bool:
        return name in self.bags

    def getters(self) -> dict[str, object]:
        """``runtime_context``'s getters, over these bags."""
        names: tuple[str, ...] = ("device", "disagg", "exec", "lora", "memory", "mm", "model")
        names += ("observability", "parallel", "schedule", "serving", "spec", "platform")
        found: dict[str, object] = {
            f"get_{name}": (lambda name=name: self.bag(name)) for name in names
        }
        found["get_context"] = lambda: self
        return found


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
    #: What ``runtime_context``'s getters answer.
    published: Published

    def settings(self) -> dict[str, Bag]:
        """The server settings at the release's declared defaults (fresh bags: a driver
        gives its own over them)."""
        return declared_settings(self.origin / "sglang")

    @contextmanager
    def active(self, settings: dict[str, Bag] | None = None) -> Iterator[None]:
        """The loaded modules in ``sys.modules`` while SGLang's code runs (it imports more
        of the package when called), and ``settings`` published; what was there before is
        put back afterwards."""
        saved = {name: sys.modules[name] for name in self.modules if name in sys.modules}
        sys.modules.update(self.modules)
        before = self.published.bags
        self.published.bags = settings or {}
        try:
            yield
        finally:
            self.published.bags = before
            for name in self.modules:
                del sys.modules[name]
            sys.modules.update(saved)


def load_scheduler_tree(root: Path, label: str) -> SglangScheduler05:
    """The scheduler of the 0.5 tree under ``root`` (which holds ``sglang/``)."""
    published = Published()
    given = dict(WIDENING.given)
    given["sglang.srt.runtime_context"] = published.getters()
    widening = Widening(given, WIDENING.absent, published.getters(), WIDENING.distinct)
    loaded, defined = load_files_of(
        root, label, (*MODULES, *SCHEDULER_MODULES), SCHEDULER_DEFINED, widening
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
        published=published,
    )


def scheduler_files() -> ReleaseFiles:
    """The members of a 0.5 wheel the scheduler's load keeps."""
    rels = (*MODULES, *SCHEDULER_MODULES, *SCHEDULER_DEFINED, *DATA, *FIELDS, VERSION_FILE)
    members = frozenset(f"sglang/{rel}" for rel in rels)
    return ReleaseFiles("sglang-scheduler", "sglang", members, label="SGLang", engine="sglang")


def load_scheduler_release(version: str) -> SglangScheduler05:
    """``sglang==version``'s scheduler, from the cache or downloaded into it once."""
    return load_scheduler_tree(cached_root(scheduler_files(), version), f"sglang {version}")
