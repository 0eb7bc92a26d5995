"""``vllm`` / ``vllm==X.Y.Z`` / ``vllm@PATH``: vLLM's ``BlockPool`` (and, with ``--manager
vllm``, its ``KVCacheManager``) as a registry entry.

- ``vllm`` — the vLLM installed in this environment (its block-pool modules, imported
  normally);
- ``vllm==X.Y.Z`` — a released vLLM, downloaded once into the user's cache (no
  dependencies; only its block-pool files are kept) and loaded in isolation, without
  importing vLLM or torch;
- ``vllm@PATH`` — a vLLM source tree or unpacked wheel (PATH holds
  ``vllm/v1/core/block_pool.py``) or a wheel file, loaded the same way.

At the engine machine (``--machine engine``) ``vllm`` and ``vllm==X.Y.Z`` run the installed
vLLM's v1 ``Scheduler`` (:mod:`.scheduler_loading`: its config classes need torch).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from ...machines.engine.driver import EngineDriverFactory, EngineSetup
from ...machines.pool.target import TargetFactory
from ...machines.requests.target import ManagerTargetFactory
from ...targets.description import Form, TargetDescription
from ...targets.errors import TargetLoadError, TargetUsageError
from ...targets.registry import EngineEntry, ProfileChoice, ReleaseSupport, engine
from .distribution import VLLM_DISTRIBUTION, Distribution, installed_version, version_in_tree
from .naming import VllmLoadError, shown_name
from .package import VLLM, own_name

if TYPE_CHECKING:
    from .target import VllmRelease


class VllmEntry(EngineEntry):
    name = "vllm"
    label = "vLLM"
    summary = "vLLM's BlockPool and KVCacheManager"
    forms = MappingProxyType(
        {
            "vllm": "the vLLM installed in this environment (its block-pool modules)",
            "vllm==X.Y.Z": "a released vLLM's BlockPool, downloaded once into the cache "
            "(no vLLM, torch or GPU needed)",
            "vllm@PATH": "a vLLM source tree, unpacked wheel or wheel file at PATH",
        }
    )
    manager_summary = (
        "the KV cache manager of the vLLM release --target names (vllm==X.Y.Z, vllm@PATH, "
        "vllm): its own KVCacheManager, coordinator and single-type managers"
    )
    manager_follows_target = True
    accepted = frozenset({Form.BUILT_IN, Form.RELEASE, Form.PATH})
    #: Where its releases come from and the package they hold (a fork's entry differs here).
    dist: Distribution = VLLM_DISTRIBUTION
    project = "vllm"

    def parse(self, described: TargetDescription) -> TargetDescription:
        from .package import package_in
        from .releases import ReleaseError, parse_version

        described = super().parse(described)
        if described.form is Form.BUILT_IN:
            return described.with_changes(form=Form.INSTALLED)
        path = (described.path or Path()).expanduser()
        if described.form is Form.PATH and path.is_dir():
            try:  # a fork's tree names its own package (aphrodite/v1/core/block_pool.py)
                return described.with_changes(package=package_in(path, described.package))
            except ReleaseError as exc:
                if described.package is not None:
                    raise TargetUsageError(f"{described.text}: {exc}") from exc
        if described.form is Form.RELEASE and self.dist.is_vllm:
            try:
                parse_version(described.version or "")
            except ReleaseError as exc:
                raise TargetUsageError(f"{described.text}: {exc}") from exc
        return described

    def versions(self) -> tuple[str, ...]:
        """The releases already in the cache (nothing is downloaded)."""
        from ...targets.releases.files import cache_root, valid_cache
        from .releases import WHEEL_MEMBERS

        files = self.dist.files(members=WHEEL_MEMBERS)
        folder = cache_root() / files.folder
        found = [d.name for d in folder.glob("*") if valid_cache(d, files, d.name)]
        return tuple(sorted(found, key=_version_key))

    def support(self, version: str) -> ReleaseSupport:
        """Any release from 0.10.1 on loads in isolation and is judged by its version's
        profile; one newer than every profiled release is judged by the newest, which is
        what is missing."""
        from .profile_choice import beyond_table
        from .releases import ReleaseError, check_supported

        try:
            check_supported(version)
        except ReleaseError as exc:
            return ReleaseSupport(False, str(exc))
        if beyond_table(version):
            return ReleaseSupport(
                True,
                "no profile measured on it yet: kvpool profile derive "
                f"--target {self.release_form(version)} --out {self.name}-{version}.toml",
            )
        return ReleaseSupport(True)

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        release = load_vllm(described)
        name = shown_name(described, release.version)
        try:
            return release.target_factory(name), name
        except Exception as exc:  # the release's pool cannot even be built and probed
            raise TargetLoadError(
                f"{described.text}: vLLM {release.version}'s BlockPool ({release.origin}) "
                f"could not be built: {type(exc).__name__}: {exc}"
            ) from exc

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        from .manager_loading import load_vllm_manager

        try:
            return load_vllm_manager(described, distribution_of(described), package_of(described))
        except VllmLoadError as exc:
            raise TargetLoadError(str(exc)) from exc

    def load_driver(self, described: TargetDescription) -> tuple[EngineDriverFactory, str]:
        """Drivers of the installed release's v1 ``Scheduler`` (``--machine engine``)."""
        from .scheduler_driver import VllmSchedulerDriver
        from .scheduler_loading import installed_vllm

        if not self.dist.is_vllm or described.form not in (Form.INSTALLED, Form.RELEASE):
            raise TargetLoadError(
                f"{described.text}: the engine machine runs vLLM's scheduler from an "
                "installed vLLM only (--target vllm, or vllm==X.Y.Z naming the installed one)"
            )
        vllm = installed_vllm(described.version if described.form is Form.RELEASE else None)
        label = f"{described.text} (vLLM {vllm.version} Scheduler, installed)"

        def factory(setup: EngineSetup) -> VllmSchedulerDriver:
            return VllmSchedulerDriver(vllm, setup, label)

        return factory, label

    def profile(self, described: TargetDescription) -> ProfileChoice:
        package = package_of(described)
        if package != self.dist.package:
            fork = fork_entry(package)
            if fork is None:
                return ProfileChoice(
                    "seed",
                    f"{described.text} holds {package}/, a package no engine is registered "
                    "for: judged by the seed's contract (a guess; name a profile with "
                    "--profile)",
                )
            return fork.profile(described.with_changes(engine=fork.name))
        return self.profile_of(described)

    def profile_of(self, described: TargetDescription) -> ProfileChoice:
        """The profile of a target of this entry's own package: from its version (PEP 440:
        a pre-release of X.Y is judged by the newest profile below it), else, for a tree
        naming none, from its code (:mod:`.profile_choice`: the built-in profile agreeing
        with every knob measured on it)."""
        from .profile_choice import choose_profile
        from .releases import ReleaseError

        version = vllm_version(described)
        try:
            chosen = choose_profile(described.text, version, lambda: load_vllm(described))
        except (ReleaseError, ValueError) as exc:
            raise TargetLoadError(f"{described.text}: {exc}") from exc
        return ProfileChoice(chosen.profile, chosen.reason)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def entry_for(described: TargetDescription) -> VllmEntry:
    """The vLLM-like entry ``described`` names; a usage error for any other engine."""
    entry = engine(described.engine)
    if not isinstance(entry, VllmEntry):
        raise TargetUsageError(
            f"{described.text} names no vLLM: give vllm==X.Y.Z, vllm@PATH or vllm"
        )
    return entry


