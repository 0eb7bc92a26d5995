"""A few files of an engine's wheel, downloaded once and kept with a manifest.

The engines other than vLLM (LMDeploy, nano-vllm's distributions) are checked the way a
vLLM release is: ``pip download --no-deps`` fetches the wheel into a temporary folder, only
the named pool files are read out of it (exact names, regular files, under a size limit),
and they are written under ``<cache>/<engine>/<version>/`` beside a ``manifest.json`` that
records the wheel's name and SHA-256 and each file's SHA-256. Every load checks the
manifest; a file that changed on disk makes the cache invalid and it is fetched again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .vllm.wheel import cache_root, pip_download_argv, read_members

MANIFEST = "manifest.json"
#: Largest file taken from a wheel (the pool files are tens of kB).
MAX_MEMBER_BYTES = 2 * 1024 * 1024
#: Largest wheel accepted (LMDeploy's are ~110 MB, with its CUDA kernels).
MAX_WHEEL_BYTES = 1024 * 1024 * 1024
#: pip's platform options, tried after a plain download when the index has no wheel for
#: this interpreter (only pure-Python members are used, so any CPython wheel serves).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
PYTHONS = ("3.12", "3.11", "3.10", "3.13")


class EngineWheelError(Exception):
    """The engine's wheel could not be fetched or is not acceptable; the message says why."""


@dataclass(frozen=True)
class EngineFiles:
    """Which files of which distribution a target needs."""

    #: The cache folder's name (``lmdeploy``).
    engine: str
    #: The distribution on the index (``lmdeploy``, ``nano-vllm-npu``).
    distribution: str
    #: Paths inside the wheel to keep; all must be present.
    members: frozenset[str]


def engine_dir(files: EngineFiles, version: str) -> Path:
    return cache_root() / files.engine / version


def cached_files(files: EngineFiles, version: str) -> Path:
    """The folder holding ``files.members`` of ``distribution==version``: from the cache, or
    downloaded now (the wheel is deleted once its members are read)."""
    where = engine_dir(files, version)
    if valid_cache(where, files, version):
        return where
    with tempfile.TemporaryDirectory(prefix=f"kvpool-{files.engine}-") as tmp:
        wheel = download_wheel(files.distribution, version, Path(tmp))
        contents = extract(wheel, files.members)
        write_cache(where, files, version, wheel, contents)
    return where


def valid_cache(where: Path, files: EngineFiles, version: str) -> bool:
    """Whether ``where`` holds every member of ``files`` as the manifest recorded them."""
    try:
        manifest = json.loads((where / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        return False
    recorded = manifest.get("files")
    if not isinstance(recorded, dict) or set(recorded) != set(files.members):
        return False
    for name, digest in recorded.items():
        path = where / name
        if path.is_symlink() or not path.is_file():
            return False
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return False
    return True


def download_wheel(distribution: str, version: str, dest: Path) -> Path:
    """One wheel of ``distribution==version`` in ``dest``: this interpreter's first, else
    another CPython's (the members used are pure Python)."""
    base = pip_download_argv(f"{distribution}=={version}", dest)
    attempts = [base]
    for python in PYTHONS:
        platform = [arg for p in PLATFORMS for arg in ("--platform", p)]
        attempts.append([*base, *platform, "--python-version", python, "--implementation", "cp"])
    output = ""
    for command in attempts:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted(dest.glob("*.whl"))
        if done.returncode == 0 and len(wheels) == 1:
            return wheels[0]
        output = done.stdout + done.stderr
        if "No matching distribution" not in output and "Could not find a version" not in output:
            break  # the network or the index failed: another platform will not help
    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith("WARNING:")]
    tail = "\n".join(f"  | {ln}" for ln in lines[-8:])
    raise EngineWheelError(
        f"could not download {distribution} {version} with pip:\n{tail}\n"
        f"fetch it by hand (pip download --no-deps {distribution}=={version} -d DIR) and "
        f"point the target at the unpacked wheel with @PATH"
    )


def extract(wheel: Path, members: Iterable[str]) -> dict[str, bytes]:
    """The named members of ``wheel``, each checked (regular file, under the size limit,
    listed once); :class:`EngineWheelError` if one is missing or unacceptable."""
    wanted = frozenset(members)
    if wheel.stat().st_size > MAX_WHEEL_BYTES:
        raise EngineWheelError(f"{wheel.name} is larger than any engine wheel should be")
    contents = read_members(wheel, wanted, EngineWheelError, MAX_MEMBER_BYTES)
    missing = sorted(wanted - set(contents))
    if missing:
        raise EngineWheelError(f"{wheel.name} lacks {', '.join(missing)}")
    return contents


def write_cache(
    where: Path, files: EngineFiles, version: str, wheel: Path, contents: dict[str, bytes]
) -> None:
    """Write ``contents`` and their manifest into ``where``, atomically (a staging folder
    renamed into place)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=where.parent))
    try:
        for name, data in contents.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        manifest = {
            "distribution": files.distribution,
            "version": version,
            "wheel": wheel.name,
            "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "files": {n: hashlib.sha256(d).hexdigest() for n, d in sorted(contents.items())},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if where.exists():
            shutil.rmtree(where)
        os.replace(staging, where)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
