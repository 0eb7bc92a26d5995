"""The public extension API of kvpool: everything a pool target, a manager target or an
engine's registry entry may use, in one module with a stable surface
(``docs/guide/extension-api.md`` shows each hook with a runnable example).

Names here keep their meaning across releases; anything else under
``kvpool.conformance`` is the suite's own and may move.

- **Pool targets**: :class:`Target` (``name``, ``operations``, ``observes``, ``apply``,
  ``view``, ``structure_problems``) and the optional hooks of :data:`POOL_HOOKS`; a pool
  with vLLM's ``BlockPool`` API needs no target at all (``--target module:factory``).
- **Manager targets**: :class:`ManagerTarget` and the optional hooks of
  :data:`MANAGER_HOOKS` (on the target) and :data:`MANAGER_FACTORY_HOOKS` (on its
  factory).
- **Helpers adapters reuse**: :func:`load_isolated` (an engine's files run under their own
  names with inert placeholders for the rest of its package), :func:`request_block_hashes`
  and :func:`expected_key` (the keys a request's blocks are cached under), :func:`refusal`
  and :class:`RefusedByReturn` (a pool call refused by its return value, for a profile with
  ``refuses_by_return``).
- **Engine drivers** (the engine machine, an engine driven through its own scheduler):
  :class:`EngineDriver` built by an :data:`EngineDriverFactory` from an
  :class:`EngineSetup`; it takes submissions (:class:`Submission`), plans batches
  (:class:`Batch`) of scheduled requests (:class:`ScheduledRequest`) and takes the
  model's results (:class:`Sampled`); what else it offers is declared from
  :data:`CAPABILITIES`.
- **Engines**: :class:`EngineEntry` (registered under the ``kvpool.engines`` entry-point
  group), :class:`TargetDescription`, :class:`Form`, :class:`ProfileChoice` and the two
  errors.
"""

from __future__ import annotations

from types import MappingProxyType

from kvpool.spec import Action, Observation, PoolConfig, Profile
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.manager import (
    FULL_ATTENTION,
    Admit,
    KVGroup,
    ManagerConfig,
    RequestAction,
    ResetCache,
    Scheduled,
)
from kvpool.spec.manager.properties import expected_key

from .engine.refusal import RefusedByReturn, refusal
from .engine.target import EVICT_FIRST, OBSERVABLES, PoolView, Target, TargetFactory
from .engine_machine.driver import (
    CAPABILITIES,
    Batch,
    EngineDriver,
    EngineDriverFactory,
    EngineSetup,
    Sampled,
    ScheduledRequest,
    Submission,
)
from .manager.target import ManagerTarget, ManagerTargetFactory, RequestSetup
from .targets.description import Form, TargetDescription
from .targets.errors import TargetLoadError, TargetUsageError
from .targets.isolated_files import IsolatedLoadError, load_isolated
from .targets.registry import GROUP, EngineEntry, ProfileChoice, ReleaseSupport

#: What a pool target may declare beyond :class:`Target`: name -> what the suite does with it.
POOL_HOOKS = MappingProxyType(
    {
        "takes": "takes(action) -> bool: whether the pool's calls take this action's optional "
        "arguments (block_mask, replace_existing_hashes, ...); actions it does not take are "
        "never drawn for it",
        "version": "version: str: the release under test, written into traces and tables",
        "header_lines": "header_lines() -> list[str]: what the target inferred from the "
        "pool's names and where, printed in the run's header (the vLLM-API adapter's; a "
        "target that declares its operations and observables needs none)",
    }
)

#: What the factory of a pool with vLLM's ``BlockPool`` API may declare (``--target
#: module:factory``; the class, when the factory is the pool class).
POOL_FACTORY_HOOKS = MappingProxyType(
    {
        "kvpool_features_off": "kvpool_features_off: set[str]: features the suite would "
        "infer from the pool's names (foreign_pool, evict_first, ref_cnt, ...: "
        "kvpool.conformance.targets.vllm_api.features.FEATURES) declared off: never drawn "
        "or compared",
    }
)

#: What a manager target may declare beyond :class:`ManagerTarget`.
MANAGER_HOOKS = MappingProxyType(
    {
        "allows": "allows(action) -> bool: whether the manager takes this request action "
        "(an older API without evict_blocks, say); actions it refuses are never drawn",
        "extra_keys_taken": "extra_keys_taken: frozenset[str]: the request attributes besides "
        "the salt it takes (only those are drawn)",
        "registers_when_scheduled": "registers_when_scheduled: bool: it keys a block when it "
        "schedules it, before the engine writes it (a key then does not forbid the write)",
        "swaps_in_cached": "swaps_in_cached: bool: it may replace a full table entry with the "
        "cached block of the same prefix (append-only lets exactly that pass)",
        "keyed_tokens": "keyed_tokens(request_id) -> int: how many leading tokens of a request "
        "it has keyed, for a manager that keys decoded tokens only when a request finishes",
        "resets_only_without_requests": "resets_only_without_requests: bool: it refuses "
        "reset_prefix_cache while any request is live (idle-pool-free waits for none)",
        "take_events": "take_events() -> list: the KV events it published since the last "
        "call (the events level judges them; a manager without it publishes none)",
    }
)

#: What a manager target's factory may declare.
MANAGER_FACTORY_HOOKS = MappingProxyType(
    {
        "name": "name: str: how tables and traces name the manager",
        "checked_by_properties": "checked_by_properties: bool: judge the manager by the "
        "request-level properties alone, not step by step against the spec's manager (for "
        "by-design differences: keys at scheduling time, a hit over the whole prompt, ...)",
        "supported_setup": "supported_setup(setup) -> RequestSetup: the setup its managers are "
        "built for, narrowed from the drawn one (a property-checked manager's)",
        "fit_setup": "fit_setup(setup) -> RequestSetup: the same for a manager checked step by "
        "step (the spec's manager is then built for the fitted setup too)",
    }
)

__all__ = [
    "CAPABILITIES",
    "EVICT_FIRST",
    "FULL_ATTENTION",
    "GROUP",
    "MANAGER_FACTORY_HOOKS",
    "MANAGER_HOOKS",
    "OBSERVABLES",
    "POOL_FACTORY_HOOKS",
    "POOL_HOOKS",
    "Action",
    "Admit",
    "Batch",
    "EngineDriver",
    "EngineDriverFactory",
    "EngineEntry",
    "EngineSetup",
    "Form",
    "IsolatedLoadError",
    "KVGroup",
    "ManagerConfig",
    "ManagerTarget",
    "ManagerTargetFactory",
    "Observation",
    "PoolConfig",
    "PoolView",
    "Profile",
    "ProfileChoice",
    "RefusedByReturn",
    "ReleaseSupport",
    "RequestAction",
    "RequestSetup",
    "ResetCache",
    "Sampled",
    "Scheduled",
    "ScheduledRequest",
    "Submission",
    "Target",
    "TargetDescription",
    "TargetFactory",
    "TargetLoadError",
    "TargetUsageError",
    "expected_key",
    "load_isolated",
    "refusal",
    "request_block_hashes",
]
