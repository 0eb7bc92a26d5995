"""The pool operations, each declared once.

One :class:`PoolOperation` per operation says everything the suite knows about it: its
action type (``kvpool.spec.actions``) and the spec's rule for it (``kvpool.spec.step``'s
``TRANSITIONS``, pointed at by :attr:`PoolOperation.rule`: the spec keeps its own
dispatch, in the order of its prose), how the pool machine draws it inside the contract
and outside it, how often, the call it makes on a pool with vLLM's ``BlockPool`` API (with
the reference page's words for each argument), and which of its return values is a
refusal. The pool machine (:mod:`.machine`), the vectors' generator, the vLLM-API
adapter's dispatch, the surface check (:mod:`.surface`), refusals by return value
(:mod:`.refusal`), the standalone vectors runner (through ``tools/vectors/pool_calls.json``),
the wire protocol (the actions it carries and its schema) and the docs' reference all read
:data:`POOL_OPERATIONS`; adding an operation is adding one
record here (and its action, rule and drawers where those live).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from kvpool.spec import (
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
    PoolState,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.errors import ContractViolation
from kvpool.spec.observation import Observation
from kvpool.spec.step import TRANSITIONS

from . import draw
from .draw import BadDrawer, Drawer
from .draw_facts import Fact
from .pool_call import Argument, Keyword, PoolCall

Rule = tuple[
    Callable[[PoolState, Action], ContractViolation | None],
    Callable[[PoolState, Action], tuple[PoolState, Observation]],
]


@dataclass(frozen=True)
class PoolOperation:
    """One pool operation, as every part of the suite sees it."""

    #: The spec's action type (its ``operation`` is this operation's name).
    action: type[Action]
    #: How often the pool machine draws it, relative to the others.
    weight: int
    #: Its draw inside the contract.
    draw: Drawer
    #: The call it makes on a pool with vLLM's ``BlockPool`` API.
    call: PoolCall
    #: Its draws outside the contract (the robustness level): each breaks one rule, or
    #: gives ``None`` when the state offers no way to.
    bad_draws: tuple[BadDrawer, ...] = ()
    #: It is drawn only when all of these hold.
    needs: frozenset[str] = frozenset()
    #: It is drawn four times as often when any of these holds.
    boosted_by: frozenset[str] = frozenset()
    #: The return values (compared by identity) by which a pool whose profile says
    #: ``refuses_by_return`` refuses the call: a ``False`` where the taken call returns
    #: nothing, no list where it returns blocks. Empty: its return value is its result,
    #: never a refusal (``reset_prefix_cache``'s ``False`` says blocks are held).
    refused_by_returning: tuple[object, ...] = ()
    #: Why every run calls it (said in the message asking a pool for it); empty when a
    #: pool may lack it.
    required: str = ""
    #: The watcher firings it causes come in no set order (they are compared sorted).
    fires_in_any_order: bool = False

    #: Its name (the action's ``operation``).
    name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.action.operation)

    @property
    def rule(self) -> Rule:
        """The spec's contract check and transition for it."""
        return TRANSITIONS[self.action]


_BLOCK_OBJECTS = (
    "block objects taken from `pool.blocks` by id (the suite never builds blocks itself)"
)
_STATUS = (False,)
_AS_FOR_FULL = "as for `cache_full_blocks`"

