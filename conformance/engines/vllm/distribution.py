"""Where a vLLM release's files come from: a project on the package index whose wheel
ships a vLLM-shaped package (vLLM itself, or a fork such as Aphrodite), fetched and kept
by the one loader of engine releases (:mod:`..releases`).

``cached_release("0.33.0")`` returns the folder holding ``vllm/...`` for that release (the
block-pool files of :data:`~.releases.WHEEL_MEMBERS`), in the cache folder ``vllm``; the
publisher's files (``kvpool publish``) and the KV cache manager's (``--manager vllm``)
are kept in folders of their own, ``vllm-publisher`` and ``vllm-manager``, so that none
changes what another's manifest lists. A fork's are kept under its package's name
(``aphrodite/X.Y.Z/{manifest.json, aphrodite/...}``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...targets.releases import files as release_files
from ...targets.releases.files import ReleaseFiles, ReleaseFilesError
from .package import VLLM, own_path
from .releases import MODULES, REQUIRED, WHEEL_MEMBERS, ReleaseError, check_supported

#: The cache of the pool's files, the publisher's and the KV cache manager's.
POOL_CACHE, PUBLISHER_CACHE, MANAGER_CACHE = "vllm", "vllm-publisher", "vllm-manager"


class WheelError(ReleaseError):
    """A release could not be downloaded, or its wheel is not acceptable (the loader's
    message, as a vLLM release error)."""


@dataclass(frozen=True)
class Distribution:
    """A project on the package index whose wheel ships a vLLM-shaped package."""

    #: Its name on the index (``pip download NAME==X.Y.Z``).
    project: str = "vllm"
    #: The top-level package its files live in (``vllm/v1/core/block_pool.py``).
    package: str = VLLM
    #: How messages name it.
    label: str = "vLLM"

    @property
    def is_vllm(self) -> bool:
        return self.package == VLLM

    def members(self, members: frozenset[str]) -> frozenset[str]:
        """vLLM's wheel members (``vllm/...``) as this distribution's wheel holds them."""
        return frozenset(own_path(m, self.package) for m in members)

    def folder(self, folder: str) -> str:
        """The cache folder of one of vLLM's kinds (``vllm``, ``vllm-manager``) for it."""
        return own_path(folder, self.package)

    def files(
        self, folder: str = POOL_CACHE, members: frozenset[str] = WHEEL_MEMBERS
    ) -> ReleaseFiles:
        """What the loader keeps of its releases for one of vLLM's kinds."""
        return ReleaseFiles(
            folder=self.folder(folder),
            project=self.project,
            members=self.members(members),
            required=frozenset(own_path(MODULES[m], self.package) for m in REQUIRED),
            label=self.label,
            engine=self.package,
            wheel_target=True,
            lacking=f"not a {self.label} wheel with a block pool",
            follow=self.follow,
        )

    def follow(
        self, read: Callable[[frozenset[str]], dict[str, bytes]], kept: frozenset[str]
    ) -> frozenset[str]:
        """The modules the kept files import that load here (:mod:`.followed`), kept too."""
        from .followed import follow_members
        from .isolation import not_followed

        return follow_members(read, kept, self.package, not_followed(self.package))

    def check(self, version: str) -> None:
        """Refuse a version the suite cannot drive (vLLM's own rule; a fork's numbers are
        its own, checked by its entry)."""
        if self.is_vllm:
            check_supported(version)


#: vLLM itself.
VLLM_DISTRIBUTION = Distribution()


def release_dir(
    version: str, folder: str = POOL_CACHE, dist: Distribution = VLLM_DISTRIBUTION
) -> Path:
    return release_files.release_dir(dist.files(folder), version)


def cached_release(
    version: str,
    download: bool = True,
    folder: str = POOL_CACHE,
    members: frozenset[str] = WHEEL_MEMBERS,
    dist: Distribution = VLLM_DISTRIBUTION,
) -> Path:
    """The folder holding ``vllm/...`` (a fork's ``package/...``) of release ``version``,
    from the cache or downloaded. :class:`~.releases.ReleaseError` for a version the suite
    cannot drive, :class:`WheelError` when the release cannot be had."""
    try:
        return release_files.cached_files(
            dist.files(folder, members), version, download, dist.check
        )
    except ReleaseFilesError as exc:
        raise WheelError(str(exc)) from exc


def seed_cache(
    wheel: Path,
    expected_version: str | None = None,
    folder: str = POOL_CACHE,
    members: frozenset[str] = WHEEL_MEMBERS,
    dist: Distribution = VLLM_DISTRIBUTION,
) -> Path:
    """Take the files of ``wheel`` (a wheel file the user gave) into the cache; the
    release's folder."""
    try:
        return release_files.seed_cache(
            wheel, dist.files(folder, members), expected_version, dist.check
        )
    except ReleaseFilesError as exc:
        raise WheelError(str(exc)) from exc


def wheel_version(wheel: Path, dist: Distribution = VLLM_DISTRIBUTION) -> str:
    """The release number in a wheel's file name."""
    try:
        return release_files.wheel_version(wheel, dist.files())
    except ReleaseFilesError as exc:
        raise WheelError(str(exc)) from exc


def version_in_tree(root: Path, package: str) -> str:
    """The release a tree of ``package`` holds (``"unknown"`` if its files say none)."""
    from .package import version_in_package
    from .releases import version_in_tree as vllm_version_in_tree

    return vllm_version_in_tree(root) if package == VLLM else version_in_package(root, package)


def installed_version(dist: Distribution) -> str:
    """The version of ``dist`` installed here (vLLM's, or a fork's project); a
    :class:`TargetLoadError` saying what to run instead when it is not installed."""
    from importlib import metadata

    from ...targets.errors import TargetLoadError
    from .naming import VllmLoadError, installed_vllm_version

    if dist.is_vllm:
        try:
            return installed_vllm_version()
        except VllmLoadError as exc:
            raise TargetLoadError(str(exc)) from None
    try:
        return metadata.version(dist.project)
    except metadata.PackageNotFoundError:
        raise TargetLoadError(
            f"{dist.project} is not installed in this environment: install it, or check a "
            f"release without installing it with --target {dist.package}==X.Y.Z"
        ) from None
