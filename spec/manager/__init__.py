"""kvpool.spec.manager: the request level, a KV cache manager over the spec's pool.

Requests hold one block table per KV-cache group. A :mod:`request action
<kvpool.spec.manager.actions>` runs as a program of pool calls (:func:`apply_request`), so
the same program drives the spec's pool or a pool under test; :func:`manager_step` runs it
on the spec. The request-level properties are named checks in :mod:`.properties`.
"""

from .actions import (
    REQUEST_ACTIONS,
    REQUEST_ACTIONS_BY_OPERATION,
    Admit,
    Append,
    Compute,
    EvictCached,
    Finish,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
)
from .config import FULL_ATTENTION, KVGroup, ManagerConfig
from .extra_keys import (
    ALL_ATTRIBUTES,
    ATTRIBUTES,
    NO_EXTRA,
    ExtraKeys,
    LoraAdapter,
    MultiModalFeature,
    Signature,
)
from .pool import PoolCall, SpecPool
from .properties import PROPERTIES, Broken
from .report import FULL, INCREMENTAL, REPORT_MODES, ResentStore, resent_events
from .state import (
    BlockData,
    ManagerState,
    RequestState,
    Scheduled,
    Tables,
    block_hashes,
    initial_manager_state,
)
from .step import ManagerResult, apply_request, manager_step, request_violation

__all__ = [
    "ALL_ATTRIBUTES",
    "ATTRIBUTES",
    "FULL",
    "FULL_ATTENTION",
    "INCREMENTAL",
    "NO_EXTRA",
    "PROPERTIES",
    "REPORT_MODES",
    "REQUEST_ACTIONS",
    "REQUEST_ACTIONS_BY_OPERATION",
    "Admit",
    "Append",
    "BlockData",
    "Broken",
    "Compute",
    "EvictCached",
    "ExtraKeys",
    "Finish",
    "KVGroup",
    "LoraAdapter",
    "ManagerConfig",
    "ManagerResult",
    "ManagerState",
    "MultiModalFeature",
    "PoolCall",
    "Preempt",
    "RequestAction",
    "RequestState",
    "ResentStore",
    "ResetCache",
    "Resume",
    "Scheduled",
    "Signature",
    "SpecPool",
    "Tables",
    "apply_request",
    "block_hashes",
    "initial_manager_state",
    "manager_step",
    "request_violation",
    "resent_events",
]
