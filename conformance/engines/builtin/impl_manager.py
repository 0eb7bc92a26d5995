"""Our KV cache manager (``kvpool.impl.KVCacheManager``) as a manager target."""

from __future__ import annotations

from typing import Any, cast

from kvpool.impl.kv_cache_manager import Scheduled as ImplScheduled
from kvpool.spec import Event, EvictBlocks, Profile, TakeEvents
from kvpool.spec.manager import (
    ALL_ATTRIBUTES,
    INCREMENTAL,
    NO_EXTRA,
    REPORT_MODES,
    ExtraKeys,
    Scheduled,
)

from ...machines.pool.target import PoolView
from ...machines.requests.key_pairing import KeyPairing
from ...machines.requests.target import RequestSetup
from ..vllm_api.adapter import VllmApiTarget


def scheduled(result: Any) -> Scheduled | None:
    """The impl's result in the spec's vocabulary (our manager's tables and copies are
    tuples of tuples already; another manager's are copied into tuples)."""
    if result is None:
        return None
    if type(result) is ImplScheduled:
        return Scheduled(result.num_computed_tokens, result.block_ids, result.copies)
    return Scheduled(
        result.num_computed_tokens,
        tuple(map(tuple, result.block_ids)),
        tuple(map(tuple, result.copies)),
    )


class ManagerApiTarget:
    """Drives a manager with the impl's ``KVCacheManager`` API; its pool is read through
    the pool adapter, so everything the pool shows is compared. A manager hashing as a
    vLLM release does (its ``hashing`` set), or any one with ``paired``, has its keys read
    in the spec's hashes, each request's paired with the spec's for the same tokens and
    attributes."""

    #: Every partitioning attribute is taken with a request (LoRA, images, embeddings).
    extra_keys_taken = ALL_ATTRIBUTES
    #: A request is taken in either report mode (``report_mode``).
    report_modes_taken = frozenset(REPORT_MODES)

    def __init__(
        self,
        manager: Any,
        setup: RequestSetup,
        profile: Profile,
        name: str,
        paired: bool | None = None,
    ) -> None:
        self.name = name
        self.manager = manager
        self.pool = VllmApiTarget(lambda **_: manager.block_pool, setup.pool, profile, name)
        self.observes = self.pool.observes
        #: The manager's block hashes -> the spec's, where they differ.
        self.pairing: KeyPairing | None = None
        if paired or (paired is None and getattr(manager, "hashing", None) is not None):
            self.pairing = KeyPairing(setup.pool.hash_block_size, profile.key_attributes)
        #: Requests whose hashes may have grown since the last look, with their attributes.
        self.unpaired: dict[str, tuple[Any, str | None, ExtraKeys]] = {}
        self.extras: dict[str, tuple[str | None, ExtraKeys]] = {}

    def _hashed(self, request_id: str) -> None:
        """Note that ``request_id``'s hashes may have grown (paired at the next look)."""
        held = self.manager.requests.get(request_id)
        if held is not None:
            salt, extra = self.extras[request_id]
            self.unpaired[request_id] = (held.request, salt, extra)

    def admit(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        salt: str | None,
        extra: ExtraKeys = NO_EXTRA,
        report_mode: str = INCREMENTAL,
    ) -> Scheduled | None:
        lora = None if extra.lora is None else (extra.lora.name, extra.lora.path)
        # a manager of the impl's API older than report modes is given only the default
        mode = {} if report_mode == INCREMENTAL else {"report_mode": report_mode}
        features = [(f.identifier, f.offset, f.length) for f in extra.mm]
        result = scheduled(
            self.manager.admit(
                request_id,
                tokens,
                salt,
                lora=lora,
                mm_features=features,
                prompt_embeds=extra.embeds,
                **mode,
            )
        )
        if self.pairing is not None:
            self.extras[request_id] = (salt, extra)
            self._hashed(request_id)
        return result

    def resume(self, request_id: str) -> Scheduled | None:
        return scheduled(self.manager.resume(request_id))

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        result = scheduled(self.manager.append(request_id, tokens))
        if self.pairing is not None:
            self._hashed(request_id)
        return result

    def prepare_write(self, request_id: str) -> Scheduled | None:
        return scheduled(self.manager.prepare_write(request_id))

    def copies_done(self, request_id: str) -> None:
        self.manager.copies_done(request_id)

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        result = scheduled(self.manager.commit(request_id, cache_partial))
        assert result is not None
        return result

    def preempt(self, request_id: str) -> None:
        self.manager.preempt(request_id)

    def finish(self, request_id: str) -> None:
        self.manager.finish(request_id)
        self.extras.pop(request_id, None)

    def reset_prefix_cache(self) -> bool:
        return bool(self.manager.reset_prefix_cache())

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        self.pool.apply(EvictBlocks(block_ids))

    def is_block_writable(self, block: int) -> bool:
        return bool(self.manager.is_block_writable(block))

    def take_events(self) -> tuple[Event, ...] | None:
        """The KV events its pool published since the last call; ``None`` when it shows
        none or its events do not name their group (the pool adapter tags them only on
        calls it makes itself, and the manager calls the pool directly)."""
        if "events" not in self.observes or not self.pool.api.events_carry_group:
            return None
        events = self.pool.apply(TakeEvents()).result
        assert isinstance(events, tuple)
        if self.pairing is None:
            return cast("tuple[Event, ...]", events)
        self._pair()
        return self.pairing.events(cast("tuple[Event, ...]", events))

    def _pair(self) -> None:
        """Pair the hashes of every request that may have grown since the last look."""
        assert self.pairing is not None
        for request, salt, extra in self.unpaired.values():
            self.pairing.pair(request.block_hashes, request.all_token_ids, salt, extra)
        self.unpaired.clear()

    def view(self) -> PoolView:
        if self.pairing is None:
            return self.pool.view()
        self._pair()
        return self.pairing.view(self.pool.view())

    def structure_problems(self) -> list[str]:
        return self.pool.structure_problems()


