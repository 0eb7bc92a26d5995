"""A few files of an engine's release, taken out of its wheel once and kept.

``cached_files(files, "0.18.0")`` returns the folder holding ``files.members`` of that
release, downloading the wheel (:mod:`.download`) the first time (once per process for
all the kinds of files kept of one release: :class:`LastWheel`). Only the named members
are read out of the wheel, by exact name, as regular files under the size limit of
:mod:`kvpool.conformance.bounds`; the wheel itself is deleted (when the next one is
downloaded, or the process ends). A ``manifest.json`` beside
them records the project, the version, the wheel's name and SHA-256 and each file's
SHA-256, and is checked on every load: a file that changed on disk makes the cache
invalid, and it is fetched again. Where the files' own imports are kept too (vLLM's:
``follow``), the manifest lists them as ``followed``; a folder written before that is
still read, and completed the first time the wheel can be fetched.

One layout for every engine: ``$KVPOOL_CACHE_DIR`` (else ``$XDG_CACHE_HOME/kvpool``, else
``~/.cache/kvpool``) ``/FOLDER/X.Y.Z/{manifest.json, package/...}``, ``FOLDER`` being the
engine's (``vllm``, ``vllm-manager``, ``aphrodite``, ``lmdeploy``, ``sglang``,
``vllm-mlx``, ...). Folders written before this module keep working: their manifests have
the same fields.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...bounds import MAX_RELEASE_MEMBER_BYTES, MAX_RELEASE_WHEEL_BYTES

MANIFEST = "manifest.json"

#: ``follow(read, kept)``: see :attr:`ReleaseFiles.follow`.
Follow = Callable[[Callable[[frozenset[str]], dict[str, bytes]], frozenset[str]], frozenset[str]]


class ReleaseFilesError(Exception):
    """A release's files could not be fetched, or its wheel is not acceptable; the message
    says why and what to run instead."""


@dataclass(frozen=True)
class ReleaseFiles:
    """Which files of which project's releases a target needs."""

    #: The cache folder's name (``lmdeploy``, ``vllm-manager``).
    folder: str
    #: The project on the package index (``lmdeploy``, ``nano-vllm-npu``).
    project: str
    #: Paths inside the wheel that may be kept.
    members: frozenset[str]
    #: Those that must be there (``None``: every member).
    required: frozenset[str] | None = None
    #: How messages name the engine (its project name when empty).
    label: str = ""
    #: The engine's target name, whose ``NAME@PATH`` form reads a wheel file, an unpacked
    #: wheel or a source tree (error messages show it; empty: it has no such form).
    engine: str = ""
    #: Whether ``NAME@PATH`` also takes the wheel file itself (vLLM's forms do).
    wheel_target: bool = False
    #: One more line for a failed download (``install it with ...``).
    advice: str = ""
    #: Why a wheel lacking a required member is not one (``"not a vLLM wheel with a block
    #: pool"``), for the error message.
    lacking: str = ""
    #: More members to keep beside ``members``, read off them: given a reader of the
    #: wheel's members (paths -> the contents of those it holds) and the kept members'
    #: paths, the paths of the modules they import that load here (vLLM's
    #: :func:`~..vllm.followed.follow_members`). The manifest lists them as ``followed``.
    follow: Follow | None = None

    @property
    def needed(self) -> frozenset[str]:
        return self.members if self.required is None else self.required

    @property
    def shown(self) -> str:
        return self.label or self.project

    @property
    def wheel_prefix(self) -> str:
        """How its wheels' file names start (the project name normalized:
        ``aphrodite_engine``)."""
        return re.sub(r"[-_.]+", "_", self.project).lower()


