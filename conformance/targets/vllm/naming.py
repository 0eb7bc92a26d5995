"""The installed vLLM's version, and the error every way of loading a vLLM raises."""

from __future__ import annotations

import sys


class VllmLoadError(Exception):
    """A vLLM (a release, a tree, the installed one, its manager) cannot be loaded; the
    message says what to fix."""


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
