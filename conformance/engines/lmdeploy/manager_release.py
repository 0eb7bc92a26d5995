"""Which files of an LMDeploy release the manager target runs, and the stand-ins they need.

LMDeploy's scheduler admits a waiting sequence through its prefill scheduler
(``_PrefillScheduler.schedule``: the tentative prefix match on the trie, ``BlockTrie.match``,
room made by ``RecomputeEvictionHelper`` with ``BlockTrie.evict`` of the shortfall, the match
rolled back when there is no room, else ``DefaultBlockManager.allocate`` and
``BlockTrie.allocate``); a sequence's blocks go back through its lifecycle
(``SequenceLifecycle.release_paging_resources``). Those files run as the release ships
them, with the sequence model they act on:

- ``pytorch/paging/prefill_scheduler.py`` (the admission and its match transaction),
  ``pytorch/paging/kv_load_coordinator.py`` (built with external loads off) and
  ``pytorch/long_context.py`` (the chunk limit the admission asks);
- ``pytorch/paging/block_manager/{base,default}_block_manager.py``;
- ``pytorch/paging/block_trie/`` (``__init__``, ``node``, ``checkpoint``,
  ``checkpoint_lifecycle``, ``kv_lifecycle``, ``trie``);
- ``pytorch/paging/{state_manager,seq_states/states,eviction_helper/recompute_eviction_helper}.py``;
- ``pytorch/{messages,block,prefix_cache_state}.py`` and
  ``pytorch/strategies/{base,ar}/sequence.py`` (``SchedulerSequenceDefault``: the real
  ``set_step`` and ``update_token_ids``).

They need numpy (the ``lmdeploy`` extra). ``messages.py`` imports torch for ``Tensor``,
which it names in annotations and ``isinstance`` checks of inputs the suite always gives as
numpy arrays, and uses only for logits (never asked for): torch is a stand-in module whose
``Tensor`` is a class nothing is an instance of; the prefill scheduler's profiler decorator
(``torch.profiler.record_function``) leaves the function as it is. The other stand-ins are
classes named in annotations or defaults and never built (generation config, migration
request, multimodal inputs, model inputs, the cache and scheduler configs, the connector's
load result), ``get_logger`` (Python's logging), the two settings the prefill scheduler
reads from ``pytorch/envs.py`` at their defaults (no environment variable is read), and the
metrics events a scheduled sequence records (kept, never read). Nothing else of LMDeploy is
loaded.

**The clock.** The allocator stamps blocks with ``time.perf_counter()`` into an ``int64``
array (whole seconds), and the trie evicts the leaf with the oldest stamp, ties by the
node's ``id()``. Within one second every stamp ties, so eviction would follow memory
addresses and no run would replay. The loaded allocator module is given a clock that
advances one second per reading: every stamp is distinct and increasing, the order is
LMDeploy's LRU as it is when calls are a second apart, and a run replays exactly.
"""

from __future__ import annotations

import enum
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ...machines.pool.surface import SurfaceMismatch
from ...targets.isolated_files import IsolatedLoadError, load_isolated
from ...targets.releases.files import ReleaseFiles, release_dir, valid_cache
from .release import LmdeployUnavailable, numpy_module, release_root

#: The files both API generations run (module names under ``lmdeploy.``, in load order).
COMMON = (
    "pytorch.block",
    "pytorch.prefix_cache_state",
    "pytorch.messages",
    "pytorch.strategies.base.sequence",
    "pytorch.strategies.ar.sequence",
    "pytorch.paging.block_manager.base_block_manager",
    "pytorch.paging.block_manager.default_block_manager",
    "pytorch.paging.state_manager",
    "pytorch.paging.block_trie.node",
    "pytorch.paging.block_trie.checkpoint",
    "pytorch.paging.block_trie.checkpoint_lifecycle",
    "pytorch.paging.block_trie.kv_lifecycle",
    "pytorch.paging.block_trie.trie",
    "pytorch.paging.seq_states.states",
)
#: Releases whose prefill admission is ``paging/prefill_scheduler.py`` (0.18): the sequence
#: lifecycle, eviction helper and load coordinator are built from their parts.
PREFILL_SCHEDULER = (
    *COMMON,
    "pytorch.paging.eviction_helper.recompute_eviction_helper",
    "pytorch.paging.block_trie",
    "pytorch.long_context",
    "pytorch.paging.kv_load_coordinator",
    "pytorch.paging.prefill_scheduler",
    "pytorch.paging.block_manager.window_block_manager",
    "pytorch.paging.block_manager",
    "pytorch.paging.seq_states",
    "pytorch.paging.eviction_helper",
    "pytorch.paging.kv_save_coordinator",
    "pytorch.paging.scheduler",
)
#: Trees whose admission lives in ``paging/scheduler.py`` (the 0.16.0 source): the eviction
#: helper is built from a ``Scheduler``, so the ``Scheduler`` runs, with the builders it calls.
SCHEDULER = (
    *COMMON,
    "pytorch.paging.block_manager.window_block_manager",
    "pytorch.paging.block_manager",
    "pytorch.paging.block_trie",
    "pytorch.paging.seq_states",
    "pytorch.long_context",
    "pytorch.paging.scheduler",
    "pytorch.paging.eviction_helper",
    "pytorch.paging.eviction_helper.base_eviction_helper",
    "pytorch.paging.eviction_helper.recompute_eviction_helper",
)
#: API generation -> its files; told apart by the file only the newer one has.
GENERATIONS = {"prefill-scheduler": PREFILL_SCHEDULER, "scheduler": SCHEDULER}
#: Modules that are packages: their file is the folder's ``__init__.py``.
PACKAGES = frozenset(
    {
        "pytorch.paging.block_trie",
        "pytorch.paging.block_manager",
        "pytorch.paging.seq_states",
        "pytorch.paging.eviction_helper",
    }
)
VERSION_FILE = "lmdeploy/version.py"


