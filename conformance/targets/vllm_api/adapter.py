"""A target for any pool with vLLM's ``BlockPool`` API: ours, a user's, vLLM's own.

The adapter turns ids into the pool's block objects, builds the few request fields the pool
reads, records reuse-watcher firings, and reads events back into the spec's vocabulary. It
looks at what the pool offers (methods, ``evict_first``, events, block fields) and declares
only that, so a 20-line pool with ``get_new_blocks``/``free_blocks``/``touch``/
``get_cached_block``/``get_num_free_blocks`` and a ``blocks`` list is already a target.

It also speaks every released vLLM's calling conventions (:class:`PoolApi`, read off the
signatures): constructor arguments, ``touch`` per group, ``prepend``, missing ``block_mask``
or ``replace_existing_hashes``; event hashes published as 64-bit integers are mapped back to
the bytes the adapter handed out, and events without a group id get the group from the
pool's own keys.
"""

from __future__ import annotations

import gc
import inspect
import typing
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kvpool.spec import (
    Action,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    CacheFullBlocks,
    CachePartialBlock,
    Event,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    Observation,
    PeerGetNewBlocks,
    PoolConfig,
    Profile,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.keys import group_of, hash_of, make_key

from ...engine.target import EVICT_FIRST, PoolView
from ..free_list import free_list_order, free_list_problems, sentinels
from ..hash_index import read_index
from ..index_probe import IndexProbe

#: ``factory(num_gpu_blocks=..., enable_caching=..., hash_block_size=...,
#: enable_kv_cache_events=...)`` -> a pool with vLLM's BlockPool API.
PoolFactory = Callable[..., Any]

#: The pool methods the adapter can call, named as the spec's operations.
_METHODS = (
    "get_new_blocks",
    "free_blocks",
    "touch",
    "unpin_blocks",
    "cache_full_blocks",
    "cache_partial_block",
    "get_cached_block",
    "evict_blocks",
    "move_block_hashes",
    "reset_prefix_cache",
    "is_block_writable",
    "get_usage",
    "get_num_free_blocks",
    "take_events",
)


@dataclass
class FakeRequest:
    """The fields of a request that a pool reads: its chained hashes and its tokens."""

    block_hashes: list[bytes]
    all_token_ids: list[int]
    request_id: str = "kvpool-request"
    lora_request: None = None
    session_id: None = None
    mm_features: list[Any] = field(default_factory=list)
    cache_salt: None = None


#: What a request carries when the pool reads a field: no LoRA, no multimodal input, no
#: salt, no prompt embeddings (the hashes the suite draws already include any salt).
REQUEST_DEFAULTS: dict[str, Callable[[list[bytes], list[int]], object]] = {
    "block_hashes": lambda hashes, tokens: hashes,
    "all_token_ids": lambda hashes, tokens: tokens,
    "num_tokens": lambda hashes, tokens: len(tokens),
    "request_id": lambda hashes, tokens: "kvpool-request",
    "lora_request": lambda hashes, tokens: None,
    "cache_salt": lambda hashes, tokens: None,
    "session_id": lambda hashes, tokens: None,
    "prompt_embeds": lambda hashes, tokens: None,
    "_prompt_embeds_per_block_hashes": lambda hashes, tokens: {},
    "mm_features": lambda hashes, tokens: [],
    "mm_positions": lambda hashes, tokens: [],
    "mm_hashes": lambda hashes, tokens: [],
    "mm_inputs": lambda hashes, tokens: [],
}


def request_type(fields: Iterable[str]) -> Callable[[list[bytes], list[int]], Any]:
    """A request class carrying exactly ``fields`` (each one of :data:`REQUEST_DEFAULTS`), so
    that a pool reading any other field fails loudly instead of reading a made-up value."""
    names = tuple(sorted(fields))
    unknown = [n for n in names if n not in REQUEST_DEFAULTS]
    if unknown:
        raise ValueError(f"the pool reads request fields the adapter cannot fill: {unknown}")

    class Request:
        __slots__ = names

        def __init__(self, hashes: list[bytes], tokens: list[int]) -> None:
            for name in names:
                setattr(self, name, REQUEST_DEFAULTS[name](hashes, tokens))

        def __repr__(self) -> str:
            return f"Request({len(self.block_hashes)} block hashes)"  # type: ignore[attr-defined]

    return Request


@dataclass(frozen=True)
class PoolApi:
    """How a pool's methods are called, read off their signatures.

    vLLM's ``BlockPool`` changed its calls over the releases: the constructor's arguments,
    ``touch`` taking one list per KV-cache group (until 0.13), ``free_blocks`` taking
    ``prepend`` (0.23) or ``evict_first`` (the seed), ``cache_full_blocks``'s ``block_mask``
    (0.22), ``cache_partial_block``'s ``replace_existing_hashes`` (0.30), events without a
    group id (until 0.19).
    """

    #: The constructor arguments it takes among the suite's; ``None``: all of them.
    constructor_args: frozenset[str] | None = None
    touch_per_group: bool = False
    #: The name of ``free_blocks``'s "evict these first" flag, or ``None``.
    evict_first_arg: str | None = "evict_first"
    block_mask: bool = True
    replace_existing_hashes: bool = True
    #: Its KV events name the group; if not, the adapter reads it off the pool's keys.
    events_carry_group: bool = True
    #: Builds the request object the pool reads (``None``: :class:`FakeRequest`).
    request: Callable[[list[bytes], list[int]], Any] | None = None


CONSTRUCTOR_ARGS = ("num_gpu_blocks", "enable_caching", "hash_block_size", "enable_kv_cache_events")


def _parameters(function: object) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(inspect.signature(function).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _takes(function: object, name: str, default: bool) -> bool:
    """Whether ``function`` takes an argument ``name`` (``default`` when it cannot tell)."""
    if function is None:
        return False
    params = _parameters(function)
    if params is None:
        return default
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return default
    return name in params


def detect_api(factory: PoolFactory, pool: Any) -> PoolApi:
    """The calling conventions of ``pool`` (built by ``factory``)."""
    params = _parameters(factory)
    constructor: frozenset[str] | None = None
    if params is not None and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    ):
        constructor = frozenset(a for a in CONSTRUCTOR_ARGS if a in params)
    free = getattr(pool, "free_blocks", None)
    evict_first_arg = next((a for a in ("evict_first", "prepend") if _takes(free, a, False)), None)
    return PoolApi(
        constructor_args=constructor,
        touch_per_group=_touch_per_group(getattr(pool, "touch", None)),
        evict_first_arg=evict_first_arg,
        block_mask=_takes(getattr(pool, "cache_full_blocks", None), "block_mask", True),
        replace_existing_hashes=_takes(
            getattr(pool, "cache_partial_block", None), "replace_existing_hashes", True
        ),
        events_carry_group=_events_carry_group(pool),
    )


def _touch_per_group(touch: object) -> bool:
    """Whether ``touch`` takes a tuple of per-group lists (vLLM up to 0.13)."""
    params = _parameters(touch)
    if not params:
        return False
    first = next(iter(params.values()))
    annotation = first.annotation
    if isinstance(annotation, str):
        return annotation.replace(" ", "").startswith(("tuple[", "Tuple["))
    return typing.get_origin(annotation) is tuple


def _events_carry_group(pool: Any) -> bool:
    """Whether the event classes the pool's module publishes have a group id field."""
    method = getattr(type(pool), "get_new_blocks", None)
    namespace = getattr(method, "__globals__", {})
    removed = namespace.get("BlockRemoved")
    if removed is None:
        return True
    fields = getattr(removed, "__struct_fields__", None)
    if fields is None:
        fields = getattr(removed, "__dataclass_fields__", None)
    return fields is None or "group_idx" in fields


def build_pool(
    factory: PoolFactory, config: PoolConfig, num_gpu_blocks: int, api: PoolApi | None = None
) -> Any:
    args: dict[str, object] = {
        "num_gpu_blocks": num_gpu_blocks,
        "enable_caching": config.enable_caching,
        "hash_block_size": config.hash_block_size,
        "enable_kv_cache_events": config.enable_kv_cache_events,
    }
    if api is not None and api.constructor_args is not None:
        args = {k: v for k, v in args.items() if k in api.constructor_args}
    return factory(**args)


#: vLLM publishes event hashes as the low 64 bits of the hash, big-endian, by default.
INT_HASH_MASK = (1 << 64) - 1


def int_hash(block_hash: bytes) -> int:
    return int.from_bytes(block_hash, "big") & INT_HASH_MASK


class VllmApiTarget:
    """Drives a pool with vLLM's ``BlockPool`` API (any release's calling conventions)."""

    #: The release of the pool under test, when known (shown in traces and tables).
    version: str | None = None

    def __init__(
        self,
        factory: PoolFactory,
        config: PoolConfig,
        profile: Profile,
        name: str = "pool",
        check_structure: bool = True,
        api: PoolApi | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.config = config
        self.profile = profile
        self.pool = build_pool(factory, config, config.num_gpu_blocks, api)
        self.api = api if api is not None else detect_api(factory, self.pool)
        self.peer = (
            build_pool(factory, config, config.peer_blocks, self.api)
            if config.peer_blocks
            else None
        )
        self._fired: list[tuple[int, str]] = []
        self._check_structure = check_structure
        #: Hashes the pool was given, by the 64-bit integer vLLM publishes for each.
        self._hashes_by_int: dict[int, bytes] = {}
        #: The group of each event in the pool's queue, when its events do not say.
        self._event_groups: list[int | None] = []
        #: The keys the pool was shown, looked up after every step (see :mod:`.index_probe`).
        self._probe = IndexProbe()
        self._index_readable = (
            read_index(getattr(self.pool, "cached_block_hash_to_block", None)) is not None
        )
        self.operations = self._detect_operations()
        self.observes = self._detect_observables()

    # --- what this pool offers ----------------------------------------------------------

    def takes(self, action: Action) -> bool:
        """Whether the pool's call takes this action's optional arguments: a
        ``block_mask`` or ``replace_existing_hashes`` it has no parameter for is never
        drawn (the pool is judged on what it offers)."""
        if isinstance(action, CacheFullBlocks) and action.block_mask is not None:
            return self.api.block_mask
        if isinstance(action, CachePartialBlock) and action.replace_existing_hashes:
            return self.api.replace_existing_hashes
        return True

    def _detect_operations(self) -> frozenset[str]:
        ops = {op for op in _METHODS if callable(getattr(self.pool, op, None))}
        if "free_blocks" in ops and self.api.evict_first_arg is not None:
            ops.add(EVICT_FIRST)
        if hasattr(self.pool.blocks[0], "pool"):
            ops.add("peer_get_new_blocks")
        return frozenset(ops)

    def _detect_observables(self) -> frozenset[str]:
        seen = set()
        block = self.pool.blocks[0]
        queue = getattr(self.pool, "free_block_queue", None)
        if queue is not None and (
            free_list_order(queue, len(self.pool.blocks)) is not None
            or hasattr(queue, "get_all_free_blocks")
        ):
            seen.add("free_queue")
        if hasattr(block, "ref_cnt"):
            seen.add("ref_cnt")
        if hasattr(block, "block_hash"):
            seen.add("keys")
        if self._index_readable or "get_cached_block" in self.operations:
            seen.add("index")  # read whole, or probed through the pool's lookups
        if "take_events" in self.operations and (self.api.events_carry_group or "keys" in seen):
            seen.add("events")
        if "unpin_blocks" in self.operations:
            seen.add("watchers")
        if "peer_get_new_blocks" in self.operations:
            seen.add("peer")
        if self._check_structure and queue is not None and sentinels(queue) is not None:
            seen.add("structure")
        return frozenset(seen)

    # --- translating ids ----------------------------------------------------------------

    def _blocks(self, ids: tuple[int, ...]) -> list[Any]:
        return [self.pool.blocks[i] for i in ids]

    def _foreign(self, ids: tuple[int, ...]) -> list[Any]:
        if self.peer is not None:
            return [self.peer.blocks[i] for i in ids]
        return [self._orphan_block(i) for i in ids]

    def _orphan_block(self, block_id: int) -> Any:
        """A held block of a pool that no longer exists."""
        gone = build_pool(self.factory, self.config, max(2, block_id + 1), self.api)
        gone.get_new_blocks(block_id)
        block = gone.blocks[block_id]
        del gone
        gc.collect()
        return block

    def _request(self, block_hashes: tuple[bytes, ...]) -> Any:
        tokens = list(range(len(block_hashes) * self.config.hash_block_size))
        hashes = list(block_hashes)
        for h in hashes:
            self._hashes_by_int[int_hash(h)] = h
        if self.api.request is not None:
            return self.api.request(hashes, tokens)
        return FakeRequest(block_hashes=hashes, all_token_ids=tokens)

    def _watcher(self, name: str) -> Callable[[Any], None]:
        def on_reuse(block: Any) -> None:
            self._fired.append((block.block_id, name))

        return on_reuse

    # --- the actions --------------------------------------------------------------------

    def apply(self, action: Action) -> Observation:
        self._fired = []
        tagging = not self.api.events_carry_group and not isinstance(action, TakeEvents)
        queue_before = len(getattr(self.pool, "kv_event_queue", ())) if tagging else 0
        keys_before = self._key_pairs() if tagging else Counter()
        if not self._index_readable:
            self._probe.remember(_keys_named(action))
        try:
            result = self._dispatch(action)
        finally:
            if tagging:
                self._tag_new_events(action, queue_before, keys_before)
        fired = tuple(self._fired)
        if isinstance(action, ResetPrefixCache):
            fired = tuple(sorted(fired))
        return Observation(result, fired)

    def _dispatch(self, action: Action) -> Any:
        pool = self.pool
        match action:
            case GetNewBlocks(num_blocks=n):
                return tuple(b.block_id for b in pool.get_new_blocks(n))
            case PeerGetNewBlocks(num_blocks=n):
                assert self.peer is not None
                return tuple(b.block_id for b in self.peer.get_new_blocks(n))
            case FreeBlocks(blocks=ids, evict_first=evict_first, foreign=foreign):
                blocks = self._blocks(ids) + self._foreign(foreign)
                if evict_first:
                    if self.api.evict_first_arg is None:
                        raise TypeError("this pool's free_blocks has no evict_first argument")
                    pool.free_blocks(blocks, **{self.api.evict_first_arg: True})
                else:
                    pool.free_blocks(blocks)
                return None
            case Touch(blocks=ids):
                pool.touch((self._blocks(ids),) if self.api.touch_per_group else self._blocks(ids))
                return None
            case UnpinBlocks(blocks=ids, watcher=name):
                pool.unpin_blocks(self._blocks(ids), self._watcher(name))
                return None
            case CacheFullBlocks():
                extra: dict[str, object] = {}
                if action.block_mask is not None:
                    if not self.api.block_mask:
                        raise TypeError("this pool's cache_full_blocks has no block_mask argument")
                    extra["block_mask"] = list(action.block_mask)
                pool.cache_full_blocks(
                    self._request(action.block_hashes),
                    self._blocks(action.blocks),
                    action.num_cached_blocks,
                    action.num_full_blocks,
                    action.block_size,
                    action.group_id,
                    **extra,
                )
                return None
            case CachePartialBlock():
                if action.replace_existing_hashes and not self.api.replace_existing_hashes:
                    raise TypeError(
                        "this pool's cache_partial_block has no replace_existing_hashes argument"
                    )
                replace = (
                    {"replace_existing_hashes": action.replace_existing_hashes}
                    if self.api.replace_existing_hashes
                    else {}
                )
                key = pool.cache_partial_block(
                    self._request(action.block_hashes),
                    pool.blocks[action.block],
                    action.num_tokens,
                    action.group_id,
                    action.block_size,
                    **replace,
                )
                return None if key is None else bytes(key)
            case GetCachedBlock(block_hash=block_hash, group_ids=groups):
                hits = pool.get_cached_block(block_hash, list(groups))
                return None if hits is None else tuple(b.block_id for b in hits)
            case EvictBlocks(block_ids=ids):
                pool.evict_blocks(set(ids))
                return None
            case MoveBlockHashes(src=src, dst=dst):
                pool.move_block_hashes(pool.blocks[src], pool.blocks[dst])
                return None
            case ResetPrefixCache():
                return bool(pool.reset_prefix_cache())
            case IsBlockWritable(block=b):
                return bool(pool.is_block_writable(pool.blocks[b]))
            case GetUsage():
                return float(pool.get_usage())
            case GetNumFreeBlocks():
                return int(pool.get_num_free_blocks())
            case TakeEvents():
                raw = list(pool.take_events())
                tags: list[int | None] = [None] * len(raw)
                if not self.api.events_carry_group:
                    tags, self._event_groups = self._event_groups, []
                    if len(tags) != len(raw):
                        raise RuntimeError(
                            f"the pool returned {len(raw)} events but queued {len(tags)}"
                        )
                return tuple(
                    e
                    for event, g in zip(raw, tags, strict=True)
                    for e in self._spec_events(event, g)
                )
        raise TypeError(f"unknown action {action!r}")

    # --- events -------------------------------------------------------------------------

    def _hash(self, value: Any) -> bytes:
        """An event's hash as bytes: vLLM publishes the low 64 bits as an int by default."""
        if isinstance(value, int) and not isinstance(value, bool):
            return self._hashes_by_int.get(value, value.to_bytes(8, "big"))
        return bytes(value)

    @property
    def known_hashes(self) -> dict[int, bytes]:
        """The hashes whose 64-bit ints events may publish, by those ints: the ones of the
        requests this adapter built; a manager adapter adds its own requests' (the dict is
        the adapter's own, so additions count)."""
        return self._hashes_by_int

    def spec_events(self, raw: Any) -> list[Event]:
        """One event the pool published, naming its own group, in the spec's vocabulary."""
        return self._spec_events(raw, None)

    def _spec_events(self, raw: Any, tagged_group: int | None) -> list[Event]:
        """One pool event in the spec's vocabulary (a removal of k keys becomes k events)."""
        kind = type(raw).__name__
        group = getattr(raw, "group_idx", None)
        if group is None:
            group = tagged_group if tagged_group is not None else 0
        if kind == "BlockStored":
            parent = raw.parent_block_hash
            return [
                BlockStored(
                    block_hashes=tuple(self._hash(h) for h in raw.block_hashes),
                    parent_block_hash=None if parent is None else self._hash(parent),
                    group_id=group,
                    block_size=raw.block_size,
                    num_tokens=len(raw.token_ids),
                )
            ]
        if kind == "BlockRemoved":
            return [BlockRemoved(self._hash(h), group) for h in raw.block_hashes]
        if kind == "AllBlocksCleared":
            return [AllBlocksCleared()]
        raise TypeError(f"unknown KV event type {kind}")

    def _key_pairs(self) -> Counter[tuple[int, bytes]]:
        """Every (block, key) of the pool now."""
        view = self._view_of(self.pool, with_peer=False)
        pairs: Counter[tuple[int, bytes]] = Counter()
        for b, keys in enumerate(view.keys or ()):
            pairs.update((b, k) for k in keys)
        return pairs

    def _tag_new_events(
        self, action: Action, queue_before: int, keys_before: Counter[tuple[int, bytes]]
    ) -> None:
        """Give each event this action queued the group its pool did not publish: a store
        belongs to the caching call's group, a removal to the key the pool lost."""
        queue = getattr(self.pool, "kv_event_queue", [])
        new = queue[queue_before:]
        if not new:
            return
        lost = list((keys_before - self._key_pairs()).elements())
        for raw in new:
            kind = type(raw).__name__
            group: int | None = None
            if kind == "BlockStored":
                group = getattr(action, "group_id", None)
            elif kind == "BlockRemoved":
                hashes = [self._hash(h) for h in raw.block_hashes]
                for pair in lost:
                    if hash_of(pair[1]) in hashes:
                        group = group_of(pair[1])
                        lost.remove(pair)
                        break
            self._event_groups.append(group)

    # --- looking inside -----------------------------------------------------------------

    def view(self) -> PoolView:
        view = self._view_of(self.pool, with_peer=True)
        if "index" not in self.observes:
            return view
        if self._index_readable:
            # the index is read whole; a lookup of a key that left it must miss
            in_index = [key for key, _ in view.index or ()]
            self._probe.remember(in_index)
            return replace(view, lookups=self._probe.probe(self._lookup, skip=in_index))
        self._probe.remember(key for keys in view.keys or () for key in keys)
        return replace(view, lookups=self._probe.probe(self._lookup))

    def _lookup(self, key: bytes) -> int | None:
        """The block the pool's lookup returns for ``key`` alone (``None``: a miss)."""
        hits = self.pool.get_cached_block(hash_of(key), [group_of(key)])
        return int(hits[0].block_id) if hits else None

    def _view_of(self, pool: Any, with_peer: bool) -> PoolView:
        blocks = pool.blocks
        queue = getattr(pool, "free_block_queue", None)
        order: tuple[int, ...] | None = None
        if "free_queue" in self.observes and queue is not None:
            walked = free_list_order(queue, len(blocks))
            if walked is None and "structure" not in self.observes:
                walked = [b.block_id for b in queue.get_all_free_blocks()]
            order = tuple(walked) if walked is not None else None
        ref_cnt = tuple(b.ref_cnt for b in blocks) if "ref_cnt" in self.observes else None
        keys = primary = None
        if "keys" in self.observes:
            extra = getattr(pool, "cached_block_hashes_by_block", {})
            primary = tuple(
                bytes(b.block_hash) if b.block_hash is not None else None for b in blocks
            )
            keys = tuple(
                frozenset(
                    ([p] if p is not None else []) + [bytes(k) for k in extra.get(b.block_id, ())]
                )
                for b, p in zip(blocks, primary, strict=True)
            )
        index = None
        if self._index_readable:
            index = read_index(pool.cached_block_hash_to_block)
        peer = None
        if with_peer and self.peer is not None and "peer" in self.observes:
            peer = self._view_of(self.peer, with_peer=False)
        return PoolView(
            free_count=int(pool.get_num_free_blocks()),
            free_queue=order,
            ref_cnt=ref_cnt,
            keys=keys,
            primary=primary,
            index=index,
            peer=peer,
        )

    def structure_problems(self) -> list[str]:
        if "structure" not in self.observes:
            return []
        problems = free_list_problems(self.pool.free_block_queue, self.pool.blocks)
        if self.peer is not None:
            peer_problems = free_list_problems(self.peer.free_block_queue, self.peer.blocks)
            problems += [f"peer pool: {p}" for p in peer_problems]
        return problems


def _keys_named(action: Action) -> list[bytes]:
    """The keys an action hands the pool: each hash of a caching call's request in that
    call's group (a block's key is one of them, or made of them), each group of a lookup."""
    match action:
        case (
            CacheFullBlocks(block_hashes=hashes, group_id=group)
            | CachePartialBlock(block_hashes=hashes, group_id=group)
        ):
            groups: tuple[object, ...] = (group,)
        case GetCachedBlock(block_hash=block_hash, group_ids=groups):
            hashes = (block_hash,)
        case _:
            return []
    # an out-of-contract group (robustness) names no key
    valid = [g for g in groups if isinstance(g, int) and 0 <= g < 2**32]
    return [make_key(h, g) for h in hashes for g in valid if isinstance(h, bytes)]