def cache_root() -> Path:
    """Where kvpool keeps downloaded releases."""
    explicit = os.environ.get("KVPOOL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kvpool"


def release_dir(files: ReleaseFiles, version: str) -> Path:
    return cache_root() / files.folder / version


def cached_files(
    files: ReleaseFiles,
    version: str,
    download: bool = True,
    check: Callable[[str], None] | None = None,
) -> Path:
    """The folder holding ``files`` of release ``version``: from the cache, or (unless
    ``download`` is false) downloaded now. ``check`` refuses a version string before
    anything is fetched. :class:`ReleaseFilesError` when the release is not cached and
    cannot be downloaded. A cache written before its files' imports were followed
    (:attr:`ReleaseFiles.follow`) is completed once, when the wheel can be had."""
    if check is not None:
        check(version)
    where = release_dir(files, version)
    if valid_cache(where, files, version):
        if download and files.follow is not None and not _followed(where):
            try:  # written before the modules its files import were kept: completed once
                return _fetch(files, version, where, check)
            except ReleaseFilesError:
                return where  # offline: the files it has still load
        return where
    if not download:
        raise ReleaseFilesError(f"{files.shown} {version} is not in the cache ({where})")
    return _fetch(files, version, where, check)


def _followed(where: Path) -> bool:
    """Whether the manifest in ``where`` lists the followed modules (none, or some)."""
    try:
        manifest = json.loads((where / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "followed" in manifest


def _fetch(
    files: ReleaseFiles, version: str, where: Path, check: Callable[[str], None] | None
) -> Path:
    """Download ``version``'s wheel (or take the one this process has) into the cache."""
    from .download import DownloadFailed, download_wheel

    wheel = LAST_WHEEL.get(files.project, version)
    if wheel is None:
        folder = tempfile.TemporaryDirectory(prefix=f"kvpool-{files.folder}-")
        try:
            wheel = download_wheel(files, version, Path(folder.name), where)
        except DownloadFailed as exc:
            folder.cleanup()
            raise ReleaseFilesError(str(exc)) from None
        except BaseException:
            folder.cleanup()
            raise
        LAST_WHEEL.keep(files.project, version, folder, wheel)
    return seed_cache(wheel, files, version, check)


class LastWheel:
    """The one wheel this process downloaded last, kept (in its temporary folder) until
    another is downloaded or the process ends: the other kinds of files of the same
    release (the manager's after the pool's, an older layout's after a newer one's) are
    read from it instead of being fetched again."""

    def __init__(self) -> None:
        self._key: tuple[str, str] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._wheel: Path | None = None

    def get(self, project: str, version: str) -> Path | None:
        if self._key == (project, version) and self._wheel is not None and self._wheel.is_file():
            return self._wheel
        return None

    def keep(
        self, project: str, version: str, folder: tempfile.TemporaryDirectory[str], wheel: Path
    ) -> None:
        self.drop()
        self._key, self._folder, self._wheel = (project, version), folder, wheel

    def drop(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
        self._key = self._folder = self._wheel = None


LAST_WHEEL = LastWheel()
atexit.register(LAST_WHEEL.drop)


def valid_cache(where: Path, files: ReleaseFiles, version: str) -> bool:
    """Whether ``where`` holds a complete, unaltered extraction of ``version``: every
    required member, nothing but members, each as the manifest recorded it."""
    try:
        manifest = json.loads((where / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        return False
    recorded = manifest.get("files")
    if not isinstance(recorded, dict) or not recorded:
        return False
    allowed = set(files.members)
    followed = manifest.get("followed", [])  # absent: written before files were followed
    if files.follow is not None:
        if not isinstance(followed, list) or not all(isinstance(f, str) for f in followed):
            return False
        allowed |= set(followed)
    if not set(recorded) <= allowed or not files.needed <= set(recorded):
        return False
    for name, digest in recorded.items():
        path = where / name
        if path.is_symlink() or not path.is_file():
            return False
        if _sha256(path.read_bytes()) != digest:
            return False
    return True


def wheel_version(wheel: Path, files: ReleaseFiles) -> str:
    """The release number in a wheel's file name (``vllm-0.33.0-cp38-...whl``; a build tag
    after the version, as in ``vllm-0.23.0-2-cp38-...whl``, is allowed)."""
    prefix = re.escape(files.wheel_prefix)
    match = re.fullmatch(prefix + r"-([^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl", wheel.name)
    if match is None:
        raise ReleaseFilesError(
            f"{wheel.name} is not named like a {files.shown} wheel "
            f"({files.wheel_prefix}-X.Y.Z-...-....whl)"
        )
    return match.group(1)


def seed_cache(
    wheel: Path,
    files: ReleaseFiles,
    expected_version: str | None = None,
    check: Callable[[str], None] | None = None,
) -> Path:
    """Take ``files`` out of ``wheel`` into the cache; the release's folder. The wheel
    itself is left where it is (callers that downloaded it delete it)."""
    version = wheel_version(wheel, files)
    if expected_version is not None and version != expected_version:
        raise ReleaseFilesError(
            f"asked for {files.shown} {expected_version}, but pip fetched {wheel.name}"
        )
    if check is not None:
        check(version)
    contents = extract_members(wheel, files)
    followed: list[str] = []
    if files.follow is not None:
        extra = files.follow(lambda paths: read_members(wheel, paths), frozenset(contents))
        contents.update(read_members(wheel, extra - set(contents)))
        followed = sorted(extra & set(contents))
    final = release_dir(files, version)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=final.parent))
    try:
        for name, data in contents.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        manifest: dict[str, object] = {
            "distribution": files.project,
            "version": version,
            "wheel": wheel.name,
            "wheel_sha256": _file_sha256(wheel),
            "files": {name: _sha256(data) for name, data in sorted(contents.items())},
        }
        if files.follow is not None:
            manifest["followed"] = followed
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        stale = files.follow is not None and not _followed(final)
        if final.exists() and (stale or not valid_cache(final, files, version)):
            shutil.rmtree(final)
        if not final.exists():
            try:
                os.replace(staging, final)
            except OSError:
                if not valid_cache(final, files, version):  # another process was faster
                    raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return final


def extract_members(wheel: Path, files: ReleaseFiles) -> dict[str, bytes]:
    """The members of ``files`` in ``wheel``, each checked by :func:`read_members`; every
    required one must be among them."""
    size = wheel.stat().st_size
    if size > MAX_RELEASE_WHEEL_BYTES:
        raise ReleaseFilesError(
            f"{wheel.name} is {size} bytes, more than an engine's wheel can be "
            f"(the limit is {MAX_RELEASE_WHEEL_BYTES})"
        )
    contents = read_members(wheel, files.members)
    missing = sorted(files.needed - set(contents))
    if missing:
        why = f": {files.lacking}" if files.lacking else ""
        raise ReleaseFilesError(f"{wheel.name} lacks {', '.join(missing)}{why}")
    return contents


def read_members(
    wheel: Path, members: frozenset[str], limit: int = MAX_RELEASE_MEMBER_BYTES
) -> dict[str, bytes]:
    """The members of ``wheel`` named in ``members``, read in memory after checking each
    one: a member listed twice, a symlink or anything but a regular file, or one over
    ``limit`` bytes makes the whole wheel unacceptable. Nothing is written here; a member
    that is absent is simply not returned."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ReleaseFilesError(f"{wheel.name} is not a readable wheel: {exc}") from exc
    contents: dict[str, bytes] = {}
    with archive:
        for info in archive.infolist():
            name = info.filename
            if name not in members:
                continue
            if name in contents:
                raise ReleaseFilesError(f"{wheel.name}: {name} appears twice in the wheel")
            mode = info.external_attr >> 16
            if info.is_dir() or (mode and not stat.S_ISREG(mode)):
                raise ReleaseFilesError(
                    f"{wheel.name}: {name} is not a regular file (mode {mode:o})"
                )
            if info.file_size > limit:
                raise ReleaseFilesError(
                    f"{wheel.name}: {name} is {info.file_size} bytes, over the limit ({limit})"
                )
            with archive.open(info) as member:
                data = member.read(limit + 1)
            if len(data) > limit:
                raise ReleaseFilesError(f"{wheel.name}: {name} unpacks to more than the limit")
            contents[name] = data
    return contents


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