def file_of(module: str) -> str:
    path = "lmdeploy/" + module.replace(".", "/")
    return path + "/__init__.py" if module in PACKAGES else path + ".py"


#: The file only the prefill-scheduler generation has.
PREFILL_FILE = file_of("pytorch.paging.prefill_scheduler")


def generation_of(root: Path) -> str:
    """The API generation of the tree under ``root``: ``prefill-scheduler`` when it has
    ``paging/prefill_scheduler.py``, else ``scheduler``."""
    return "prefill-scheduler" if (root / PREFILL_FILE).is_file() else "scheduler"


#: What the suite fetches of a release on the index, per generation: the newer layout is
#: tried first, and a wheel that lacks its files is fetched again for the older one.
FILES = ReleaseFiles(
    "lmdeploy-prefill-scheduler",
    "lmdeploy",
    frozenset({VERSION_FILE, *(file_of(m) for m in PREFILL_SCHEDULER)}),
    label="LMDeploy",
    engine="lmdeploy",
)
SCHEDULER_FILES = ReleaseFiles(
    "lmdeploy-manager-scheduler",
    "lmdeploy",
    frozenset({VERSION_FILE, *(file_of(m) for m in SCHEDULER)}),
    label="LMDeploy",
    engine="lmdeploy",
)


def _never_built(module: str, name: str) -> type:
    """A stand-in for ``module.name``, a class or function a file names (annotations,
    defaults) but the suite's runs never reach. Reaching it is a loading error, never a
    finding: :class:`SurfaceMismatch` (exit 2) naming it."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise SurfaceMismatch(
            f"LMDeploy called {module}.{name}, which kvpool's loader gives as a stand-in "
            "(it needs what does not run here: torch, the model, the engine's configs)"
        )

    return type(name, (), {"__init__": refuse, "__call__": refuse})


class Tensor:
    """Stand-in for ``torch.Tensor``: the suite passes numpy arrays, never one of these."""


def _get_logger(name: str | None = None, **_: object) -> logging.Logger:
    return logging.getLogger("kvpool.lmdeploy")


def _record_function(name: str) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Stand-in for ``torch.profiler.record_function`` as a decorator: the function as it is."""

    def unchanged(function: Callable[..., object]) -> Callable[..., object]:
        return function

    return unchanged


class EventType(enum.Enum):
    """Stand-in for ``lmdeploy.messages.EventType``: the metrics events a sequence records."""

    QUEUED = enum.auto()
    SCHEDULED = enum.auto()


@dataclass(frozen=True)
class EngineEvent:
    """Stand-in for ``lmdeploy.messages.EngineEvent`` (a sequence's metrics log; never read)."""

    type: EventType
    timestamp: float | None

    @classmethod
    def new_event(cls, event_type: EventType, timestamp: float | None = None) -> EngineEvent:
        return cls(event_type, timestamp)


class Envs:
    """Stand-in for ``lmdeploy.pytorch.envs``: the prefill scheduler's two settings at the
    defaults ``envs.py`` gives them (``LMDEPLOY_PT_TTFT_POLICY``, ``LMDEPLOY_PT_TTFT_AGING_SEC``
    unset)."""

    opt_ttft_policy = "size"
    opt_ttft_aging_sec = 2.0


class SecondsClock:
    """``time`` for the allocator module: each reading one second after the last."""

    def __init__(self) -> None:
        self.now = 0

    def perf_counter(self) -> float:
        self.now += 1
        return float(self.now)


