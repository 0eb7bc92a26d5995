"""``lmdeploy`` / ``lmdeploy==X.Y.Z`` / ``lmdeploy@PATH``: LMDeploy's ``LogicalAllocator`` as
a pool without a prefix cache, its block manager with the prefix trie as the request
machine's manager (``--manager auto`` on an LMDeploy target, or ``--manager lmdeploy``),
and its ``Scheduler`` at the engine machine (``--machine engine``). ``lmdeploy`` alone is
the default release (0.18.0)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from kvpool.spec import PoolConfig, Profile

from ...machines.engine.driver import EngineDriverFactory, EngineSetup
from ...machines.pool.target import Target, TargetFactory
from ...machines.requests.target import ManagerTargetFactory
from ...targets.description import Form, TargetDescription
from ...targets.errors import TargetLoadError
from ...targets.registry import EngineEntry, ProfileChoice, ReleaseSupport
from ...targets.releases.forms import Loaded, load_form, release_name


class LmdeployEntry(EngineEntry):
    name = "lmdeploy"
    summary = "LMDeploy's LogicalAllocator, its block manager with the prefix trie, its Scheduler"
    forms = MappingProxyType(
        {
            "lmdeploy==X.Y.Z": "LMDeploy's LogicalAllocator (PyTorch engine) as a pool without a "
            "prefix cache, its block manager with the prefix trie as the requests machine's "
            "manager, and its Scheduler at the engine machine; 'lmdeploy' alone is 0.18.0 "
            "(needs the lmdeploy extra: numpy)",
            "lmdeploy@PATH": "an LMDeploy checkout or unpacked wheel at PATH",
        }
    )
    manager_summary = (
        "the DefaultBlockManager with its BlockTrie of the LMDeploy release --target names "
        "(what --manager auto runs on an LMDeploy target; needs the lmdeploy extra: numpy)"
    )
    extra = "lmdeploy"
    project = "lmdeploy"
    auto_manager = True
    accepted = frozenset({Form.BUILT_IN, Form.RELEASE, Form.PATH})

    def parse(self, described: TargetDescription) -> TargetDescription:
        from .release import DEFAULT_VERSION

        described = super().parse(described)
        if described.form is Form.BUILT_IN:
            return described.with_changes(form=Form.RELEASE, version=DEFAULT_VERSION)
        return described

    def versions(self) -> tuple[str, ...]:
        from .release import DEFAULT_VERSION

        return (DEFAULT_VERSION,)

    def support(self, version: str) -> ReleaseSupport:
        from .release import CHECKED

        if version in CHECKED:
            return ReleaseSupport(True)
        return ReleaseSupport(
            None,
            f"not run on this release (run on {', '.join(CHECKED)}): "
            f"kvpool conform --target {self.release_form(version)} --manager lmdeploy tells",
        )

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        from .allocator import lmdeploy_allocator_target
        from .release import load_release, load_tree

        release = _load(described, load_tree, load_release)
        name = release_name(described)
        if described.form is Form.PATH:
            name = f"{name} ({release.version})"

        def factory(config: PoolConfig, profile: Profile) -> Target:
            return lmdeploy_allocator_target(release, config, profile)

        return factory, name

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from .manager import LmdeployManagerFactory
        from .manager_release import load_manager_release, load_manager_tree

        release = _load(described, load_manager_tree, load_manager_release)
        name = release_name(described)
        return LmdeployManagerFactory(release, f"{name} (block manager and prefix trie)"), name

    def load_driver(self, described: TargetDescription) -> tuple[EngineDriverFactory, str]:
        """Drivers of the release's own ``Scheduler`` (``--machine engine``)."""
        from .driver import LmdeployDriver
        from .manager_release import load_manager_release, load_manager_tree

        release = _load(described, load_manager_tree, load_manager_release)
        label = f"{release_name(described)} (Scheduler)"

        def factory(setup: EngineSetup) -> LmdeployDriver:
            return LmdeployDriver(release, setup, label)

        return factory, label

    def manager_on_auto(
        self, described: TargetDescription
    ) -> tuple[ManagerTargetFactory | None, str]:
        """Its block manager with the prefix trie, or none when the release or tree lacks
        the files of that layout (an older one: its pool is still checked), the reason in
        the name."""
        try:
            return self.load_manager(described)
        except TargetLoadError as exc:
            return None, f"none ({str(exc).splitlines()[0]})"

    def profile(self, described: TargetDescription) -> ProfileChoice:
        return ProfileChoice("lmdeploy", "LMDeploy's own profile (its allocator's policy)")


def _load(
    described: TargetDescription,
    from_tree: Callable[[Path, str], Loaded],
    from_release: Callable[[str], Loaded],
) -> Loaded:
    """What ``from_tree(root, its version)`` or ``from_release(version)`` loads."""
    from .release import LmdeployUnavailable, version_in_tree

    return load_form(
        described,
        lambda root: from_tree(root, version_in_tree(root)),
        from_release,
        LmdeployUnavailable,
    )


ENTRY = LmdeployEntry()