def package_of(described: TargetDescription) -> str:
    """The top-level package ``described``'s files live in."""
    return described.package or entry_for(described).dist.package


def distribution_of(described: TargetDescription) -> Distribution:
    """Where the releases of ``described``'s package come from: its entry's, or (for
    ``--package NAME``) the registered fork's, else a project named like the package."""
    entry = entry_for(described)
    package = package_of(described)
    if package == entry.dist.package:
        return entry.dist
    fork = fork_entry(package)
    return fork.dist if fork is not None else Distribution(project=package, package=package)


def fork_entry(package: str) -> VllmEntry | None:
    """The registered vLLM-like entry whose releases hold ``package``, if any."""
    from ...targets.registry import registered

    for name in registered():
        try:
            entry = engine(name)
        except TargetLoadError:
            continue
        if isinstance(entry, VllmEntry) and entry.dist.package == package:
            return entry
    return None


def vllm_version(described: TargetDescription) -> str | None:
    """The release ``described`` names, without loading it: ``"0.33.0"`` for
    ``vllm==0.33.0``, the installed distribution's version for ``vllm``, what PATH's files
    say for ``vllm@PATH`` (``None`` when they say nothing)."""
    from .distribution import wheel_version
    from .releases import ReleaseError, parse_version

    dist = distribution_of(described)
    try:
        if described.form is Form.RELEASE:
            version = described.version or ""
            if dist.is_vllm:
                parse_version(version)
            return version
        if described.form is Form.INSTALLED:
            return installed_version(dist)
        path = _path(described)
        if path.suffix == ".whl":
            return wheel_version(path, dist)
        found = version_in_tree(path, package_of(described))
        return None if found == "unknown" else found
    except ReleaseError as exc:
        raise TargetLoadError(str(exc)) from exc


def load_vllm(described: TargetDescription) -> VllmRelease:
    """Load the vLLM release (or fork) ``described`` names; :class:`TargetLoadError` says
    what went wrong and what to run instead."""
    from .distribution import cached_release, seed_cache
    from .isolation import IsolationError, load_release
    from .package import package_in
    from .releases import ReleaseError
    from .target import describe_release

    dist = distribution_of(described)
    try:
        if described.form is Form.INSTALLED:
            return _installed_vllm(dist)
        if described.form is Form.RELEASE:
            version = described.version or ""
            dist.check(version)
            root = cached_release(version, dist=dist)
            return describe_release(load_release(root, version, package=dist.package))
        path = _path(described)
        if not path.exists():
            raise TargetLoadError(f"{described.text}: {path} does not exist")
        if path.is_file():
            root = seed_cache(path, dist=dist)
            version, package = root.name, dist.package
        else:
            root = path
            package = package_in(root, described.package)
            version = version_in_tree(root, package)
            if version != "unknown" and package == VLLM:
                dist.check(version)
        return describe_release(load_release(root, version, package=package))
    except (ReleaseError, IsolationError, ValueError) as exc:
        raise TargetLoadError(f"{described.text}: {exc}") from exc


def _path(described: TargetDescription) -> Path:
    return (described.path or Path()).expanduser()


def _installed_vllm(dist: Distribution) -> VllmRelease:
    """The installed package's block-pool modules, imported normally (this imports vLLM or
    the fork), keyed by vLLM's names."""
    from .releases import MODULES
    from .target import describe

    version = installed_version(dist)
    modules = {}
    for role in MODULES:
        name = own_name(role, dist.package)
        try:
            modules[role] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # an optional module this release does not have
            raise TargetLoadError(f"importing the installed {name} failed: {exc}") from exc
        except Exception as exc:  # the package's own import failed (a missing dependency)
            raise TargetLoadError(
                f"importing the installed {name} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return describe(version, modules, "installed")


ENTRY = VllmEntry()
