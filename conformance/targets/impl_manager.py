"""Our KV cache manager (``kvpool.impl.KVCacheManager``) as a manager target."""

from __future__ import annotations

from typing import Any, cast

from kvpool.spec import Event, EvictBlocks, Profile, TakeEvents
from kvpool.spec.manager import ALL_ATTRIBUTES, NO_EXTRA, ExtraKeys, Scheduled

from ..engine.target import PoolView
from ..manager.target import RequestSetup
from .vllm_api.adapter import VllmApiTarget


def scheduled(result: Any) -> Scheduled | None:
    """The impl's result in the spec's vocabulary."""
    if result is None:
        return None
    return Scheduled(
        result.num_computed_tokens,
        tuple(map(tuple, result.block_ids)),
        tuple(map(tuple, result.copies)),
    )


class ManagerApiTarget:
    """Drives a manager with the impl's ``KVCacheManager`` API; its pool is read through
    the pool adapter, so everything the pool shows is compared."""

    #: Every partitioning attribute is taken with a request (LoRA, images, embeddings).
    extra_keys_taken = ALL_ATTRIBUTES

    def __init__(self, manager: Any, setup: RequestSetup, profile: Profile, name: str) -> None:
        self.name = name
        self.manager = manager
        self.pool = VllmApiTarget(lambda **_: manager.block_pool, setup.pool, profile, name)
        self.observes = self.pool.observes

    def admit(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        salt: str | None,
        extra: ExtraKeys = NO_EXTRA,
    ) -> Scheduled | None:
        lora = None if extra.lora is None else (extra.lora.name, extra.lora.path)
        features = [(f.identifier, f.offset, f.length) for f in extra.mm]
        return scheduled(
            self.manager.admit(
                request_id,
                tokens,
                salt,
                lora=lora,
                mm_features=features,
                prompt_embeds=extra.embeds,
            )
        )

    def resume(self, request_id: str) -> Scheduled | None:
        return scheduled(self.manager.resume(request_id))

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        return scheduled(self.manager.append(request_id, tokens))

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
        return cast("tuple[Event, ...]", events)

    def view(self) -> PoolView:
        return self.pool.view()

    def structure_problems(self) -> list[str]:
        return self.pool.structure_problems()


def build_impl_manager(manager_class: Any, setup: RequestSetup) -> Any:
    """A manager of ``manager_class`` (the impl's, or a subclass) built for ``setup``."""
    from kvpool.impl import KVCacheGroupSpec

    groups = tuple(
        KVCacheGroupSpec(sliding_window_blocks=g.sliding_window_blocks)
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
    )


def impl_manager_target(setup: RequestSetup, profile: Profile) -> ManagerApiTarget:
    from kvpool.impl import KVCacheManager

    return ManagerApiTarget(build_impl_manager(KVCacheManager, setup), setup, profile, "impl")
