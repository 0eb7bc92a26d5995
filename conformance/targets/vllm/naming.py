"""How ``--target`` names a vLLM: its forms, the installed release's version, and the name a
loaded release is shown by."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .target import VllmRelease


class VllmLoadError(Exception):
    """A vLLM (a release, a tree, the installed one, its manager) cannot be loaded; the
    message says what to fix."""


def is_vllm_spec(spec: str) -> bool:
    """Whether ``--target`` names a vLLM release (``vllm``, ``vllm==X.Y.Z``, ``vllm@PATH``)."""
    return spec == "vllm" or spec.startswith(("vllm==", "vllm@"))


def installed_vllm_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        raise VllmLoadError(
            "vLLM is not installed in this environment "
            f"({sys.executable}): install it, or check a release without installing it "
            "with --target vllm==X.Y.Z"
        ) from None


def vllm_target_name(spec: str, release: VllmRelease) -> str:
    """How a vLLM target is shown: ``vllm==0.33.0``, ``vllm (installed 0.33.0)``, ..."""
    if spec.startswith("vllm=="):
        return spec
    if spec == "vllm":
        return f"vllm (installed {release.version})"
    return f"{spec} ({release.version})"
