"""A ``RadixCache``'s KV events as the spec's, and the page chain its tree holds.

Both generations' trees publish vLLM's event schema under their own class names
(:func:`spec_events`, with SGLang's integer hashes as the spec's bytes:
:func:`event_hash`); from 0.5 on the tree's recorder names each page by a position-aware
hash, and :func:`event_parents` reads the chain a router rebuilds from the tree under those
hashes (the engine machine's ``events-parent-chain``). The drivers (:mod:`.driver_0_4`,
:mod:`.driver`) read everything else they show from the scheduler's own objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from kvpool.spec import AllBlocksCleared, BlockRemoved, BlockStored, Event


def event_hash(value: int) -> bytes:
    """SGLang's integer hash as the spec's bytes."""
    return int(value).to_bytes(8, "little", signed=True)


def page_event_hashes(
    modules: Mapping[str, ModuleType], cache: Any, node: Any
) -> list[bytes] | None:
    """The hash each page of ``node`` is published under, in order, as the release's
    recorder names it (0.5 on: ``cache.kv_events``, its position-aware hashes namespaced
    as it publishes them); ``None`` where the tree has no such recorder (0.4: one hash per
    node, of its own tokens). Run with the release's ``modules`` active."""
    recorder = getattr(cache, "kv_events", None)
    if recorder is None:
        return None
    events = modules["sglang.srt.disaggregation.kv_events"]
    to_int64 = modules["sglang.srt.mem_cache.utils"].hash_str_to_int64
    seed = recorder._namespace_seed(node)
    return [
        event_hash(events.namespaced_block_hash(int(to_int64(value)), namespace_seed=seed))
        for value in recorder._node_event_hash_values(node)
    ]


def event_parents(
    modules: Mapping[str, ModuleType], cache: Any
) -> dict[tuple[int, bytes], bytes | None] | None:
    """The chain a router rebuilds, as ``cache``'s tree holds it: every page the tree
    holds, under the hash its events give it, mapped to the hash of the page before it on
    its path from the root (``None`` for a sequence's first page). ``None`` where the
    pages' hashes cannot be named (:func:`page_event_hashes`). Run with the release's
    ``modules`` active."""
    if getattr(cache, "kv_events", None) is None:
        return None
    parents: dict[tuple[int, bytes], bytes | None] = {}
    stack: list[tuple[Any, bytes | None]] = [(cache.root_node, None)]
    while stack:
        node, before = stack.pop()
        for child in node.children.values():
            last = before
            for h in page_event_hashes(modules, cache, child) or ():
                parents[(0, h)] = last
                last = h
            stack.append((child, last))
    return parents


def spec_events(taken: Iterable[Any], stored: str, removed: str) -> tuple[Event, ...]:
    """A radix cache's events (``take_events``) as the spec's: its store events are of
    type ``stored``, its removals ``removed``, anything else a clear (both generations
    publish vLLM's schema, under their own class names)."""
    events: list[Event] = []
    for event in taken:
        kind = type(event).__name__
        if kind == stored:
            parent = event.parent_block_hash
            events.append(
                BlockStored(
                    tuple(event_hash(h) for h in event.block_hashes),
                    None if parent is None else event_hash(parent),
                    0,
                    int(event.block_size),
                    len(event.token_ids),
                )
            )
        elif kind == removed:
            events.extend(BlockRemoved(event_hash(h), 0) for h in event.block_hashes)
        else:
            events.append(AllBlocksCleared())
    return tuple(events)


def require_native_hash(modules: Mapping[str, ModuleType], label: str) -> None:
    """The release's node hash compiled (or found compiled), else
    :class:`~.loader.SglangUnavailable` naming what it needs: a failure there is the
    machine's, never a finding of SGLang's."""
    from .loader import SglangUnavailable

    native = modules["sglang.srt.mem_cache.cpp_utils.native_hash"]
    try:
        native._load_native_hash_module()
    except RuntimeError as exc:
        raise SglangUnavailable(
            f"{label} hashes its KV events with its own hash_binding.cpp, compiled "
            "on first use by torch's extension builder (it needs a C++ compiler, ninja and "
            f"OpenSSL's headers): {exc.__cause__ or exc}"
        ) from exc
