"""Which files of an LMDeploy release the suite runs, and how it gets them.

The pool target runs ``lmdeploy/pytorch/paging/block_manager/base_block_manager.py`` only:
the logical and physical block allocators. It imports numpy (the ``lmdeploy`` extra) and,
for an annotation, ``SchedulerSequence`` from ``lmdeploy.pytorch.messages`` (which imports
torch): that one name is a stand-in class, and nothing else of LMDeploy is loaded.

The manager target (:mod:`.manager_release`) runs the block manager with its prefix trie
and the sequence model they work on; it is fetched into a cache folder of its own.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ...install import extra_hint
from ...targets.isolated_files import IsolatedLoadError, load_isolated
from ...targets.releases.files import ReleaseFiles, ReleaseFilesError, cached_files

#: The release checked when ``--target lmdeploy`` names none (the latest on the index).
DEFAULT_VERSION = "0.18.0"
#: The releases the suite was run on, pool and manager (one of each manager generation:
#: :mod:`.generations`), their findings in ``findings/``.
CHECKED = ("0.16.0", DEFAULT_VERSION)
#: What to run when numpy is missing.
INSTALL_LINE = extra_hint("lmdeploy")

MODULE = "lmdeploy.pytorch.paging.block_manager.base_block_manager"
FILE = "lmdeploy/pytorch/paging/block_manager/base_block_manager.py"
VERSION_FILE = "lmdeploy/version.py"
FILES = ReleaseFiles(
    "lmdeploy", "lmdeploy", frozenset({FILE, VERSION_FILE}), label="LMDeploy", engine="lmdeploy"
)


class LmdeployUnavailable(Exception):
    """The allocator cannot be loaded; the message says what to install or fix."""


class SchedulerSequence:
    """Stand-in for ``lmdeploy.pytorch.messages.SchedulerSequence`` (only named in the
    allocator file's annotations; the allocators never touch one)."""


@dataclass(frozen=True)
class LmdeployRelease:
    version: str
    #: Where the files came from (the cache folder or the user's tree).
    origin: Path
    module: ModuleType

    @property
    def LogicalAllocator(self) -> type:
        found: type = self.module.LogicalAllocator
        return found


def check_version(version: str) -> str:
    if re.fullmatch(r"\d+\.\d+\.\d+(?:\.post\d+)?", version) is None:
        raise LmdeployUnavailable(f"{version!r} is not an LMDeploy release number (like 0.18.0)")
    return version


def version_in_tree(root: Path) -> str:
    """The release a tree holds, from ``lmdeploy/version.py`` (``"unknown"`` if it does not
    say)."""
    path = root / VERSION_FILE
    if path.is_file():
        found = re.search(
            r"""^__version__\s*=\s*['"]([^'"]+)['"]""", path.read_text(errors="replace"), re.M
        )
        if found:
            return found.group(1)
    return "unknown"


def numpy_module(what: str) -> Any:
    """numpy, the one dependency of LMDeploy's paging files (imported by name: the suite
    is type-checked alike with and without the extra); :class:`LmdeployUnavailable`
    naming the install line when it is missing."""
    try:
        return importlib.import_module("numpy")
    except ImportError:
        raise LmdeployUnavailable(
            f"LMDeploy's {what} needs numpy, which is not installed: {INSTALL_LINE}"
        ) from None


def load_tree(root: Path, version: str) -> LmdeployRelease:
    """The allocator file under ``root`` (which holds ``lmdeploy/``), loaded in isolation."""
    numpy_module("allocator")
    path = root / FILE
    if not path.is_file():
        raise LmdeployUnavailable(f"{root} holds no {FILE}: not an LMDeploy tree or wheel")
    try:
        modules = load_isolated(
            "lmdeploy",
            {MODULE: path},
            {"lmdeploy.pytorch.messages": {"SchedulerSequence": SchedulerSequence}},
        )
    except IsolatedLoadError as exc:
        raise LmdeployUnavailable(f"LMDeploy {version}: {exc}") from exc
    return LmdeployRelease(version, root, modules[MODULE])


def release_root(files: ReleaseFiles, version: str) -> Path:
    """Where release ``version``'s ``files`` are, from the cache or downloaded into it
    once, checked to be that version."""
    check_version(version)
    try:
        root = cached_files(files, version)
    except ReleaseFilesError as exc:
        raise LmdeployUnavailable(str(exc)) from exc
    found = version_in_tree(root)
    if found != version:
        raise LmdeployUnavailable(f"the wheel of LMDeploy {version} says it is {found}")
    return root


def load_release(version: str) -> LmdeployRelease:
    """Release ``version``'s allocator, from the cache or downloaded into it once."""
    return load_tree(release_root(FILES, version), version)
