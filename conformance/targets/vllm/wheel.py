"""The wheel cache: a vLLM release's block-pool files, downloaded once and kept.

``cached_release("0.33.0")`` returns the folder holding ``vllm/...`` for that release,
downloading the wheel with pip (no dependencies, binary only) the first time. Only the
files of :data:`~.releases.WHEEL_MEMBERS` are taken out of the wheel, by exact name, as
regular files under a size limit; the wheel itself is deleted. A ``manifest.json`` beside
them records the version, the wheel's name and SHA-256, and each file's SHA-256, and is
checked on every load.

Layout: ``$KVPOOL_CACHE_DIR`` (else ``$XDG_CACHE_HOME/kvpool``, else ``~/.cache/kvpool``)
``/vllm/X.Y.Z/{manifest.json, vllm/...}``. A fork's wheel (:class:`Distribution`: another
project on the index, another top-level package) is cached the same way in a folder of
its own, ``/aphrodite/X.Y.Z/{manifest.json, aphrodite/...}``: the same files, under the
fork's package.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .package import VLLM, own_path
from .releases import (
    MODULES,
    REQUIRED,
    WHEEL_MEMBERS,
    ReleaseError,
    check_supported,
    parse_version,
)


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

    @property
    def wheel_prefix(self) -> str:
        """How its wheels' file names start (the project name normalized: ``aphrodite_engine``)."""
        return re.sub(r"[-_.]+", "_", self.project).lower()

    def members(self, members: frozenset[str]) -> frozenset[str]:
        """vLLM's wheel members (``vllm/...``) as this distribution's wheel holds them."""
        return frozenset(own_path(m, self.package) for m in members)

    def folder(self, folder: str) -> str:
        """The cache folder of one of vLLM's kinds (``vllm``, ``vllm-manager``) for it."""
        return own_path(folder, self.package)

    def check(self, version: str) -> None:
        """Refuse a version the suite cannot drive (vLLM's own rule; a fork's numbers are
        its own, checked by its entry)."""
        if self.is_vllm:
            check_supported(version)


#: vLLM itself.
VLLM_DISTRIBUTION = Distribution()

#: Largest member taken from a wheel (envs.py, the biggest, is ~120 kB).
MAX_MEMBER_BYTES = 4 * 1024 * 1024
#: Largest wheel accepted (vLLM's are ~350-450 MB).
MAX_WHEEL_BYTES = 2 * 1024 * 1024 * 1024
MANIFEST = "manifest.json"
#: pip's options for fetching exactly one binary wheel; the platform is fixed so that every
#: machine gets the same file (only pure-Python members are used).
PLATFORM_OPTIONS = (
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux1_x86_64",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--abi",
    "abi3",
)
#: How many of pip's last output lines a failure shows.
PIP_TAIL = 12


class WheelError(ReleaseError):
    """The release could not be downloaded, or its wheel is not acceptable."""


