"""Fetching one wheel of one release with pip (no dependencies, binary only).

pip's configured index is used (its ``pip.conf``, ``PIP_INDEX_URL``, ...), so the suite
reaches exactly the index the machine's pip does. The wheel of this interpreter is asked
for first; when the index has none (an engine built for other Pythons), the same release
is asked for as other CPythons' manylinux wheels: only pure-Python members are kept, so any
of them serves.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Protocol


class Wanted(Protocol):
    """What a download needs to know of the files wanted (a :class:`.files.ReleaseFiles`):
    the project on the index, and how messages name the engine and its targets."""

    @property
    def project(self) -> str: ...
    @property
    def shown(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def wheel_target(self) -> bool: ...
    @property
    def wheel_prefix(self) -> str: ...
    @property
    def advice(self) -> str: ...


class DownloadFailed(Exception):
    """pip could not fetch the wheel; the message says why and what to run instead (the
    cache turns it into its own error)."""


#: The platforms and Pythons of the fallback downloads.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
PYTHONS = ("3.12", "3.11", "3.10", "3.13")
#: How many of pip's last output lines a failure shows.
PIP_TAIL = 12
#: Seconds pip waits on the index per request, and its retries.
PIP_TIMEOUT = "30"
PIP_RETRIES = "2"


def pip_argv(*args: str) -> list[str]:
    """This interpreter's pip with ``args``: no prompts, no version check, bounded waits."""
    return [
        sys.executable,
        "-m",
        "pip",
        *args,
        "--disable-pip-version-check",
        "--no-input",
        "--timeout",
        PIP_TIMEOUT,
        "--retries",
        PIP_RETRIES,
    ]


def pip_download_argv(requirement: str, dest: Path) -> list[str]:
    """``pip download`` of one wheel, no dependencies, into ``dest``."""
    return pip_argv(
        "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest), requirement
    )


def pip_download_command(files: Wanted, version: str, dest: str = "DIR") -> str:
    """The command a person runs to fetch the wheel by hand (shown in errors)."""
    return f"pip download --no-deps --only-binary=:all: {files.project}=={version} -d {dest}"


def download_wheel(files: Wanted, version: str, dest: Path, cached_at: Path) -> Path:
    """The one wheel of ``files.project==version``, downloaded into ``dest`` (empty);
    ``cached_at`` is where its files will be kept (the message names it)."""
    base = pip_download_argv(f"{files.project}=={version}", dest)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    attempts = [base] + [
        [*base, *platforms, "--python-version", python, "--implementation", "cp"]
        for python in PYTHONS
    ]
    output = "(pip printed nothing)"
    for command in attempts:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted(dest.glob("*.whl"))
        if done.returncode == 0:
            if len(wheels) == 1:
                return wheels[0]
            output = f"pip reported success but left {len(wheels)} wheels"
            break
        output = done.stdout + done.stderr
        if not no_matching_wheel(output):
            break  # the network or the index failed: another platform will not help
    tail = "\n".join(f"  | {line}" for line in meaningful_lines(output)[-PIP_TAIL:])
    lines = [
        f"could not download {files.shown} {version} with pip:",
        tail,
        "Without network access, fetch the wheel on a machine that has it and point the "
        f"suite at the file (this also fills the cache, {cached_at}):",
        f"  {pip_download_command(files, version)}",
    ]
    if files.engine and files.wheel_target:
        lines += [
            f"  kvpool conform --target "
            f"{files.engine}@DIR/{files.wheel_prefix}-{version}-<tags>.whl",
            f"or give it an unpacked wheel or source tree: --target {files.engine}@PATH",
        ]
    elif files.engine:
        lines += [
            f"  python -m zipfile -e DIR/{files.wheel_prefix}-{version}-<tags>.whl TREE",
            f"  kvpool conform --target {files.engine}@TREE   (or a source checkout's tree)",
        ]
    if files.advice:
        lines.append(files.advice)
    raise DownloadFailed("\n".join(lines))


def no_matching_wheel(output: str) -> bool:
    """Whether pip's ``output`` says the index has no such wheel (as against failing)."""
    return "No matching distribution" in output or "Could not find a version" in output


def meaningful_lines(output: str) -> list[str]:
    """pip's output less its notes about unusable local indexes."""
    return [
        line
        for line in output.splitlines()
        if line.strip() and not line.startswith("WARNING: Location ")
    ] or ["(pip printed nothing)"]
