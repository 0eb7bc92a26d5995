"""``--target`` forms of the engines other than vLLM: which code each one loads.

- ``lmdeploy`` / ``lmdeploy==X.Y.Z`` — LMDeploy's ``LogicalAllocator`` (0.18.0 when no
  version is named), downloaded once into the cache; ``lmdeploy@PATH`` — an LMDeploy
  checkout or unpacked wheel (PATH holds ``lmdeploy/pytorch/paging/...``). The same forms
  name the release's block manager with its prefix trie as the requests machine's manager
  (``--manager auto`` on an LMDeploy target, or ``--manager lmdeploy``).

Each form is the only way these files are run: a trace or a findings file never names
code, the command line does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvpool.spec import PoolConfig, Profile

from ..engine.target import Target, TargetFactory

#: The forms, for messages and ``kvpool targets``.
ENGINE_SPECS: dict[str, str] = {
    "lmdeploy==X.Y.Z": "LMDeploy's LogicalAllocator (PyTorch engine) as a pool without a "
    "prefix cache, and its block manager with the prefix trie as the requests machine's "
    "manager; 'lmdeploy' alone is 0.18.0 (needs the lmdeploy extra: numpy)",
    "lmdeploy@PATH": "an LMDeploy checkout or unpacked wheel at PATH",
    "nanovllm": "nano-vllm's BlockManager, a manager (--machine requests only): upstream's "
    "as nano-vllm-npu 0.0.2 ships it (needs the nanovllm extra: xxhash, numpy)",
    "nanovllm-fork": "the same from nano-vllm-fork 20260210 (drops a freed block's hash entry)",
    "nanovllm@PATH": "a nano-vllm checkout or unpacked distribution at PATH",
    "sglang": "SGLang 0.4.6.post5's RadixCache over its TokenToKVPoolAllocator, a "
    "token-granular manager (--machine requests only; needs the sglang extra: torch)",
    "sglang,page=N": "the same over its PagedTokenToKVPoolAllocator with pages of N tokens, "
    "a power of two (blocks are pages; hits cut to whole pages); 'page=drawn' takes the "
    "largest power of two up to the drawn block size",
    "sglang==X.Y.Z": "the same from another SGLang release (a pure wheel; ',page=N' too)",
    "sglang@PATH": "an SGLang checkout's python/ folder or unpacked wheel at PATH",
}
#: The engine targets ``kvpool targets`` describes by default.
LISTED = ("lmdeploy==0.18.0",)
#: The manager-only targets ``kvpool targets`` lists among the managers.
MANAGERS = ("nanovllm", "nanovllm-fork", "sglang")


class EngineLoadError(Exception):
    """The engine's files cannot be loaded; the message says what to install or fix."""


def is_engine_spec(spec: str) -> bool:
    return spec == "lmdeploy" or spec.startswith(("lmdeploy==", "lmdeploy@"))


def is_sglang(spec: str) -> bool:
    return spec.split(",")[0] == "sglang" or spec.startswith(("sglang==", "sglang@"))


def sglang_page_size(spec: str) -> tuple[str, int | None]:
    """``sglang...,page=N`` split into the release part and the page size (1 when not
    named, ``None`` for ``page=drawn``); ``EngineLoadError`` for anything else after the
    comma."""
    release, _, option = spec.partition(",")
    if not option:
        return release, 1
    name, _, value = option.partition("=")
    if name == "page" and value == "drawn":
        return release, None
    if name == "page" and value.isdigit() and _power_of_two(int(value)):
        return release, int(value)
    raise EngineLoadError(
        f"{spec}: after the comma SGLang takes 'page=N' (N tokens a page, a power of two: "
        f"its paged allocation kernels need one) or 'page=drawn', not {option!r}"
    )


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def is_manager_target(spec: str) -> bool:
    """Whether ``spec`` names a manager with no pool API of its own (nano-vllm's): only
    the request machine's manager run can check it."""
    if is_sglang(spec):
        return True
    return spec in ("nanovllm", "nanovllm-fork") or spec.startswith("nanovllm@")