def cache_root() -> Path:
    """Where kvpool keeps downloaded releases."""
    explicit = os.environ.get("KVPOOL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kvpool"


#: The cache of the pool's files, the publisher's (``kvpool publish``) and the KV cache
#: manager's (``--manager vllm``): kept apart so that none changes what another's manifest
#: lists.
POOL_CACHE, PUBLISHER_CACHE, MANAGER_CACHE = "vllm", "vllm-publisher", "vllm-manager"


def release_dir(
    version: str, folder: str = POOL_CACHE, dist: Distribution = VLLM_DISTRIBUTION
) -> Path:
    return cache_root() / dist.folder(folder) / version


def pip_download_command(
    version: str, dest: str = "DIR", dist: Distribution = VLLM_DISTRIBUTION
) -> str:
    """The command a person runs to fetch the wheel by hand (shown in errors)."""
    return f"pip download --no-deps --only-binary=:all: {dist.project}=={version} -d {dest}"


def cached_release(
    version: str,
    download: bool = True,
    folder: str = POOL_CACHE,
    members: frozenset[str] = WHEEL_MEMBERS,
    dist: Distribution = VLLM_DISTRIBUTION,
) -> Path:
    """The folder holding ``vllm/...`` (a fork's ``package/...``) of release ``version``,
    from the cache or downloaded.

    Raises :class:`~.releases.ReleaseError` for a bad version string and
    :class:`WheelError` when the release is not cached and cannot be downloaded.
    """
    dist.check(version)
    where = release_dir(version, folder, dist)
    if valid_cache(where, version, dist.members(members)):
        return where
    if not download:
        raise WheelError(f"{dist.label} {version} is not in the cache ({where})")
    with tempfile.TemporaryDirectory(prefix="kvpool-vllm-") as tmp:
        wheel = _pip_download(version, Path(tmp), dist)
        return seed_cache(wheel, version, folder, members, dist)


def valid_cache(where: Path, version: str, members: frozenset[str] = WHEEL_MEMBERS) -> bool:
    """Whether ``where`` holds a complete, unaltered extraction of ``version``."""
    try:
        manifest = json.loads((where / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return False
    for name, digest in files.items():
        path = where / name
        if name not in members or path.is_symlink() or not path.is_file():
            return False
        if _sha256(path.read_bytes()) != digest:
            return False
    return True


def wheel_version(wheel: Path, dist: Distribution = VLLM_DISTRIBUTION) -> str:
    """The release number in a wheel's file name (``vllm-0.33.0-cp38-...whl``; a build
    tag after the version, as in ``vllm-0.23.0-2-cp38-...whl``, is allowed)."""
    prefix = re.escape(dist.wheel_prefix)
    match = re.fullmatch(prefix + r"-([^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl", wheel.name)
    if match is None:
        raise WheelError(
            f"{wheel.name} is not named like a {dist.label} wheel "
            f"({dist.wheel_prefix}-X.Y.Z-...-....whl)"
        )
    return match.group(1)


def seed_cache(
    wheel: Path,
    expected_version: str | None = None,
    folder: str = POOL_CACHE,
    members: frozenset[str] = WHEEL_MEMBERS,
    dist: Distribution = VLLM_DISTRIBUTION,
) -> Path:
    """Extract the block-pool files of ``wheel`` into the cache; the release's folder.

    The wheel itself is left where it is (callers that downloaded it delete it).
    """
    version = wheel_version(wheel, dist)
    if expected_version is not None and version != expected_version:
        raise WheelError(f"asked for {dist.label} {expected_version}, but pip fetched {wheel.name}")
    dist.check(version)
    size = wheel.stat().st_size
    if size > MAX_WHEEL_BYTES:
        raise WheelError(f"{wheel.name} is {size} bytes, more than a vLLM wheel can be")
    members = dist.members(members)
    contents = extract_members(wheel, members, dist)
    final = release_dir(version, folder, dist)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=final.parent))
    try:
        for name, data in contents.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        manifest = {
            "version": version,
            "wheel": wheel.name,
            "wheel_sha256": _file_sha256(wheel),
            "files": {name: _sha256(data) for name, data in sorted(contents.items())},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if final.exists() and not valid_cache(final, version, members):
            shutil.rmtree(final)
        if not final.exists():
            try:
                os.replace(staging, final)
            except OSError:
                # another process was not faster: retry
                if not valid_cache(final, version, members):
                    raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return final


def read_members(
    wheel: Path,
    members: frozenset[str],
    error: type[Exception],
    limit: int = MAX_MEMBER_BYTES,
) -> dict[str, bytes]:
    """The members of ``wheel`` named in ``members``, read in memory after checking each
    one: a member listed twice, a symlink or anything but a regular file, or one over
    ``limit`` bytes makes the whole wheel unacceptable (``error`` says why). Nothing is
    written here; a member that is absent is simply not returned."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise error(f"{wheel.name} is not a readable wheel: {exc}") from exc
    contents: dict[str, bytes] = {}
    with archive:
        for info in archive.infolist():
            name = info.filename
            if name not in members:
                continue
            if name in contents:
                raise error(f"{wheel.name}: {name} appears twice in the wheel")
            mode = info.external_attr >> 16
            if info.is_dir() or (mode and not stat.S_ISREG(mode)):
                raise error(f"{wheel.name}: {name} is not a regular file (mode {mode:o})")
            if info.file_size > limit:
                raise error(f"{wheel.name}: {name} is {info.file_size} bytes, over the limit")
            with archive.open(info) as member:
                data = member.read(limit + 1)
            if len(data) > limit:
                raise error(f"{wheel.name}: {name} unpacks to more than the limit")
            contents[name] = data
    return contents


def extract_members(
    wheel: Path,
    members: frozenset[str] = WHEEL_MEMBERS,
    dist: Distribution = VLLM_DISTRIBUTION,
) -> dict[str, bytes]:
    """The allowed members of ``wheel`` (default :data:`~.releases.WHEEL_MEMBERS`), each
    checked by :func:`read_members`; the release's required files must be among them."""
    contents = read_members(wheel, members, WheelError)
    required = (own_path(MODULES[m], dist.package) for m in REQUIRED)
    missing = sorted(path for path in required if path not in contents)
    if missing:
        raise WheelError(
            f"{wheel.name} lacks {', '.join(missing)}: not a vLLM wheel with a block pool"
        )
    return contents


def pip_download_argv(requirement: str, dest: Path) -> list[str]:
    """``pip download`` of one wheel, no dependencies, no prompts, bounded waits."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--timeout",
        "30",
        "--retries",
        "2",
        "--dest",
        str(dest),
        requirement,
    ]


def _pip_download(version: str, dest: Path, dist: Distribution = VLLM_DISTRIBUTION) -> Path:
    """Download the one wheel of ``version`` into ``dest``; quiet unless it fails."""
    base = pip_download_argv(f"{dist.project}=={version}", dest)
    attempts = [[*base, *PLATFORM_OPTIONS], base]
    outputs: list[str] = []
    for command in attempts:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            wheels = sorted(dest.glob(f"{dist.wheel_prefix}-*.whl"))
            if len(wheels) == 1:
                return wheels[0]
            outputs.append(f"pip reported success but left {len(wheels)} {dist.label} wheels")
            break
        outputs.append((done.stdout + done.stderr).strip())
        if not _no_matching_wheel(done.stdout + done.stderr):
            break  # the network or the index failed: another platform will not help
    tail = "\n".join(_meaningful_lines(outputs[-1])[-PIP_TAIL:])
    raise WheelError(
        f"could not download {dist.label} {version} with pip:\n{_indent(tail)}\n"
        f"Without network access, fetch the wheel on a machine that has it and point the "
        f"suite at the file (this also fills the cache, {release_dir(version, dist=dist)}):\n"
        f"  {pip_download_command(version, dist=dist)}\n"
        f"  kvpool conform --target {dist.package}@DIR/{dist.wheel_prefix}-{version}-<tags>.whl\n"
        f"or give it an unpacked wheel or source tree: --target {dist.package}@PATH "
        f"(PATH holds {dist.package}/v1/core/block_pool.py)"
    )


def _no_matching_wheel(output: str) -> bool:
    return "No matching distribution" in output or "Could not find a version" in output


def _meaningful_lines(output: str) -> list[str]:
    """pip's output less the notes about unusable local indexes."""
    return [
        line
        for line in output.splitlines()
        if line.strip() and not line.startswith("WARNING: Location ")
    ] or ["(pip printed nothing)"]


def _indent(text: str) -> str:
    return "\n".join(f"  | {line}" for line in text.splitlines())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = [
    "WheelError",
    "cache_root",
    "cached_release",
    "extract_members",
    "parse_version",
    "pip_download_command",
    "release_dir",
    "seed_cache",
    "valid_cache",
]
