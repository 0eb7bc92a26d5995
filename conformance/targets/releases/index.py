"""The newest release of a project, as the package index pip is configured with says.

``newest_release("vllm")`` runs ``pip index versions vllm`` (the same pip, options and
index the downloader uses: :mod:`.download`) and reads the release it names first; when
this interpreter has no wheel of the project, the same question is asked for the other
CPythons' manylinux wheels, as the downloader asks. pre-releases are not counted. What pip
prints is data: at most :data:`~kvpool.conformance.bounds.MAX_INDEX_ANSWER_BYTES` of it is
read, and an answer that names no release is an error, never a guess.
"""

from __future__ import annotations

import re
import subprocess

from ...bounds import MAX_INDEX_ANSWER_BYTES
from .download import PLATFORMS, PYTHONS, meaningful_lines, no_matching_wheel, pip_argv
from .files import ReleaseFilesError

#: How long one question to the index may take, in seconds.
INDEX_SECONDS = 120


class IndexAnswerError(ReleaseFilesError):
    """The package index could not be asked, or its answer names no release."""


def newest_release(project: str) -> str:
    """The newest release of ``project`` on the configured index;
    :class:`IndexAnswerError` saying why when there is none to be had."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", project) is None:
        raise IndexAnswerError(f"{project!r} is not a project name")
    base = pip_argv("index", "versions", project)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    attempts = [base] + [
        [*base, "--only-binary=:all:", *platforms, "--python-version", python] for python in PYTHONS
    ]
    output = ""
    for command in attempts:
        try:
            done = subprocess.run(command, capture_output=True, check=False, timeout=INDEX_SECONDS)
        except subprocess.TimeoutExpired:
            raise IndexAnswerError(
                f"the package index did not answer about {project} in {INDEX_SECONDS} s"
            ) from None
        output = (done.stdout[:MAX_INDEX_ANSWER_BYTES] + done.stderr[-4096:]).decode(
            "utf-8", "replace"
        )
        if done.returncode == 0:
            return read_answer(project, output)
        if not no_matching_wheel(output):
            break  # the network or the index failed: another platform will not help
    last = meaningful_lines(output)[-1]
    if no_matching_wheel(output):
        raise IndexAnswerError(f"the package index has no release of {project} ({last})")
    raise IndexAnswerError(f"asking the package index about {project} failed: {last}")


def read_answer(project: str, output: str) -> str:
    """The release ``pip index versions`` names in its first line, ``PROJECT (X.Y.Z)``."""
    for line in output.splitlines():
        found = re.fullmatch(r"(\S+) \(([0-9][0-9A-Za-z.+!-]{0,63})\)\s*", line)
        if found is not None and _normal(found.group(1)) == _normal(project):
            return found.group(2)
    raise IndexAnswerError(
        f"the package index's answer about {project} names no release: "
        f"{meaningful_lines(output)[0][:200]!r}"
    )


def _normal(project: str) -> str:
    """A project name as the index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", project).lower()
