"""kvpool.spec: the executable reference model of a paged KV-cache block pool.

The state is plain data (:class:`PoolState`); :func:`step` applies one :mod:`action
<kvpool.spec.actions>` and returns the next state and the observation a caller must see.
Invariants are named predicates (:mod:`kvpool.spec.invariants`); actions outside the
caller's contract raise :class:`ContractViolation` naming the broken rule.
"""

from .actions import (
    ACTIONS_BY_OPERATION,
    ALL_ACTIONS,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from .config import PoolConfig
from .consumer import (
    CONSUMER_MODELS,
    EVENT_PROPERTIES,
    ConsumerState,
    EventViolation,
    apply_event,
    apply_events,
    consumer_violations,
    new_consumer,
    pool_residency,
    pool_violations,
    residency_of_keys,
)
from .errors import ContractViolation
from .events import AllBlocksCleared, BlockRemoved, BlockStored, Event, canonical_events
from .invariants import INVARIANTS, broken_invariants, invariants_hold
from .observation import Observation, Result
from .profile import PROFILES, SEED, Profile, built_in_profile, get_profile
from .rules import RULES
from .state import NULL_BLOCK, PoolState, PrimaryKey, initial_state
from .step import adopt_allocation, run, step, violation

__all__ = [
    "ACTIONS_BY_OPERATION",
    "ALL_ACTIONS",
    "CONSUMER_MODELS",
    "EVENT_PROPERTIES",
    "INVARIANTS",
    "NULL_BLOCK",
    "PROFILES",
    "RULES",
    "SEED",
    "Action",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "CacheFullBlocks",
    "CachePartialBlock",
    "ConsumerState",
    "ContractViolation",
    "Event",
    "EventViolation",
    "EvictBlocks",
    "FreeBlocks",
    "GetCachedBlock",
    "GetNewBlocks",
    "GetNumFreeBlocks",
    "GetUsage",
    "IsBlockWritable",
    "MoveBlockHashes",
    "Observation",
    "PeerGetNewBlocks",
    "PoolConfig",
    "PoolState",
    "PrimaryKey",
    "Profile",
    "ResetPrefixCache",
    "Result",
    "TakeEvents",
    "Touch",
    "UnpinBlocks",
    "adopt_allocation",
    "apply_event",
    "apply_events",
    "broken_invariants",
    "built_in_profile",
    "canonical_events",
    "consumer_violations",
    "get_profile",
    "initial_state",
    "invariants_hold",
    "new_consumer",
    "pool_residency",
    "pool_violations",
    "residency_of_keys",
    "run",
    "step",
    "violation",
]
