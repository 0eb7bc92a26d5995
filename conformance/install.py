"""The one way the suite tells a user to install an optional part of kvpool-spec.

kvpool-spec is not on the package index: it is installed from a clone of its repository
(``pip install -e .``) or from a wheel built there (see the README). A hint naming
``kvpool-spec[X]`` would send the user to the index, so every hint for an extra is written
here, from the extras ``pyproject.toml`` declares (a test keeps :data:`EXTRAS` equal to
them). Standard library only: ``--help`` texts use it.
"""

from __future__ import annotations

#: The optional-dependency groups (extras) of ``pyproject.toml``.
EXTRAS = frozenset(
    {
        "all",
        "bench",
        "docs",
        "dynamo",
        "dynamo-mocker",
        "fuzz",
        "lmdeploy",
        "nanovllm",
        "sglang",
        "sglang-kernels",
        "test",
        "tokenspeed",
        "vllm-router",
    }
)


def extra_hint(extra: str) -> str:
    """The command that installs ``extra``, run in the kvpool-spec clone:
    ``pip install -e '.[fuzz]' (in the kvpool-spec clone)``. Raises ``ValueError`` for an
    extra ``pyproject.toml`` does not declare, so a misspelt hint fails where it is
    written."""
    if extra not in EXTRAS:
        raise ValueError(f"kvpool-spec has no extra {extra!r}; it has {', '.join(sorted(EXTRAS))}")
    return f"pip install -e '.[{extra}]' (in the kvpool-spec clone)"
