"""The engine registry: one :class:`EngineEntry` per engine name, found through the
``kvpool.engines`` entry-point group.

kvpool's own engines (``impl``, ``spec``, ``vllm``, ``aphrodite``, ``vllm-mlx``,
``lmdeploy``, ``nanovllm``, ``nanovllm-fork``, ``sglang``) register in kvpool-spec's own
``pyproject.toml`` exactly as a third-party package registers its adapter in its own::

    [project.entry-points."kvpool.engines"]
    mypool = "mypool_kvpool.entry:ENGINE"    # an EngineEntry (or an object with its methods)

Reading the group imports nothing; an entry's module is imported only when the command
line names that engine (or ``kvpool targets`` lists it). A trace or a findings file never
picks an engine: only the command line does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from types import MappingProxyType
from typing import Any

from ..machines.pool.target import TargetFactory
from ..machines.requests.target import ManagerTargetFactory
from .description import Form, TargetDescription, read_target_text
from .errors import TargetLoadError, TargetUsageError

#: The entry-point group engines register in.
GROUP = "kvpool.engines"


@dataclasses.dataclass(frozen=True)
class ProfileChoice:
    """The profile a target is checked with unless ``--profile`` says otherwise, and why
    (printed in the run's header, so a guess never passes for a measurement)."""

    name: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ReleaseSupport:
    """Whether the suite can check a release of an engine, judged from its number alone
    (nothing is downloaded): ``True``, ``False``, or ``None`` when only a run can tell;
    ``missing`` says what is missing (empty when nothing is)."""

    supported: bool | None
    missing: str = ""


class EngineEntry:
    """One engine's way in: how its ``--target``/``--manager`` forms read, which versions
    it knows, how to load its pool and its manager, which profile judges it, and the
    optional install it needs. Subclass it (every method has a default) and register an
    instance under :data:`GROUP`.
    """

    #: The ``NAME`` of its forms (the entry point's name).
    name: str = ""
    #: One line for ``kvpool targets``.
    summary: str = ""
    #: How messages name the engine (``"vLLM"``); its name when empty.
    label: str = ""
    #: Its forms (``NAME==X.Y.Z``, ...) and what each one loads, for ``kvpool targets``.
    forms: Mapping[str, str] = MappingProxyType({})
    #: The pip extra of kvpool-spec it needs (``"lmdeploy"``), if any.
    extra: str | None = None
    #: Whether it has a pool API (``False``: a manager only, checked by the request machine).
    has_pool: bool = True
    #: Whether ``--manager auto`` runs its own KV cache manager beside its pool.
    auto_manager: bool = False
    #: What its manager is, for ``kvpool targets`` (empty: it lists none).
    manager_summary: str = ""
    #: Whether its manager comes only with its pool: ``--manager NAME`` then means "the
    #: manager of the ``--target``", which must be of this engine.
    manager_follows_target: bool = False
    #: The forms it accepts.
    accepted: frozenset[Form] = frozenset({Form.BUILT_IN})
    #: Its project on the package index (``kvpool targets --latest`` asks for its newest
    #: release), if its releases come from there.
    project: str | None = None

    def parse(self, described: TargetDescription) -> TargetDescription:
        """Check ``described`` (its form, its options) and fill in what the bare name
        means; :class:`~.errors.TargetUsageError` for anything this engine does not take."""
        if described.form not in self.accepted:
            raise TargetUsageError(
                f"{described.text!r}: {self.name} takes {self.forms_line()}, "
                f"not the {described.form.value} form"
            )
        if described.options:
            raise TargetUsageError(
                f"{described.text!r}: {self.name} takes no options after a comma"
            )
        return described

    def versions(self) -> tuple[str, ...]:
        """The releases it knows (``kvpool targets`` describes these)."""
        return ()

    def support(self, version: str) -> ReleaseSupport:
        """Whether release ``version`` can be checked (``kvpool targets --latest``): by
        default, the releases :meth:`versions` names are, any other only a run can tell."""
        if version in self.versions():
            return ReleaseSupport(True)
        known = ", ".join(self.versions()) or "none"
        return ReleaseSupport(
            None,
            f"not checked with this release (checked: {known}); "
            f"kvpool conform --target {self.release_form(version)} tells",
        )

    def release_form(self, version: str) -> str:
        """The ``--target`` text of release ``version`` (its name for an engine that takes
        no version: it checks the one release it knows)."""
        if Form.RELEASE in self.accepted:
            return f"{self.name}=={version}"
        return self.name

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        """The pool factory ``(config, profile) -> Target`` and the name it is shown by."""
        raise TargetLoadError(
            f"{described.text} is a KV cache manager with no pool API of its own: check it "
            f"with --machine requests (its manager run), or --manager {described.text} "
            "beside a pool"
        )

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        """The manager factory ``(setup, profile) -> ManagerTarget`` and its name, or
        ``(None, why)`` when this form has no manager to drive."""
        raise TargetLoadError(f"{described.text} ships no KV cache manager the suite drives")

    def manager_on_auto(
        self, described: TargetDescription
    ) -> tuple[ManagerTargetFactory | None, str]:
        """What ``--manager auto`` runs beside the pool ``described`` names: its own
        manager when :attr:`auto_manager` says it ships one, else none."""
        if not self.auto_manager:
            return None, "none"
        return self.load_manager(described)

    def profile(self, described: TargetDescription) -> ProfileChoice:
        """The profile that judges ``described`` by default, with the reason."""
        return ProfileChoice("seed", "the seed's contract (the default profile)")

    def display_name(self) -> str:
        """How messages name the engine: :attr:`label`, else :attr:`name`."""
        return self.label or self.name

    def forms_line(self) -> str:
        return ", ".join(self.forms) or self.name


def registered() -> dict[str, metadata.EntryPoint]:
    """Every engine name registered under :data:`GROUP`, unloaded."""
    return {point.name: point for point in metadata.entry_points(group=GROUP)}


@cache
def engine(name: str) -> EngineEntry:
    """The entry registered as ``name`` (its module imported now, not before)."""
    points = registered()
    if not points:
        raise TargetLoadError(
            f"no engine is registered under the entry-point group {GROUP!r}: kvpool-spec's "
            "own registrations are missing, so reinstall it (pip install -e .)"
        )
    point = points.get(name)
    if point is None:
        raise TargetUsageError(
            f"unknown target {name!r}: the engines are {', '.join(sorted(points))}; "
            "each takes NAME, NAME==VERSION or NAME@PATH as kvpool targets lists, or "
            "write module:factory for your own pool"
        )
    try:
        loaded: Any = point.load()
        entry: Any = loaded() if isinstance(loaded, type) else loaded
    except Exception as exc:  # a third party's adapter fails to import: say whose
        raise TargetLoadError(
            f"the engine {name!r} ({point.value}) could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    missing = entry_problems(entry)
    if missing:
        raise MalformedEngineEntry(
            f"the engine entry {name!r} ({point.value}) is malformed: it lacks "
            f"{', '.join(missing)} of EngineEntry (subclass kvpool's EngineEntry, where "
            "every method has a default)"
        )
    checked: EngineEntry = entry
    return checked


class MalformedEngineEntry(TargetLoadError):
    """A registered engine entry that does not offer what :class:`EngineEntry` declares:
    that engine is refused (a usage error naming it); the others still load."""


def entry_problems(entry: object) -> list[str]:
    """What ``entry`` lacks of :class:`EngineEntry`'s declared methods and fields (a method
    that is not callable counts as missing)."""
    missing = []
    for attribute, declared in vars(EngineEntry).items():
        if attribute.startswith("_"):
            continue
        if not hasattr(entry, attribute):
            missing.append(f"{attribute}()" if callable(declared) else attribute)
        elif callable(declared) and not callable(getattr(entry, attribute)):
            missing.append(f"{attribute}()")
    return missing


def describe_target(text: str, package: str | None = None) -> TargetDescription:
    """The one reading of ``--target``/``--manager`` text: split by the grammar, then
    checked (and completed) by the engine it names. ``package`` is ``--package``."""
    described = read_target_text(text)
    if package is not None:
        described = described.with_changes(package=package)
    if described.form in (Form.FACTORY, Form.EXEC):
        if package is not None:
            raise TargetUsageError("--package names a fork's package: give a vLLM-like target")
        return described
    return engine(described.engine).parse(described)
