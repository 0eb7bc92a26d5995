"""One factory for the engine managers judged by the request-level properties alone.

nano-vllm's ``BlockManager`` is loaded once per run (a release) and built afresh per test
case. It narrows a drawn setup to what it can take (one full-attention group, caching on)
before it is built, and says so through ``supported_setup``, which the property run and
the shrinker call too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from kvpool.spec import Profile

from ..machines.requests.target import RequestSetup

Release = TypeVar("Release")
Built = TypeVar("Built")


class ReleaseManagerFactory(Generic[Release, Built]):
    """Builds a manager target from one loaded release for every test case."""

    #: Its managers are judged by the request-level properties, not beside the spec's.
    checked_by_properties = True

    def __init__(
        self,
        release: Release,
        name: str,
        build: Callable[[Release, RequestSetup, str], Built],
        narrow: Callable[[RequestSetup], RequestSetup],
    ) -> None:
        self.release = release
        self.name = name
        self.build = build
        self.narrow = narrow

    def supported_setup(self, setup: RequestSetup) -> RequestSetup:
        """``setup`` narrowed to what the manager can be built with (idempotent)."""
        return self.narrow(setup)

    def __call__(self, setup: RequestSetup, profile: Profile) -> Built:
        return self.build(self.release, self.narrow(setup), self.name)