def build_impl_manager(manager_class: Any, setup: RequestSetup, hashing: Any = None) -> Any:
    """A manager of ``manager_class`` (the impl's, or a subclass) built for ``setup``,
    hashing as the spec does, or as ``hashing`` (a ``ReleaseHashing``) says."""
    from kvpool.impl import KVCacheGroupSpec

    groups = tuple(
        KVCacheGroupSpec(
            sliding_window_blocks=g.sliding_window_blocks,
            sliding_window_rest=g.sliding_window_rest,
        )
        for g in setup.manager.groups
    )
    pool = setup.pool
    return manager_class(
        num_gpu_blocks=pool.num_gpu_blocks,
        block_size=setup.manager.block_size,
        groups=groups,
        enable_caching=pool.enable_caching,
        hash_block_size=pool.hash_block_size,
        enable_kv_cache_events=pool.enable_kv_cache_events,
        **({} if hashing is None else {"hashing": hashing}),
    )


def impl_manager_target(setup: RequestSetup, profile: Profile) -> ManagerApiTarget:
    from kvpool.impl import KVCacheManager

    return ManagerApiTarget(build_impl_manager(KVCacheManager, setup), setup, profile, "impl")


#: The release whose hashing :func:`vllm_hashed_manager_target` takes.
HASHED_LIKE = "0.33.0"


def vllm_hashed_manager_target(setup: RequestSetup, profile: Profile) -> ManagerApiTarget:
    """Our manager hashing its blocks as vLLM 0.33.0 does (``sha256``, the release's
    default), for ``kvpool conform --manager`` with
    ``kvpool.conformance.engines.builtin.impl_manager:vllm_hashed_manager_target``."""
    from kvpool.impl import KVCacheManager
    from kvpool.impl.release_hashing import vllm_hashing

    manager = build_impl_manager(KVCacheManager, setup, vllm_hashing(HASHED_LIKE))
    return ManagerApiTarget(manager, setup, profile, "impl, hashed as vLLM 0.33.0")
