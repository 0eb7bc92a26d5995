"""Release numbers as pools write them (PEP 440), ordered as PEP 440 orders them.

vLLM writes ``0.33.0`` for a release, ``0.34.0rc1`` for a release candidate,
``0.33.0.post1`` for a post-release and, from a working copy, ``0.34.0.dev118+g4ba787ec9``
(118 commits after the last tag, at commit ``4ba787ec9``). A pre-release or development
build of X.Y.Z comes *before* X.Y.Z, so the profile table (first release -> profile)
judges it by the newest profile below X.Y.Z.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The normal forms PEP 440 writes (and vLLM's builds use): release numbers, then an
#: optional ``aN``/``bN``/``rcN``, ``.postN``, ``.devN`` and ``+local`` label.
_VERSION = re.compile(
    r"(?P<release>\d+(?:\.\d+)*)"
    r"(?:(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:\.post(?P<post>\d+))?"
    r"(?:\.dev(?P<dev>\d+))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:\.[a-z0-9]+)*))?"
)
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


@dataclass(frozen=True)
class Version:
    """One parsed version string; :meth:`key` orders versions as PEP 440 does."""

    text: str
    release: tuple[int, ...]
    #: ``("rc", 1)`` for ``rc1``; ``None`` for no pre-release segment.
    pre: tuple[str, int] | None = None
    post: int | None = None
    dev: int | None = None
    local: str | None = None

    @property
    def is_prerelease(self) -> bool:
        """A release candidate, alpha, beta or development build (before its release)."""
        return self.pre is not None or self.dev is not None

    @property
    def base(self) -> str:
        """The release it leads to or follows: ``0.34.0`` for ``0.34.0.dev118+g4ba787ec9``."""
        return ".".join(str(n) for n in self.release)

    def key(self) -> tuple[object, ...]:
        """PEP 440's order: ``X.Y.devN`` < ``X.YaN`` < ``X.YrcN`` < ``X.Y`` < ``X.Y.postN``.
        The local label (``+g4ba787ec9``) does not order releases of the suite's table."""
        release = self.release + (0,) * max(0, 4 - len(self.release))
        if self.pre is not None:
            pre: tuple[int, int] = (_PRE_RANK[self.pre[0]], self.pre[1])
        elif self.dev is not None and self.post is None:
            pre = (-1, 0)  # X.Y.devN: before every pre-release of X.Y
        else:
            pre = (3, 0)  # the release itself, or its post-releases
        post = -1 if self.post is None else self.post
        dev = float("inf") if self.dev is None else float(self.dev)
        return (release, pre, post, dev)


class VersionError(ValueError):
    """Not a version string PEP 440 (and so vLLM) writes; the message shows the forms."""


def parse_version(text: str) -> Version:
    """``text`` parsed; :class:`VersionError` for anything PEP 440 does not write."""
    match = _VERSION.fullmatch(text)
    if match is None:
        raise VersionError(
            f"{text!r} is not a vLLM release number: write it like 0.33.0, 0.34.0rc1, "
            "0.33.0.post1 or 0.34.0.dev118+g4ba787ec9 (PEP 440)"
        )
    pre = None
    if match["pre"] is not None:
        pre = (match["pre"], int(match["pre_n"]))
    post = None if match["post"] is None else int(match["post"])
    dev = None if match["dev"] is None else int(match["dev"])
    release = tuple(int(n) for n in match["release"].split("."))
    return Version(text, release, pre, post, dev, match["local"])
