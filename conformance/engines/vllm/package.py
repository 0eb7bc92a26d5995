"""A vLLM-shaped package under its own top-level name: ``vllm`` itself, or a fork such as
Aphrodite, whose pool lives at ``aphrodite/v1/core/block_pool.py`` and whose files import
``aphrodite.*``.

The suite names every module by vLLM's name (``vllm.v1.core.block_pool``: the *role*);
a package's own name for it (``aphrodite.v1.core.block_pool``) and its file
(``aphrodite/v1/core/block_pool.py``) follow from the top-level name. The files are
loaded under their own names, unchanged on disk; what the adapters read is keyed by role.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from .releases import (
    MANAGER_MODULES,
    MANAGER_REQUIRED,
    MODULES,
    REQUIRED,
    ReleaseError,
)

#: vLLM's own top-level package.
VLLM = "vllm"
#: Where a package's pool lives, relative to its top-level folder.
POOL_FILE = "v1/core/block_pool.py"


def own_name(role: str, package: str) -> str:
    """``vllm.v1.core.block_pool`` as ``package`` names it."""
    return package + role.removeprefix(VLLM)


def role_of(name: str, package: str) -> str:
    """The vLLM name of ``package``'s module ``name``."""
    return VLLM + name.removeprefix(package)


def own_path(relative: str, package: str) -> str:
    """``vllm/v1/core/block_pool.py`` inside ``package``'s folder."""
    return package + relative.removeprefix(VLLM)


def in_package(name: str, package: str) -> bool:
    """Whether module ``name`` is ``package`` or one of its submodules."""
    return name == package or name.startswith(f"{package}.")


def packages_in(root: Path) -> list[str]:
    """The top-level packages under ``root`` that hold a vLLM-shaped block pool."""
    return sorted(
        pool.parents[2].name
        for pool in root.glob(f"*/{POOL_FILE}")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", pool.parents[2].name)
    )


def package_in(root: Path, named: str | None = None) -> str:
    """The package of the tree at ``root``: ``named`` (``--package``) if given, else the one
    package there with ``v1/core/block_pool.py``. :class:`ReleaseError` says what to write
    when there is none, or more than one."""
    found = packages_in(root)
    if named is not None:
        if named not in found:
            raise ReleaseError(f"{root} holds no {named}/{POOL_FILE} (--package {named})")
        return named
    if len(found) == 1:
        return found[0]
    if not found:
        raise ReleaseError(
            f"{root} is not a vLLM source tree or unpacked wheel: no <package>/{POOL_FILE} "
            "(vllm/v1/core/block_pool.py in vLLM's own)"
        )
    raise ReleaseError(
        f"{root} holds several packages with a block pool ({', '.join(found)}): "
        "name one with --package NAME"
    )


def files_in_tree(
    root: Path, package: str, extra: Mapping[str, str] | None = None, manager: bool = False
) -> dict[str, Path]:
    """``package``'s module files under ``root``, by their own module names: the pool's
    (the required ones checked), the ``extra`` ones (role -> path) that are there, and with
    ``manager`` the KV cache manager's (its required ones checked)."""
    wanted = {**MODULES, **(extra or {})}
    files = _present(root, package, wanted, REQUIRED, "is not a vLLM source tree or unpacked wheel")
    if manager:
        files.update(
            _present(
                root, package, MANAGER_MODULES, MANAGER_REQUIRED, "has no KV cache manager to drive"
            )
        )
    return files


def _present(
    root: Path,
    package: str,
    wanted: Mapping[str, str],
    required: frozenset[str],
    lacking: str,
) -> dict[str, Path]:
    found = {
        own_name(role, package): root / own_path(rel, package)
        for role, rel in wanted.items()
        if (root / own_path(rel, package)).is_file()
    }
    missing = sorted(r for r in required if own_name(r, package) not in found)
    if missing:
        paths = ", ".join(own_path(wanted[r], package) for r in missing)
        raise ReleaseError(f"{root} {lacking}: missing {paths}")
    return found


def version_in_package(root: Path, package: str) -> str:
    """A fork's release from ``<package>/_version.py`` or a ``*.dist-info/METADATA`` beside
    it naming that package's distribution; ``"unknown"`` if neither says."""
    version_file = root / package / "_version.py"
    if version_file.is_file():
        text = version_file.read_text(encoding="utf-8", errors="replace")
        found = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M)
        if found:
            return found.group(1)
    for metadata in sorted(root.glob("*.dist-info/METADATA")):
        text = metadata.read_text(encoding="utf-8", errors="replace")
        top = metadata.parent / "top_level.txt"
        tops = top.read_text(errors="replace").split() if top.is_file() else []
        version = re.search(r"^Version:\s*(\S+)", text, re.M)
        name = metadata.parent.name.split("-")[0].lower()
        if version and (package in tops or name.startswith(package)):
            return version.group(1)
    return "unknown"
