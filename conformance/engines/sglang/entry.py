"""``sglang`` / ``sglang==X.Y.Z`` / ``sglang@PATH``, each optionally ``,page=N``: SGLang's
own ``Scheduler`` (0.4: :mod:`.driver_0_4`; from 0.5 on: :mod:`.driver`), at the engine
machine only. ``sglang`` alone is 0.4.6.post5. A 0.4 release runs with pages of one token
unless ``page=N`` names another power of two (``page=drawn``: the drawn block size). The
requests machine refuses every release (exit 2): SGLang has no manager of its own to call
one request action at a time, only the scheduler that calls its radix cache
(:mod:`.generations`)."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from ...machines.engine.driver import EngineDriverFactory, EngineSetup
from ...machines.requests.target import ManagerTargetFactory
from ...targets.description import Form, TargetDescription
from ...targets.errors import TargetUsageError
from ...targets.registry import EngineEntry
from ...targets.releases.forms import load_form

#: The release ``sglang`` alone names (the 0.4 generation's scheduler driver).
DEFAULT_VERSION = "0.4.6.post5"
#: The newest release the suite was run on (the 0.5 generation's scheduler driver).
NEWEST_CHECKED = "0.5.23"


class SglangEntry(EngineEntry):
    name = "sglang"
    summary = (
        "SGLang's own Scheduler over its RadixCache, an engine: --machine engine only "
        "(0.4.6.post5 by default; needs the sglang extra: torch)"
    )
    forms = MappingProxyType(
        {
            "sglang": "SGLang 0.4.6.post5's Scheduler over its RadixCache and token "
            "allocator (pages of one token), --machine engine only",
            "sglang,page=N": "the same over its PagedTokenToKVPoolAllocator with pages of N "
            "tokens, a power of two (blocks are pages; its kernels in triton's interpreter); "
            "'page=drawn' takes the drawn block size",
            "sglang==X.Y.Z": "the same from another 0.4.x release's scheduler files "
            "(',page=N' too), or a 0.5.x release's, --machine engine only",
            "sglang@PATH": "an SGLang checkout's python/ folder or unpacked wheel at PATH",
        }
    )
    extra = "sglang"
    project = "sglang"
    has_pool = False
    #: Not a manager, but --manager auto must reach load_manager, which says to use the
    #: engine machine (with none, the requests machine would run nothing and pass).
    auto_manager = True
    accepted = frozenset({Form.BUILT_IN, Form.RELEASE, Form.PATH})

    def parse(self, described: TargetDescription) -> TargetDescription:
        if described.form not in self.accepted:
            raise TargetUsageError(f"{described.text!r}: sglang takes {self.forms_line()}")
        for key, value in described.options:
            drawn = key == "page" and value == "drawn"
            if not drawn and not (key == "page" and value.isdigit() and _power_of_two(int(value))):
                option = f"{key}={value}" if value else key
                raise TargetUsageError(
                    f"{described.text}: after the comma SGLang takes 'page=N' (N tokens a "
                    "page, a power of two: its paged allocation kernels need one) or "
                    f"'page=drawn', not {option!r}"
                )
        if described.form is Form.BUILT_IN:
            return described.with_changes(form=Form.RELEASE, version=DEFAULT_VERSION)
        return described

    def versions(self) -> tuple[str, ...]:
        return (DEFAULT_VERSION, NEWEST_CHECKED)

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from .generations import engine_only

        raise engine_only(described.text)

    def load_driver(self, described: TargetDescription) -> tuple[EngineDriverFactory, str]:
        """Drivers of the release's own scheduler (``--machine engine``; a 0.4 release or
        tree: :meth:`_load_driver_0_4`)."""
        from .driver import SglangSchedulerDriver
        from .generations import is_0_5
        from .loader import SglangUnavailable
        from .release_0_5 import is_generation
        from .scheduler_release import load_scheduler_release, load_scheduler_tree

        if described.form is Form.RELEASE and not is_0_5(described.version or ""):
            return self._load_driver_0_4(described)
        if described.form is Form.PATH and not is_generation(Path(described.path or "")):
            return self._load_driver_0_4(described)
        release = load_form(
            described,
            lambda root: load_scheduler_tree(root, f"sglang at {root}"),
            load_scheduler_release,
            SglangUnavailable,
        )
        label = f"{described.text} ({release.label})"

        def factory(setup: EngineSetup) -> SglangSchedulerDriver:
            return SglangSchedulerDriver(release, setup, label)

        return factory, label

    def _load_driver_0_4(self, described: TargetDescription) -> tuple[EngineDriverFactory, str]:
        """Drivers of a 0.4 release's own scheduler (pages of ``page=N`` tokens, 1 by
        default; ``page=drawn``: the drawn block size)."""
        from .driver_0_4 import SglangScheduler04Drivers
        from .loader import SglangUnavailable
        from .scheduler_release_0_4 import load_scheduler_release, load_scheduler_tree

        release = load_form(
            described,
            lambda root: load_scheduler_tree(root, f"sglang at {root}"),
            load_scheduler_release,
            SglangUnavailable,
        )
        named = described.option("page")
        page = None if named == "drawn" else int(named or 1)
        label = f"{described.text} ({release.label})"
        return SglangScheduler04Drivers(release, label, page), label


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


ENTRY = SglangEntry()
