"""SGLang's stream for route-check: the release's own radix cache and its own publisher.

The engine is the radix cache of ``sglang==X`` as ``--target sglang`` runs it (the
release's ``RadixCache`` and paged allocator, built with ``enable_kv_cache_events``), at a
page of the check's block size, driven by the workload's request actions directly (the
suite's lockstep with the spec's manager is not used: SGLang's tree differs from the spec
by design, and the truth here is SGLang's own tree). After each action the tree's events
(``take_events``: one ``BlockStored`` per node, its hash Python's ``hash`` of the node's
tokens, its ``block_size`` the node's length; a ``BlockRemoved`` per node that leaves;
``AllBlocksCleared`` on a reset) become one ``KVEventBatch`` of the release's own classes,
field for field, and are sent by the release's own ``ZmqEventPublisher``
(``srt/disaggregation/kv_events.py``, loaded from the wheel in isolation: it needs only
msgspec, zmq and pydantic). That publisher binds ``tcp://*:PORT``, so it runs only in
route-check's loopback-only namespace.

The truth for a prompt is what SGLang's tree holds of it: the longest run of its leading
tokens along a path of the tree, in whole pages (the tree is read, never matched: SGLang's
``match_prefix`` splits nodes and would publish events). Consumers are asked by tokens
only: a prompt's block hashes cannot be computed without the tree's node boundaries, so
the in-process consumers have nothing to be asked with and only Dynamo's indexer (which
hashes tokens itself) is measured.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from kvpool.spec import PoolConfig, get_profile
from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    EvictCached,
    Finish,
    ManagerConfig,
    ManagerResult,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
)

from ...machines.requests.target import ManagerTarget, RequestSetup
from ...targets.isolated_files import IsolatedLoadError, load_isolated
from ...targets.loading import choose_profile, described, load_manager
from ...targets.releases.files import ReleaseFiles, ReleaseFilesError, cached_files
from ..stream.publisher import PublisherError

MODULE = "sglang.srt.disaggregation.kv_events"
#: Why only the indexer is asked on SGLang's stream.
SGLANG_CONSUMERS = (
    "a prompt's block hashes depend on SGLang's tree nodes; the indexer hashes tokens itself"
)
PUBLISHER_FILES = ReleaseFiles(
    "sglang-publisher",
    "sglang",
    frozenset({"sglang/srt/disaggregation/kv_events.py"}),
    label="SGLang",
    engine="sglang",
)


def is_sglang(target: str) -> bool:
    """Whether ``target`` names an SGLang release or tree (its stream is SGLang's)."""
    return described(target).engine == "sglang"


def load_sglang_publisher(version: str) -> ModuleType:
    """``sglang==version``'s ``kv_events.py``, from the cache or the wheel, in isolation."""
    try:
        root = cached_files(PUBLISHER_FILES, version)
        modules = load_isolated(
            "sglang", {MODULE: root / "sglang" / "srt" / "disaggregation" / "kv_events.py"}
        )
    except (ReleaseFilesError, IsolatedLoadError) as exc:
        raise PublisherError(f"SGLang {version}'s publisher could not be loaded: {exc}") from None
    module = modules[MODULE]
    missing = [
        name
        for name in ("ZmqEventPublisher", "KVEventBatch", "BlockStored", "BlockRemoved")
        if not hasattr(module, name)
    ]
    if missing:
        raise PublisherError(f"SGLang {version}'s kv_events.py has no {', '.join(missing)}")
    return module


def prefetch_sglang(target: str, block_size: int) -> None:
    """Fetch (or find cached) what :class:`SglangEngine` loads: the release's cache files
    and its publisher; :class:`PublisherError` or the loader's error when it cannot."""
    version = described(target).version or ""
    factory, _ = load_manager("auto", f"sglang=={version},page={block_size}")
    if factory is None:
        raise PublisherError(f"{target}: no SGLang manager to drive")
    load_sglang_publisher(version)


class SglangEngine:
    """One SGLang engine: its radix cache driven by request actions, its publisher."""

    def __init__(self, target: str, block_size: int, blocks: int, port: int) -> None:
        version = described(target).version or ""
        factory, _ = load_manager("auto", f"sglang=={version},page={block_size}")
        if factory is None:
            raise PublisherError(f"{target}: no SGLang manager to drive")
        profile = get_profile(choose_profile(target).name)
        setup = RequestSetup(
            ManagerConfig(block_size),
            PoolConfig(blocks, hash_block_size=block_size, enable_kv_cache_events=True),
        )
        self.block_size = block_size
        built: Any = factory(setup, profile)
        self.manager: ManagerTarget = built
        self.cache: Any = built.cache  # the release's RadixCache
        self.events = load_sglang_publisher(version)
        self.publisher = self.events.ZmqEventPublisher(endpoint=f"tcp://*:{port}")

    def apply(self, action: RequestAction) -> tuple[ManagerResult, dict[str, int]]:
        """Run ``action`` on the tree and publish its events as one batch; the result and
        the number of events of each type published."""
        result = self._drive(action)
        batch = [self._event(e) for e in self.cache.take_events()]
        kinds: dict[str, int] = {}
        for event in batch:
            kinds[type(event).__name__] = kinds.get(type(event).__name__, 0) + 1
        if batch:
            self.publisher.publish(self.events.KVEventBatch(ts=time.time(), events=batch))
        return result, kinds

    def _drive(self, action: RequestAction) -> ManagerResult:
        m, rid = self.manager, action.request_id
        match action:
            case Admit(tokens=tokens, salt=salt):
                scheduled = m.admit(rid, tokens, salt)
                if scheduled is not None:
                    m.copies_done(rid)
                return scheduled
            case Resume():
                scheduled = m.resume(rid)
                if scheduled is not None:
                    m.copies_done(rid)
                return scheduled
            case Append(tokens=tokens):
                return m.append(rid, tokens)
            case Compute(cache_partial=cache_partial):
                if m.prepare_write(rid) is None:
                    return None
                m.copies_done(rid)
                return m.commit(rid, cache_partial)
            case Preempt():
                m.preempt(rid)
                return None
            case Finish():
                m.finish(rid)
                return None
            case ResetCache():
                return m.reset_prefix_cache()
            case EvictCached(block_ids=block_ids):
                m.evict_cached(block_ids)
                return None
        raise TypeError(f"not a request action: {action!r}")

    def _event(self, record: Any) -> Any:
        """One of the tree's event records as the release's own event class, field for
        field (the suite loads the tree with records of the same fields)."""
        kind = type(record).__name__
        if kind == "StoredEvent":
            return self.events.BlockStored(
                block_hashes=list(record.block_hashes),
                parent_block_hash=record.parent_block_hash,
                token_ids=[int(t) for t in record.token_ids],
                block_size=int(record.block_size),
                lora_id=record.lora_id,
            )
        if kind == "RemovedEvent":
            return self.events.BlockRemoved(block_hashes=list(record.block_hashes))
        return self.events.AllBlocksCleared()

    def held_blocks(self, tokens: tuple[int, ...]) -> int:
        """How many leading blocks of ``tokens`` the tree holds: the longest common start
        of ``tokens`` with a path from the root, in whole pages."""
        held = 0
        stack: list[tuple[Any, int]] = [(self.cache.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            for child in node.children.values():
                key = [int(t) for t in child.key]
                same = 0
                while same < len(key) and depth + same < len(tokens):
                    if key[same] != tokens[depth + same]:
                        break
                    same += 1
                held = max(held, depth + same)
                if same == len(key):
                    stack.append((child, depth + same))
        return held // self.block_size

    def shutdown(self) -> None:
        self.publisher.shutdown()
