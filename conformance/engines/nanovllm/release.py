"""Which files of a nano-vllm distribution the suite runs, and how it gets them.

Upstream nano-vllm is not on the package index; two distributions that carry its engine
are. The default is ``nano-vllm-npu`` 0.0.2: its ``engine/block_manager.py`` is upstream's
block manager unchanged but for the package name (``nanovllmnpu``), so it is what nano-vllm
users run. ``nano-vllm-fork`` (20260210) patches ``deallocate`` to drop a freed block's
``hash_to_block_id`` entry: it is checked too (``--manager nanovllm-fork``), and the
findings page says how the two differ.

Four files run: ``engine/block_manager.py`` (xxhash and numpy: the ``nanovllm`` extra),
``engine/sequence.py`` (the real ``Sequence``: it imports no torch),
``sampling_params.py`` (a dataclass ``Sequence`` takes a default from) and
``engine/scheduler.py`` (the engine's ``Scheduler``, which the engine machine drives; the
``Config`` it names in an annotation stands in, since the real one reads a model folder
with transformers: the driver hands the scheduler the five fields it reads). Nothing else
of the package is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ...install import extra_hint
from ...targets.isolated_files import IsolatedLoadError, load_isolated
from ...targets.releases.files import ReleaseFiles, ReleaseFilesError, cached_files

INSTALL_LINE = extra_hint("nanovllm")
#: name -> (distribution, version, package): the distributions the suite knows.
DISTRIBUTIONS: dict[str, tuple[str, str, str]] = {
    "nanovllm": ("nano-vllm-npu", "0.0.2", "nanovllmnpu"),
    "nanovllm-fork": ("nano-vllm-fork", "20260210", "nanovllm"),
}
#: The files, relative to the package folder.
RELATIVE = (
    "engine/block_manager.py",
    "engine/sequence.py",
    "sampling_params.py",
    "engine/scheduler.py",
)
#: Package folder names a tree may hold.
PACKAGES = ("nanovllm", "nanovllmnpu")


class NanoVllmUnavailable(Exception):
    """The block manager cannot be loaded; the message says what to install or fix."""


@dataclass(frozen=True)
class NanoVllmRelease:
    #: ``nano-vllm-npu 0.0.2``, ``nanovllm@PATH``.
    label: str
    origin: Path
    block_manager: ModuleType
    sequence: ModuleType
    sampling_params: ModuleType
    scheduler: ModuleType


def files_of(name: str) -> ReleaseFiles:
    """The files kept of distribution ``name``, in the cache folder ``NAME-scheduler``
    (``NAME`` held the files before the scheduler was among them)."""
    distribution, _, package = DISTRIBUTIONS[name]
    members = frozenset(f"{package}/{rel}" for rel in RELATIVE)
    return ReleaseFiles(f"{name}-scheduler", distribution, members, engine=name)


def package_in(root: Path) -> str:
    """The package folder under ``root`` holding the block manager."""
    for package in PACKAGES:
        if (root / package / RELATIVE[0]).is_file():
            return package
    raise NanoVllmUnavailable(
        f"{root} holds no nanovllm/engine/block_manager.py (nor nanovllmnpu/...): not a "
        "nano-vllm checkout or unpacked distribution"
    )


def load_tree(root: Path, label: str) -> NanoVllmRelease:
    """The block manager under ``root``, with its ``Sequence``, loaded in isolation."""
    missing = [m for m in ("xxhash", "numpy") if not _importable(m)]
    if missing:
        raise NanoVllmUnavailable(
            f"nano-vllm's block manager needs {' and '.join(missing)}, not installed: "
            f"{INSTALL_LINE}"
        )
    package = package_in(root)
    files = {
        f"{package}.{rel.removesuffix('.py').replace('/', '.')}": root / package / rel
        for rel in RELATIVE
    }
    absent = [str(p) for p in files.values() if not p.is_file()]
    if absent:
        raise NanoVllmUnavailable(f"{root} lacks {', '.join(absent)}")
    try:
        # the scheduler names Config only in an annotation: a placeholder stands in
        modules = load_isolated(package, files, {f"{package}.config": {"Config": object}})
    except IsolatedLoadError as exc:
        raise NanoVllmUnavailable(f"{label}: {exc}") from exc
    return NanoVllmRelease(
        label,
        root,
        modules[f"{package}.engine.block_manager"],
        modules[f"{package}.engine.sequence"],
        modules[f"{package}.sampling_params"],
        modules[f"{package}.engine.scheduler"],
    )


def load_distribution(name: str) -> NanoVllmRelease:
    """A known distribution's files, from the cache or downloaded into it once."""
    distribution, version, _ = DISTRIBUTIONS[name]
    try:
        root = cached_files(files_of(name), version)
    except ReleaseFilesError as exc:
        raise NanoVllmUnavailable(str(exc)) from exc
    return load_tree(root, f"{distribution} {version}")


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # a module set to None in sys.modules
        return False


def version_label(root: Path) -> str:
    """What a tree says it is (a dist-info beside it), for the target's name."""
    for metadata in sorted(root.glob("*.dist-info/METADATA")):
        text = metadata.read_text(errors="replace")
        name = re.search(r"^Name:\s*(\S+)", text, re.M)
        version = re.search(r"^Version:\s*(\S+)", text, re.M)
        if name and version:
            return f"{name.group(1)} {version.group(1)}"
    return "unknown version"
