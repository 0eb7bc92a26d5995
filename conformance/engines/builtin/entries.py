"""kvpool's own targets as registry entries: ``impl`` (the linked-list pool and its KV cache
manager, the default) and ``spec`` (the spec itself, a self-check)."""

from __future__ import annotations

from types import MappingProxyType

from kvpool.spec import PoolConfig, Profile

from ...machines.pool.target import Target, TargetFactory
from ...machines.requests.target import ManagerTarget, ManagerTargetFactory, RequestSetup
from ...targets.description import TargetDescription
from ...targets.registry import EngineEntry


def impl_target(config: PoolConfig, profile: Profile) -> Target:
    from kvpool.impl import BlockPool

    from ..vllm_api.adapter import VllmApiTarget

    return VllmApiTarget(BlockPool, config, profile, name="impl")


def impl_manager(setup: RequestSetup, profile: Profile) -> ManagerTarget:
    from .impl_manager import impl_manager_target

    return impl_manager_target(setup, profile)


def spec_target(config: PoolConfig, profile: Profile) -> Target:
    from .spec_target import SpecTarget

    return SpecTarget(config, profile)


class ImplEntry(EngineEntry):
    name = "impl"
    summary = "kvpool's own linked-list BlockPool (kvpool.impl)"
    forms = MappingProxyType({"impl": summary})
    auto_manager = True
    manager_summary = "kvpool's own KVCacheManager over its BlockPool"

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        # Loading a target loads its code, as a release's is loaded from its wheel: the
        # pool and its adapter are imported here, not by the first test case (whose time
        # is counted as exploring).
        import kvpool.impl  # noqa: F401

        from ..vllm_api import adapter  # noqa: F401

        return impl_target, "impl"

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from . import impl_manager as _  # noqa: F401  (loaded here, as the pool is)

        return impl_manager, "impl"


class SpecEntry(EngineEntry):
    name = "spec"
    summary = "the executable spec itself (a self-check; always conforms)"
    forms = MappingProxyType({"spec": summary})

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        return spec_target, "spec"

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        return None, "none"


IMPL = ImplEntry()
SPEC = SpecEntry()
