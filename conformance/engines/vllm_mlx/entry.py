"""``vllm-mlx``: vllm-mlx's ``PagedCacheManager`` (:mod:`.vllm_mlx`) as a registry entry."""

from __future__ import annotations

from types import MappingProxyType

from ...machines.pool.target import TargetFactory
from ...targets.description import TargetDescription
from ...targets.registry import EngineEntry, ProfileChoice


class VllmMlxEntry(EngineEntry):
    name = "vllm-mlx"
    summary = (
        "vllm-mlx's PagedCacheManager (pip install --no-deps vllm-mlx==0.6.0); profile vllm-mlx"
    )
    forms = MappingProxyType({"vllm-mlx": summary})
    project = "vllm-mlx"

    def versions(self) -> tuple[str, ...]:
        from .pool import VLLM_MLX_VERSION

        return (VLLM_MLX_VERSION,)

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        from .pool import vllm_mlx_target

        factory: TargetFactory = vllm_mlx_target
        return factory, "vllm-mlx"

    def profile(self, described: TargetDescription) -> ProfileChoice:
        return ProfileChoice("vllm-mlx", "vllm-mlx's own profile (its policy, measured)")


ENTRY = VllmMlxEntry()
