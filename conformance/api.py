"""The public extension API of kvpool: everything a pool target, a manager target or an
engine's registry entry may use, in one module with a stable surface
(``docs/guide/extension-api.md`` shows each hook with a runnable example).

Names here keep their meaning across releases; anything else under
``kvpool.conformance`` is the suite's own and may move.

- **Pool targets**: :class:`Target` (``name``, ``operations``, ``observes``, ``apply``,
  ``view``, ``structure_problems``) and the optional hooks of :data:`POOL_HOOKS` (declared
  with their signatures in :mod:`.hooks`, and checked when a target is loaded); a pool
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
  :data:`CAPABILITIES` (the chain its cache holds, ``event_parents``, as
  :data:`EventParents`).
- **Consumers** (a router judged on a pool's KV events, ``--consumer module:factory``):
  protocol 2, :class:`Router` asked with a :class:`Prompt`, started with a :class:`Wire`,
  with the optional hooks of :data:`ROUTER_HOOKS`, and :class:`WireFeed` with
  :func:`wire_hash` for one that reads the wire itself; the events it is fed
  (:class:`BlockStored`, :class:`BlockRemoved`, :class:`AllBlocksCleared`) and
  :class:`ConsumerError`.
- **Engines**: :class:`EngineEntry` (registered under the ``kvpool.engines`` entry-point
  group), :class:`TargetDescription`, :class:`Form`, :class:`ProfileChoice` and the two
  errors.
"""

from __future__ import annotations

from types import MappingProxyType

from kvpool.spec import Action, Observation, PoolConfig, Profile
from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored
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

from . import hooks
from .consumers.protocol import ConsumerError
from .consumers.router import Prompt, Router, Wire
from .consumers.wire_feed import WireFeed, wire_hash
from .machines.engine.driver import (
    CAPABILITIES,
    Batch,
    EngineDriver,
    EngineDriverFactory,
    EngineSetup,
    EventParents,
    Sampled,
    ScheduledRequest,
    Submission,
)
from .machines.pool.refusal import RefusedByReturn, refusal
from .machines.pool.target import EVICT_FIRST, OBSERVABLES, PoolView, Target, TargetFactory
from .machines.requests.target import ManagerTarget, ManagerTargetFactory, RequestSetup
from .targets.description import Form, TargetDescription
from .targets.errors import TargetLoadError, TargetUsageError
from .targets.isolated_files import IsolatedLoadError, load_isolated
from .targets.registry import GROUP, EngineEntry, ProfileChoice, ReleaseSupport

#: What a pool target may declare beyond :class:`Target`: name -> what the suite does with it.
POOL_HOOKS = MappingProxyType({hook.name: hook.meaning for hook in hooks.POOL_TARGET})

#: What the factory of a pool with vLLM's ``BlockPool`` API may declare (``--target
#: module:factory``; the class, when the factory is the pool class).
POOL_FACTORY_HOOKS = MappingProxyType({hook.name: hook.meaning for hook in hooks.POOL_FACTORY})

#: What a manager target may declare beyond :class:`ManagerTarget`.
MANAGER_HOOKS = MappingProxyType({hook.name: hook.meaning for hook in hooks.MANAGER_TARGET})

#: What a manager target's factory may declare.
MANAGER_FACTORY_HOOKS = MappingProxyType(
    {hook.name: hook.meaning for hook in hooks.MANAGER_FACTORY}
)

#: What an engine driver's factory may declare.
ENGINE_FACTORY_HOOKS = MappingProxyType({hook.name: hook.meaning for hook in hooks.ENGINE_FACTORY})

#: What a consumer (protocol 2 router) may declare beyond ``name``, ``protocol`` and
#: ``credited``.
ROUTER_HOOKS = MappingProxyType({hook.name: hook.meaning for hook in hooks.ROUTER})

__all__ = [
    "CAPABILITIES",
    "ENGINE_FACTORY_HOOKS",
    "EVICT_FIRST",
    "FULL_ATTENTION",
    "GROUP",
    "MANAGER_FACTORY_HOOKS",
    "MANAGER_HOOKS",
    "OBSERVABLES",
    "POOL_FACTORY_HOOKS",
    "POOL_HOOKS",
    "ROUTER_HOOKS",
    "Action",
    "Admit",
    "AllBlocksCleared",
    "Batch",
    "BlockRemoved",
    "BlockStored",
    "ConsumerError",
    "EngineDriver",
    "EngineDriverFactory",
    "EngineEntry",
    "EngineSetup",
    "EventParents",
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
    "Prompt",
    "RefusedByReturn",
    "ReleaseSupport",
    "RequestAction",
    "RequestSetup",
    "ResetCache",
    "Router",
    "Sampled",
    "Scheduled",
    "ScheduledRequest",
    "Submission",
    "Target",
    "TargetDescription",
    "TargetFactory",
    "TargetLoadError",
    "TargetUsageError",
    "Wire",
    "WireFeed",
    "expected_key",
    "load_isolated",
    "refusal",
    "request_block_hashes",
    "wire_hash",
]
