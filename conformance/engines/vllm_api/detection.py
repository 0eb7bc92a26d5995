"""A pool's calling conventions, read off its signatures (every released vLLM's), and the
pool built with the constructor arguments it takes."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvpool.spec import PoolConfig

#: ``factory(num_gpu_blocks=..., enable_caching=..., hash_block_size=...,
#: enable_kv_cache_events=...)`` -> a pool with vLLM's BlockPool API.
PoolFactory = Callable[..., Any]


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
    #: Where foreign-pool routing (vLLM 0.30's ``KVCacheBlock.pool``) was found, or
    #: ``None``: its blocks link to their pool, and a block of another pool freed through
    #: it went back to that pool (:func:`foreign_pool_routing`).
    foreign_pool: str | None = None
    #: Why a block attribute named ``pool`` was not taken as routing (``None``: no such
    #: attribute, or it was).
    foreign_pool_note: str | None = None


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


#: The methods whose signatures :func:`detect_api` reads.
_READ = ("free_blocks", "touch", "cache_full_blocks", "cache_partial_block", "get_new_blocks")
#: Conventions already read, by the factory, the pool's class and the functions behind the
#: methods read (the keys hold them, so an id is never another object's).
_DETECTED: dict[tuple[object, ...], PoolApi] = {}


def detect_api(factory: PoolFactory, pool: Any) -> PoolApi:
    """The calling conventions of ``pool`` (built by ``factory``): read off the signatures
    once per factory, pool class and methods (a test case builds a pool for each case; the
    signatures are the same every time)."""
    methods = (getattr(pool, name, None) for name in _READ)
    key = (factory, type(pool), *(getattr(m, "__func__", m) for m in methods))
    try:
        api = _DETECTED.get(key)
    except TypeError:  # an unhashable factory or method: read every time
        return _read_api(factory, pool)
    if api is None:
        if len(_DETECTED) >= 64:
            _DETECTED.clear()
        api = _DETECTED[key] = _read_api(factory, pool)
    return api


def _read_api(factory: PoolFactory, pool: Any) -> PoolApi:
    params = _parameters(factory)
    constructor: frozenset[str] | None = None
    if params is not None and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    ):
        constructor = frozenset(a for a in CONSTRUCTOR_ARGS if a in params)
    free = getattr(pool, "free_blocks", None)
    evict_first_arg = next((a for a in ("evict_first", "prepend") if _takes(free, a, False)), None)
    api = PoolApi(
        constructor_args=constructor,
        touch_per_group=_touch_per_group(getattr(pool, "touch", None)),
        evict_first_arg=evict_first_arg,
        block_mask=_takes(getattr(pool, "cache_full_blocks", None), "block_mask", True),
        replace_existing_hashes=_takes(
            getattr(pool, "cache_partial_block", None), "replace_existing_hashes", True
        ),
        events_carry_group=_events_carry_group(pool),
    )
    found, note = foreign_pool_routing(factory, pool, api)
    return dataclasses.replace(api, foreign_pool=found, foreign_pool_note=note)


#: Where :func:`foreign_pool_routing` says routing was found.
ROUTING_FOUND = "blocks[0].pool names its pool; another pool's block freed here went back"


def foreign_pool_routing(
    factory: PoolFactory, pool: Any, api: PoolApi
) -> tuple[str | None, str | None]:
    """Whether the pool hands a block of another pool back to it (vLLM 0.30's
    ``KVCacheBlock.pool``): (where found, ``None``) if so, else (``None``, why not) when its
    blocks have a ``pool`` attribute, (``None``, ``None``) when they have none.

    An attribute named ``pool`` alone says nothing: it must link the block to the pool
    that holds it (the pool itself, or a callable giving it), and two pools built by the
    factory must show it: a block taken from one and freed through the other goes back to
    the first, and the second's free count does not move."""
    blocks = getattr(pool, "blocks", None)
    try:
        link = getattr(blocks[0], "pool", None) if blocks else None
    except Exception:  # blocks that cannot be indexed: no link to read
        return None, None
    if link is None:
        return None, None
    try:
        links = link is pool or (callable(link) and link() is pool)
    except Exception:  # calling the link failed: it is no link to the pool
        links = False
    if not links:
        return None, "blocks[0].pool is there, but does not name the pool holding it"
    try:
        mine = build_pool(factory, PoolConfig(4), 4, api)
        other = build_pool(factory, PoolConfig(4), 4, api)
        if mine is other:
            return None, "blocks[0].pool is there, but the factory builds one pool only"
        free_mine, free_other = mine.get_num_free_blocks(), other.get_num_free_blocks()
        (block,) = other.get_new_blocks(1)
        mine.free_blocks([block])
        routed = (mine.get_num_free_blocks(), other.get_num_free_blocks()) == (
            free_mine,
            free_other,
        )
    except Exception as exc:  # the pool refused the other pool's block: it routes nothing
        name = type(exc).__name__
        return None, f"blocks[0].pool is there; another pool's block freed here raised {name}"
    if not routed:
        return None, "blocks[0].pool is there; another pool's block freed here did not go back"
    return ROUTING_FOUND, None


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
