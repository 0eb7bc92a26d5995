"""``tokenspeed`` / ``tokenspeed==0.1.42``: TokenSpeed's C++ scheduler, an engine checked by
the engine machine (``--machine engine``) through its driver; it has no pool or manager API
of its own."""

from __future__ import annotations

import importlib
import os
from importlib import metadata
from types import MappingProxyType
from typing import Any

from ...install import extra_hint
from ...machines.engine.driver import EngineDriverFactory, EngineSetup
from ...machines.requests.target import ManagerTargetFactory
from ...targets.description import Form, TargetDescription
from ...targets.errors import TargetLoadError
from ...targets.registry import EngineEntry

#: The release the suite is checked with (the extra [tokenspeed] installs it).
VERSION = "0.1.42"
DISTRIBUTION = "tokenspeed-scheduler"


class TokenSpeedEntry(EngineEntry):
    name = "tokenspeed"
    label = "TokenSpeed"
    summary = (
        "TokenSpeed's C++ scheduler (tokenspeed-scheduler), an engine: --machine engine only "
        "(needs the tokenspeed extra)"
    )
    forms = MappingProxyType(
        {
            "tokenspeed": "TokenSpeed's C++ scheduler as installed (tokenspeed-scheduler), "
            "an engine: --machine engine only (needs the tokenspeed extra: 0.1.42)",
            "tokenspeed==VERSION": "the same, checked to be that release",
        }
    )
    extra = "tokenspeed"
    has_pool = False
    #: Not a manager, but --manager auto must reach load_manager, which says to use the
    #: engine machine (with none, the requests machine would run nothing and pass).
    auto_manager = True
    accepted = frozenset({Form.BUILT_IN, Form.RELEASE})
    project = DISTRIBUTION

    def versions(self) -> tuple[str, ...]:
        return (VERSION,)

    def load_pool(self, described: TargetDescription) -> Any:
        raise TargetLoadError(self._engine_only(described))

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        raise TargetLoadError(self._engine_only(described))

    def load_driver(self, described: TargetDescription) -> tuple[EngineDriverFactory, str]:
        """Drivers of the installed scheduler, which must be the release named."""
        try:
            installed = metadata.version(DISTRIBUTION)
            # its scheduler logs each flush at info level to stdout (spdlog, which reads
            # SPDLOG_LEVEL when the module loads): warnings only, unless the user says
            os.environ.setdefault("SPDLOG_LEVEL", "warn")
            ts = importlib.import_module("tokenspeed_scheduler")  # C++ bindings, untyped
        except (metadata.PackageNotFoundError, ImportError) as exc:
            raise TargetLoadError(
                f"{described.text} needs {DISTRIBUTION}: {extra_hint('tokenspeed')} "
                f"(or pip install {DISTRIBUTION}=={VERSION}): {exc}"
            ) from exc
        wanted = described.version
        if wanted is not None and wanted != installed:
            raise TargetLoadError(
                f"{described.text}: {DISTRIBUTION} {installed} is installed, not {wanted} "
                f"(pip install {DISTRIBUTION}=={wanted})"
            )
        from .driver import TokenSpeedDriver

        label = f"tokenspeed=={installed}"

        def factory(setup: EngineSetup) -> TokenSpeedDriver:
            return TokenSpeedDriver(ts, setup, label)

        return factory, label

    @staticmethod
    def _engine_only(described: TargetDescription) -> str:
        return (
            f"{described.text} is a scheduler with no pool or manager API of its own: check "
            "it with --machine engine"
        )


ENTRY = TokenSpeedEntry()