#: Every pool operation, in the order the pool machine weighs them (its draws depend on it).
POOL_OPERATIONS: tuple[PoolOperation, ...] = (
    PoolOperation(
        GetNewBlocks,
        weight=6,
        draw=draw.draw_get_new_blocks,
        bad_draws=(draw.bad_allocation,),
        refused_by_returning=(None, False),
        required="get_new_blocks(num_blocks) -> list of blocks, taken from the free queue",
        call=PoolCall(
            "get_new_blocks",
            (
                Argument(
                    "num_blocks",
                    "num_blocks",
                    "value",
                    "how many blocks to hand out: from 0 up to the free count; at the "
                    "robustness level also negative counts and more than are free, which the "
                    "pool must refuse (raise) without changing anything",
                ),
            ),
            "block_ids",
            "a list of blocks; the suite compares their `block_id`s, in order (at the "
            "`order` level the exact blocks, at `safety` any free ones)",
        ),
    ),
    PoolOperation(
        FreeBlocks,
        weight=4,
        draw=draw.draw_free_blocks,
        bad_draws=(draw.bad_double_free, draw.bad_foreign),
        needs=frozenset({Fact.HELD}),
        refused_by_returning=_STATUS,
        required="free_blocks(ordered_blocks) -> None, each block's ref_cnt down by one",
        call=PoolCall(
            "free_blocks",
            (
                Argument(
                    "ordered_blocks",
                    "blocks",
                    "blocks",
                    f"the blocks to release, as {_BLOCK_OBJECTS}, in the order a request "
                    "frees them (tail first); one block may be listed several times, and at "
                    "the robustness level more often than it is held; with a peer pool, "
                    "blocks of the peer may be mixed in (the pool hands those to their own "
                    "pool)",
                    foreign="foreign",
                ),
            ),
            "nothing",
            "nothing; the suite then reads the free queue, the counts and the keys",
            keywords=(
                Keyword(
                    "evict_first",
                    "evict_first",
                    "value",
                    "when true, blocks reaching a count of 0 go to the front of the free "
                    "queue even if they carry a key; the suite passes it only to pools whose "
                    "`free_blocks` takes it (vLLM 0.23 calls it `prepend`)",
                    api="evict_first_arg",
                    offered_as_operation=True,
                ),
            ),
        ),
    ),
    PoolOperation(
        Touch,
        weight=4,
        draw=draw.draw_touch,
        bad_draws=(draw.bad_touch,),
        needs=frozenset({Fact.HIT}),
        refused_by_returning=_STATUS,
        call=PoolCall(
            "touch",
            (
                Argument(
                    "blocks",
                    "blocks",
                    "blocks",
                    f"cache hits to take a reference on, as {_BLOCK_OBJECTS}; free ones "
                    "leave the free queue (vLLM before 0.14 takes one list per group: the "
                    "adapter wraps them)",
                    per_group="touch_per_group",
                ),
            ),
            "nothing",
            "nothing",
        ),
    ),
    PoolOperation(
        UnpinBlocks,
        weight=2,
        draw=draw.draw_unpin_blocks,
        bad_draws=(draw.bad_unpin,),
        needs=frozenset({Fact.HELD}),
        boosted_by=frozenset({Fact.SHARED}),
        refused_by_returning=_STATUS,
        call=PoolCall(
            "unpin_blocks",
            (
                Argument(
                    "blocks",
                    "blocks",
                    "blocks",
                    f"held blocks to release while their contents are still read, as "
                    f"{_BLOCK_OBJECTS}",
                ),
                Argument(
                    "on_reuse",
                    "watcher",
                    "watcher",
                    "a callable the pool calls with the block when it hands the block out "
                    "again or resets the cache; the suite records each call and compares them",
                ),
            ),
            "nothing",
            "nothing",
        ),
    ),
    PoolOperation(
        CacheFullBlocks,
        weight=5,
        draw=draw.draw_cache_full_blocks,
        bad_draws=(draw.bad_cache,),
        needs=frozenset({Fact.HELD, Fact.CACHING}),
        refused_by_returning=_STATUS,
        call=PoolCall(
            "cache_full_blocks",
            (
                Argument(
                    "request",
                    "block_hashes",
                    "request",
                    "an object with `block_hashes` (a list of bytes: the request's chained "
                    "hashes, one per `hash_block_size` tokens) and `all_token_ids`; it raises "
                    "on any other field the pool reads that the suite cannot fill",
                ),
                Argument(
                    "blocks", "blocks", "blocks", f"the request's block table, as {_BLOCK_OBJECTS}"
                ),
                Argument(
                    "num_cached_blocks",
                    "num_cached_blocks",
                    "value",
                    "how many leading blocks of the table are already cached",
                ),
                Argument(
                    "num_full_blocks",
                    "num_full_blocks",
                    "value",
                    "how many leading blocks are full; blocks from `num_cached_blocks` up to "
                    "this one are to be cached",
                ),
                Argument(
                    "block_size",
                    "block_size",
                    "value",
                    "tokens per block, a multiple of `hash_block_size`; a block's key is the "
                    "request's last hash inside the block",
                ),
                Argument(
                    "kv_cache_group_id",
                    "group_id",
                    "value",
                    "the KV-cache group, appended to each hash as 4 big-endian bytes to make "
                    "the key",
                ),
            ),
            "nothing",
            "nothing; the suite reads every block's keys and the index afterwards, and the "
            "`BlockStored` event when events are on",
            keywords=(
                Keyword(
                    "block_mask",
                    "block_mask",
                    "list",
                    "optional: one flag per block of the table; a block whose flag is false is "
                    "not cached (the suite passes it only to pools that take it)",
                    api="block_mask",
                ),
            ),
        ),
    ),
    PoolOperation(
        CachePartialBlock,
        weight=2,
        draw=draw.draw_cache_partial_block,
        bad_draws=(draw.bad_partial,),
        needs=frozenset({Fact.HELD, Fact.CACHING}),
        boosted_by=frozenset({Fact.RARE}),
        call=PoolCall(
            "cache_partial_block",
            (
                Argument("request", "block_hashes", "request", _AS_FOR_FULL),
                Argument(
                    "block",
                    "block",
                    "block",
                    "the block holding the request's partial tail, from `pool.blocks`",
                ),
                Argument(
                    "num_tokens",
                    "num_tokens",
                    "value",
                    "how many prefix tokens the entry covers: a positive multiple of "
                    "`hash_block_size` (others must be refused)",
                ),
                Argument("kv_cache_group_id", "group_id", "value", "the KV-cache group of the key"),
                Argument("block_size", "block_size", "value", "tokens per block"),
            ),
            "key_or_none",
            "the key registered (bytes: the hash with the group suffix), or `None` for the "
            "null block",
            keywords=(
                Keyword(
                    "replace_existing_hashes",
                    "replace_existing_hashes",
                    "value",
                    "optional (vLLM 0.30 on): drop the block's older partial keys first",
                    api="replace_existing_hashes",
                    always=True,
                ),
            ),
        ),
    ),
    PoolOperation(
        GetCachedBlock,
        weight=3,
        draw=draw.draw_get_cached_block,
        boosted_by=frozenset({Fact.JUST_DROPPED, Fact.RARE}),
        call=PoolCall(
            "get_cached_block",
            (
                Argument(
                    "block_hash",
                    "block_hash",
                    "hash",
                    "a block hash without the group suffix (bytes)",
                ),
                Argument(
                    "kv_cache_group_ids",
                    "group_ids",
                    "list",
                    "the groups to look in; every one must hit",
                ),
            ),
            "block_ids_or_none",
            "a list of one block per group (compared by `block_id`), or `None` when any "
            "group misses",
        ),
    ),
    PoolOperation(
        EvictBlocks,
        weight=2,
        draw=draw.draw_evict_blocks,
        bad_draws=(draw.bad_evict,),
        boosted_by=frozenset({Fact.DUPLICATES, Fact.EVENTS_TWO_KEYS, Fact.RARE}),
        refused_by_returning=_STATUS,
        call=PoolCall(
            "evict_blocks",
            (
                Argument(
                    "block_ids", "block_ids", "set", "a set of block ids (ints) whose keys to strip"
                ),
            ),
            "nothing",
            "nothing",
        ),
    ),
    PoolOperation(
        MoveBlockHashes,
        weight=1,
        draw=draw.draw_move_block_hashes,
        bad_draws=(draw.bad_move,),
        needs=frozenset({Fact.UNKEYED}),
        boosted_by=frozenset({Fact.EXTRA_KEYS, Fact.RARE}),
        refused_by_returning=_STATUS,
        call=PoolCall(
            "move_block_hashes",
            (
                Argument(
                    "src_block", "src", "block", "the block whose keys move, from `pool.blocks`"
                ),
                Argument("dst_block", "dst", "block", "a block without keys that takes them"),
            ),
            "nothing",
            "nothing",
        ),
    ),
    PoolOperation(
        IsBlockWritable,
        weight=3,  # one block per call, and a cell for each of eleven states
        draw=draw.draw_is_block_writable,
        boosted_by=frozenset({Fact.RARE}),
        call=PoolCall(
            "is_block_writable",
            (
                Argument(
                    "block",
                    "block",
                    "block",
                    "any block from `pool.blocks`, the null block included",
                ),
            ),
            "bool",
            "a bool",
        ),
    ),
    PoolOperation(
        PeerGetNewBlocks,
        weight=1,
        draw=draw.draw_peer_get_new_blocks,
        needs=frozenset({Fact.PEER}),
        call=PoolCall(
            "get_new_blocks",
            (
                Argument(
                    "num_blocks",
                    "num_blocks",
                    "value",
                    "as for `get_new_blocks`, on the second pool",
                ),
            ),
            "block_ids",
            "the peer's blocks, by `block_id`",
            on_peer=True,
            on="the peer pool (a second pool the factory built, reached as `pool.peer` or "
            "through the adapter; only targets that declare one get this action)",
        ),
    ),
    PoolOperation(
        ResetPrefixCache,
        weight=1,
        draw=draw.always(ResetPrefixCache()),
        boosted_by=frozenset({Fact.IDLE, Fact.RARE_HELD}),
        fires_in_any_order=True,
        call=PoolCall(
            "reset_prefix_cache",
            (),
            "bool",
            "`True` when the cache was cleared, `False` when refused",
        ),
    ),
    PoolOperation(
        GetUsage,
        weight=1,
        draw=draw.always(GetUsage()),
        boosted_by=frozenset({Fact.RARE}),
        call=PoolCall("get_usage", (), "float", "a float between 0 and 1"),
    ),
    PoolOperation(
        GetNumFreeBlocks,
        weight=1,
        draw=draw.always(GetNumFreeBlocks()),
        boosted_by=frozenset({Fact.RARE}),
        required="get_num_free_blocks() -> int, the free-queue length (read after every step)",
        call=PoolCall("get_num_free_blocks", (), "int", "an int, the free count"),
    ),
    PoolOperation(
        TakeEvents,
        weight=2,
        draw=draw.always(TakeEvents()),
        boosted_by=frozenset({Fact.RARE}),
        call=PoolCall(
            "take_events",
            (),
            "events",
            "the events published since the last call, oldest first, and forgets them; every "
            "field of each event is listed below, under *Events a pool publishes*",
        ),
    ),
)


