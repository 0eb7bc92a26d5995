"""``nanovllm`` / ``nanovllm-fork`` / ``nanovllm@PATH``: nano-vllm's ``Scheduler`` (the engine
machine drives it) and its ``BlockManager``, a manager with no pool API of its own (the
request machine's manager run checks it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...machines.engine.driver import EngineDriverFactory, EngineSetup
from ...machines.requests.target import ManagerTargetFactory
from ...targets.description import Form, TargetDescription
from ...targets.registry import EngineEntry, ProfileChoice
from ...targets.releases.forms import load_form

if TYPE_CHECKING:
    from .release import NanoVllmRelease


class NanoVllmEntry(EngineEntry):
    extra = "nanovllm"
    has_pool = False
    auto_manager = True

    def __init__(self, name: str, summary: str, trees: bool) -> None:
        from .release import DISTRIBUTIONS

        self.name = name
        self.project = DISTRIBUTIONS[name][0]
        self.summary = self.manager_summary = summary
        self.forms = {name: summary}
        self.accepted = frozenset({Form.BUILT_IN})
        if trees:  # a checkout is upstream's layout, whichever fork it holds
            self.forms[f"{name}@PATH"] = "a nano-vllm checkout or unpacked distribution at PATH"
            self.accepted |= {Form.PATH}

    def versions(self) -> tuple[str, ...]:
        from .release import DISTRIBUTIONS

        return (DISTRIBUTIONS[self.name][1],)

    def release(self, described: TargetDescription) -> NanoVllmRelease:
        """The files ``described`` names: a tree's, else this name's distribution's."""
        from .release import NanoVllmUnavailable, load_distribution, load_tree, version_label

        return load_form(
            described,
            lambda root: load_tree(root, version_label(root)),
            lambda _: load_distribution(self.name),  # each name is one distribution's release
            NanoVllmUnavailable,
        )

    def load_driver(self, described: TargetDescription) -> tuple[EngineDriverFactory, str]:
        """Drivers of the release's own ``Scheduler`` (``--machine engine``)."""
        from .driver import NanoVllmDriver

        release = self.release(described)
        label = f"{described.text} ({release.label})"

        def factory(setup: EngineSetup) -> NanoVllmDriver:
            return NanoVllmDriver(release, setup, label)

        return factory, label

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from .manager import nanovllm_managers

        release = self.release(described)
        factory: Any = nanovllm_managers(  # a ManagerTargetFactory at run time
            release, f"{described.text} ({release.label})"
        )
        return factory, described.text

    def profile(self, described: TargetDescription) -> ProfileChoice:
        return ProfileChoice(
            "nanovllm", "nano-vllm's own profile (keys at scheduling, within one forward pass)"
        )


UPSTREAM = NanoVllmEntry(
    "nanovllm",
    "nano-vllm's BlockManager, a manager (--machine requests), and its Scheduler "
    "(--machine engine): upstream's as nano-vllm-npu 0.0.2 ships them (needs the "
    "nanovllm extra: xxhash, numpy)",
    trees=True,
)
FORK = NanoVllmEntry(
    "nanovllm-fork",
    "the same from nano-vllm-fork 20260210 (drops a freed block's hash entry)",
    trees=False,
)