#: What the loaded files name (annotations, defaults) but the suite's runs never reach,
#: by module: each a stand-in that refuses to be used (:func:`_never_built`).
NEVER_BUILT = {
    "lmdeploy.messages": ("ScheduleMetrics", "GenerationConfig", "LogitsProcessor"),
    "lmdeploy.pytorch.disagg.conn.protocol": ("MigrationRequest",),
    "lmdeploy.pytorch.multimodal.data_type": ("MultiModalInputs", "make_multimodal_content_hash"),
    "lmdeploy.vl.constants": ("Modality",),
    "lmdeploy.pytorch.config": ("CacheConfig", "SchedulerConfig"),
    "lmdeploy.pytorch.kv_connector": (
        "KVLoadResult",
        "KVConnectorStepInput",
        "KVConnectorMetadata",
        "KVOperationId",
    ),
    "lmdeploy.pytorch.engine.model_agent": ("BatchedOutputs",),
    "lmdeploy.pytorch.model_inputs": ("ModelInputs", "ModelInputsDelta"),
}


def _stand_ins() -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {
        module: {name: _never_built(module, name) for name in names}
        for module, names in NEVER_BUILT.items()
    }
    found["lmdeploy.messages"].update({"EngineEvent": EngineEvent, "EventType": EventType})
    found["lmdeploy.utils"] = {"get_logger": _get_logger}
    found["lmdeploy.pytorch.envs"] = {
        "opt_ttft_policy": Envs.opt_ttft_policy,
        "opt_ttft_aging_sec": Envs.opt_ttft_aging_sec,
    }
    return found


@dataclass(frozen=True)
class LmdeployManagerRelease:
    version: str
    #: Where the files came from (the cache folder or the user's tree).
    origin: Path
    #: The loaded modules by their name under ``lmdeploy.`` (``pytorch.messages``, ...).
    modules: dict[str, ModuleType]
    clock: SecondsClock
    #: ``prefill-scheduler`` or ``scheduler`` (see :data:`GENERATIONS`).
    generation: str
    #: Every module the load made (files, stand-ins, parent packages) by its full name.
    everything: dict[str, ModuleType]

    def module(self, name: str) -> ModuleType:
        return self.modules[name]

    @contextmanager
    def importable(self) -> Iterator[None]:
        """The loaded modules under their names in ``sys.modules`` for the length of a
        call whose body imports one of them (the 0.16.0 source imports the sequence states
        inside ``SchedulerSession.add_sequence`` and the eviction helper inside its
        builder); whatever was there before is put back afterwards."""
        saved = {name: sys.modules.get(name) for name in self.everything}
        sys.modules.update(self.everything)
        try:
            yield
        finally:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module


def load_manager_tree(root: Path, version: str) -> LmdeployManagerRelease:
    """The block manager, trie, scheduler and sequence files of ``root``'s API generation
    (``root`` holds ``lmdeploy/``), loaded in isolation."""
    numpy_module("block manager")
    generation = generation_of(root)
    names = GENERATIONS[generation]
    files = {f"lmdeploy.{m}": root / file_of(m) for m in names}
    absent = [file_of(m) for m in names if not (root / file_of(m)).is_file()]
    if absent:
        raise LmdeployUnavailable(
            f"{root} lacks {', '.join(absent)}: not an LMDeploy tree with the prefix trie of "
            "0.16.0 to 0.18.x (the manager target knows those layouts)"
        )
    try:
        loaded = load_isolated(
            "lmdeploy",
            files,
            _stand_ins(),
            outside={
                "torch": {"Tensor": Tensor},
                "torch.profiler": {"record_function": _record_function},
            },
            allow=frozenset({"torch"}),
        )
    except IsolatedLoadError as exc:
        raise LmdeployUnavailable(f"LMDeploy {version}: {exc}") from exc
    modules = {m: loaded[f"lmdeploy.{m}"] for m in names}
    clock = SecondsClock()
    modules["pytorch.paging.block_manager.base_block_manager"].time = clock  # type: ignore[attr-defined]
    return LmdeployManagerRelease(version, root, modules, clock, generation, loaded)


def load_manager_release(version: str) -> LmdeployManagerRelease:
    """Release ``version``'s manager files, from the cache or downloaded into it once: the
    prefill-scheduler generation's files, or, when the wheel lacks them, the scheduler
    generation's."""
    if not valid_cache(release_dir(SCHEDULER_FILES, version), SCHEDULER_FILES, version):
        try:
            return load_manager_tree(release_root(FILES, version), version)
        except LmdeployUnavailable as exc:
            if PREFILL_FILE not in str(exc):  # not the older layout: a real failure
                raise
    return load_manager_tree(release_root(SCHEDULER_FILES, version), version)
