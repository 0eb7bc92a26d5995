"""``sglang`` / ``sglang==X.Y.Z`` / ``sglang@PATH``, each optionally ``,page=N``: for 0.4
releases SGLang's ``RadixCache`` over its token allocator, a token-granular manager with no
pool API of its own (the request machine's manager run checks it); from 0.5 on its own
``Scheduler``, at the engine machine only. ``sglang`` alone is 0.4.6.post5. With no
``page=`` a request-machine run draws both allocators: pages of one token where the drawn
hash block size is 1, else pages of the drawn size (as ``page=drawn``); ``page=1`` keeps
to the first."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from ...machines.engine.driver import EngineDriverFactory, EngineSetup
from ...machines.requests.target import ManagerTargetFactory
from ...targets.description import Form, TargetDescription
from ...targets.errors import TargetUsageError
from ...targets.registry import EngineEntry
from ...targets.releases.forms import load_form, release_name

#: The newest release the suite was run on (the 0.5 generation's scheduler driver).
NEWEST_CHECKED = "0.5.23"


def page_size(described: TargetDescription) -> int | None:
    """The page size ``described`` names: :data:`~.tree_view.PAGE_BY_DRAW` when it names
    none (page 1 or the drawn page, by the drawn hash block size), ``None`` for
    ``page=drawn``."""
    from .tree_view import PAGE_BY_DRAW

    value = described.option("page")
    if value is None or value == "drawn":
        return PAGE_BY_DRAW if value is None else None
    return int(value)


class SglangEntry(EngineEntry):
    name = "sglang"
    summary = (
        "SGLang 0.4.x's RadixCache over its token allocator, a token-granular manager "
        "(--machine requests; 0.4.6.post5 by default), and its own Scheduler at --machine "
        "engine; from 0.5 on its own Scheduler, --machine engine only (needs the sglang "
        "extra: torch)"
    )
    manager_summary = summary
    forms = MappingProxyType(
        {
            "sglang": summary,
            "sglang,page=N": "the same over its PagedTokenToKVPoolAllocator with pages of N "
            "tokens, a power of two (blocks are pages; hits cut to whole pages); 'page=drawn' "
            "takes the largest power of two up to the drawn block size",
            "sglang==X.Y.Z": "the same from another 0.4.x release (its memory-cache files, "
            "run alone; ',page=N' too); a 0.5.x release's scheduler files, at --machine "
            "engine only",
            "sglang@PATH": "an SGLang checkout's python/ folder or unpacked wheel at PATH",
        }
    )
    extra = "sglang"
    project = "sglang"
    has_pool = False
    auto_manager = True
    accepted = frozenset({Form.BUILT_IN, Form.RELEASE, Form.PATH})

    def parse(self, described: TargetDescription) -> TargetDescription:
        from .release import DEFAULT_VERSION

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
        from .release import DEFAULT_VERSION

        return (DEFAULT_VERSION, NEWEST_CHECKED)

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from .generations import release_managers, tree_managers
        from .loader import SglangUnavailable

        size = page_size(described)
        named = described.option("page")
        pages = "" if named is None else f",page={named}"
        name = release_name(described, pages)
        return load_form(
            described,
            lambda root: tree_managers(root, name, size),
            lambda version: release_managers(version, name, size),
            SglangUnavailable,
        ), name

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
