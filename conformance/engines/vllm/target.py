"""A loaded vLLM release as a target: its ``BlockPool`` behind the generic adapter.

The adapter reads the release's calling conventions off its signatures
(:func:`~kvpool.conformance.engines.vllm_api.detection.detect_api`); what this module adds is the
request object: a release reads a handful of request fields, and the adapter hands it an
object with exactly those (found by following the adapter's calls through the release's
source: :mod:`.request_reads`), so that a field the suite does not know about fails loudly
instead of being made up.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

from kvpool.spec import PoolConfig, Profile

from ...machines.pool.target import Target
from ..vllm_api.adapter import VllmApiTarget
from ..vllm_api.detection import PoolApi, detect_api
from ..vllm_api.requests import REQUEST_DEFAULTS, request_type
from .isolation import Release, loading_check
from .request_reads import request_reads

#: The files whose functions the pool's caching calls reach (the pool's and its helpers').
REQUEST_READERS = ("vllm.v1.core.block_pool", "vllm.v1.core.kv_cache_utils")


def request_fields(version: str, modules: Mapping[str, ModuleType]) -> frozenset[str]:
    """The request fields the pool of ``modules`` reads on the calls the adapter makes
    (:mod:`.request_reads`), with the optional ones the adapter knows; a field the adapter
    cannot fill is a :class:`ValueError` naming the function that reads it."""
    files = {m: Path(modules[m].__file__ or "") for m in REQUEST_READERS if m in modules}
    reads = request_reads(files)
    unknown = sorted(set(reads.required) - set(REQUEST_DEFAULTS))
    if unknown:
        named = ", ".join(f"{f} (read by {reads.required[f]})" for f in unknown)
        raise ValueError(
            f"vLLM {version}'s pool reads request fields the adapter cannot fill: {named}"
        )
    optional = {f for f in reads.optional if f in REQUEST_DEFAULTS}
    return reads.fields | optional


@dataclasses.dataclass(frozen=True)
class VllmRelease:
    """What the suite knows of one release: its pool class and how to call it."""

    version: str
    pool_class: type
    #: The request fields its pool reads (read off its source).
    request_fields: frozenset[str]
    #: Where it came from, for messages: ``"isolated from PATH"``, ``"installed"``.
    origin: str
    #: The isolated modules, when it was loaded in isolation.
    release: Release | None = None
    #: Whether its events name hashes by 64-bit integers by default (its own setting,
    #: read before an isolated release is switched to whole hashes; ``None``: unknown).
    int_hashes_by_default: bool | None = None

    def api(self) -> PoolApi:
        probe = self.pool_class(**_probe_args(self.pool_class))
        base = detect_api(self.pool_class, probe)
        return dataclasses.replace(base, request=request_type(self.request_fields))

    def target_factory(self, name: str) -> Callable[[PoolConfig, Profile], Target]:
        pool_class = self.pool_class
        api = self.api()

        version = self.version
        int_hashes = self.int_hashes_by_default
        check = loading_check(self.release.modules) if self.release is not None else None

        def factory(config: PoolConfig, profile: Profile) -> Target:
            target = VllmApiTarget(pool_class, config, profile, name=name, api=api)
            target.version = version
            target.int_hashes_by_default = int_hashes
            target.loading_check = check
            return target

        return factory


def _probe_args(pool_class: type) -> dict[str, object]:
    """The smallest pool any release can build (for reading its calling conventions)."""
    params = inspect.signature(pool_class).parameters
    args: dict[str, object] = {"num_gpu_blocks": 2, "enable_caching": True}
    if "hash_block_size" in params:
        args["hash_block_size"] = 1
    return args


def describe(
    version: str,
    modules: Mapping[str, ModuleType],
    origin: str,
    release: Release | None = None,
) -> VllmRelease:
    """A release from its loaded modules (isolated or installed)."""
    fields = request_fields(version, modules)
    pool_class = modules["vllm.v1.core.block_pool"].BlockPool
    return VllmRelease(version, pool_class, fields, origin, release)


#: The setting that makes a release publish event hashes as the low 64 bits of the hash
#: (its default). An isolated release is run with it off, so that events carry the whole
#: hash (as its keys do) and are compared byte for byte.
INT_HASHES_SETTING = "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"


def describe_release(release: Release) -> VllmRelease:
    """An isolated release, described; its private ``vllm.envs`` publishes whole hashes."""
    envs = release.modules.get("vllm.envs")
    by_default = None
    if envs is not None:  # a fork spells it with its own prefix (APHRODITE_KV_EVENTS_...)
        setting = release.package.upper() + INT_HASHES_SETTING.removeprefix("VLLM")
        found = getattr(envs, setting, None)
        by_default = found if isinstance(found, bool) else None
        setattr(envs, setting, False)
    described = describe(
        release.version, release.modules, f"isolated from {release.root}", release=release
    )
    return dataclasses.replace(described, int_hashes_by_default=by_default)
