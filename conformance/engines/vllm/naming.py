"""The installed vLLM's version, the name a loaded release is shown by, and the error every
way of loading a vLLM raises."""

from __future__ import annotations

import sys

from ...targets.description import Form, TargetDescription


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


def shown_name(described: TargetDescription, version: str) -> str:
    """How a vLLM target is shown: ``vllm==0.33.0``, ``vllm (installed 0.33.0)``, ..."""
    if described.form is Form.RELEASE:
        return described.text
    if described.form is Form.INSTALLED:
        return f"{described.text} (installed {version})"
    return f"{described.text} ({version})"