def tree_root(spec: str, path: str) -> Path:
    """The folder a ``NAME@PATH`` target names, or :class:`EngineLoadError` saying it is not
    one."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise EngineLoadError(f"{spec}: {root} is not a folder")
    return root


def load_lmdeploy_manager(spec: str) -> tuple[Any, str]:
    """LMDeploy's block manager with its prefix trie, from a release or a tree."""
    from .lmdeploy.manager import LmdeployManagerFactory
    from .lmdeploy.manager_release import load_manager_release, load_manager_tree
    from .lmdeploy.release import DEFAULT_VERSION, LmdeployUnavailable, version_in_tree

    try:
        if spec.startswith("lmdeploy@"):
            root = tree_root(spec, spec.removeprefix("lmdeploy@"))
            release = load_manager_tree(root, version_in_tree(root))
            name = spec
        else:
            version = spec.removeprefix("lmdeploy==") if "==" in spec else DEFAULT_VERSION
            release = load_manager_release(version)
            name = f"lmdeploy=={version}"
    except LmdeployUnavailable as exc:
        raise EngineLoadError(f"{spec}: {exc}") from exc
    return LmdeployManagerFactory(release, f"{name} (block manager and prefix trie)"), name


def load_engine_manager(spec: str) -> tuple[Any, str]:
    """The manager factory and display name of a manager-only target."""
    if is_sglang(spec):
        return load_sglang_manager(spec)
    from .nanovllm.manager import nanovllm_managers
    from .nanovllm.release import (
        NanoVllmUnavailable,
        load_distribution,
        load_tree,
        version_label,
    )

    try:
        if spec.startswith("nanovllm@"):
            root = tree_root(spec, spec.removeprefix("nanovllm@"))
            release = load_tree(root, version_label(root))
        else:
            release = load_distribution(spec)
    except NanoVllmUnavailable as exc:
        raise EngineLoadError(f"{spec}: {exc}") from exc
    return nanovllm_managers(release, f"{spec} ({release.label})"), spec


def load_sglang_manager(spec: str) -> tuple[Any, str]:
    """SGLang's radix cache and allocator, from a release or a tree, with the page size
    ``spec`` names."""
    from .sglang.manager import sglang_managers
    from .sglang.release import (
        DEFAULT_VERSION,
        SglangUnavailable,
        load_release,
        load_tree,
        version_label,
    )

    where, page_size = sglang_page_size(spec)
    pages = "" if page_size == 1 else f",page={page_size or 'drawn'}"
    try:
        if where.startswith("sglang@"):
            root = tree_root(spec, where.removeprefix("sglang@"))
            release = load_tree(root, version_label(root))
            name = spec
        else:
            version = where.removeprefix("sglang==") if "==" in where else DEFAULT_VERSION
            release = load_release(version)
            name = f"sglang=={version}{pages}"
    except SglangUnavailable as exc:
        raise EngineLoadError(f"{spec}: {exc}") from exc
    return sglang_managers(release, f"{name} ({release.label})", page_size), name


def engine_profile(spec: str) -> str | None:
    """The profile an engine target is checked with by default."""
    if spec == "lmdeploy" or spec.startswith(("lmdeploy==", "lmdeploy@")):
        return "lmdeploy"
    return None


def load_engine_target(spec: str) -> tuple[TargetFactory, str]:
    """The pool factory and display name of an engine form."""
    from .lmdeploy.allocator import lmdeploy_allocator_target
    from .lmdeploy.release import (
        DEFAULT_VERSION,
        LmdeployUnavailable,
        load_release,
        load_tree,
        version_in_tree,
    )

    try:
        if spec.startswith("lmdeploy@"):
            root = tree_root(spec, spec.removeprefix("lmdeploy@"))
            release = load_tree(root, version_in_tree(root))
            name = f"{spec} ({release.version})"
        else:
            version = spec.removeprefix("lmdeploy==") if "==" in spec else DEFAULT_VERSION
            release = load_release(version)
            name = f"lmdeploy=={version}"
    except LmdeployUnavailable as exc:
        raise EngineLoadError(f"{spec}: {exc}") from exc

    def factory(config: PoolConfig, profile: Profile) -> Target:
        return lmdeploy_allocator_target(release, config, profile)

    built: Callable[[PoolConfig, Profile], Target] = factory
    return built, name
