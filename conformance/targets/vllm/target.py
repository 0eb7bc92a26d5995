"""A loaded vLLM release as a target: its ``BlockPool`` behind the generic adapter.

The adapter reads the release's calling conventions off its signatures
(:func:`~kvpool.conformance.targets.vllm_api.detection.detect_api`); what this module adds is the
request object: a release reads a handful of request fields, and the adapter hands it an
object with exactly those (found by reading the release's source), so that a field the
suite does not know about fails loudly instead of being made up.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

from kvpool.spec import PoolConfig, Profile

from ...engine.target import Target
from ..vllm_api.adapter import VllmApiTarget
from ..vllm_api.detection import PoolApi, detect_api
from ..vllm_api.requests import REQUEST_DEFAULTS, request_type
from .isolation import Release

#: The files whose functions receive the request when the pool caches blocks.
REQUEST_READERS = ("vllm.v1.core.block_pool", "vllm.v1.core.kv_cache_utils")


def request_fields(sources: list[Path]) -> frozenset[str]:
    """The attributes read off a name ``request`` anywhere in ``sources`` (a superset of
    what the pool reads while caching: the request hasher's reads are included)."""
    fields: set[str] = set()
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "request"
            ):
                fields.add(node.attr)
    return frozenset(fields)


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

        def factory(config: PoolConfig, profile: Profile) -> Target:
            target = VllmApiTarget(pool_class, config, profile, name=name, api=api)
            target.version = version
            target.int_hashes_by_default = int_hashes
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
    sources = [Path(modules[m].__file__ or "") for m in REQUEST_READERS]
    fields = request_fields(sources)
    unknown = sorted(fields - set(REQUEST_DEFAULTS))
    if unknown:
        raise ValueError(
            f"vLLM {version}'s pool reads request fields the adapter cannot fill: "
            f"{', '.join(unknown)}"
        )
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