def named(name: str) -> PoolOperation:
    """The operation called ``name`` (``KeyError`` when there is none)."""
    if _Index.table is POOL_OPERATIONS:  # the table indexed last: no call on every step
        return _Index.by_name[name]
    return _indexed()[0][name]


def of(action: Action) -> PoolOperation:
    """The operation ``action`` stands for (``KeyError`` when there is none)."""
    if _Index.table is POOL_OPERATIONS:
        return _Index.by_action[type(action)]
    return _indexed()[1][type(action)]


def names_peer_blocks(action: Action) -> bool:
    """Whether ``action`` lists blocks of the peer pool (a ``foreign`` field set)."""
    return any(getattr(action, a.foreign) for a in of(action).call.arguments if a.foreign)


def _indexed() -> tuple[dict[str, PoolOperation], dict[type[Action], PoolOperation]]:
    """:data:`POOL_OPERATIONS` by name and by action type, worked out again only when the
    table is another one (a test extends it)."""
    if _Index.table is not POOL_OPERATIONS:
        _Index.table = POOL_OPERATIONS
        _Index.by_name = {op.name: op for op in POOL_OPERATIONS}
        _Index.by_action = {op.action: op for op in POOL_OPERATIONS}
    return _Index.by_name, _Index.by_action


class _Index:
    """The table last indexed, and its indexes."""

    table: ClassVar[tuple[PoolOperation, ...]] = ()
    by_name: ClassVar[dict[str, PoolOperation]] = {}
    by_action: ClassVar[dict[type[Action], PoolOperation]] = {}
