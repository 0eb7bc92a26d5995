"""From a target description to factories: the pool ``--target`` names, the manager
``--manager`` names, and the profile that judges them.

Every function takes a :class:`~.description.TargetDescription` (the command line parses
once, :func:`~.registry.describe_target`) or text, which it reads with the same parser.
What each engine loads is its registry entry's business (:mod:`.registry`).
"""

from __future__ import annotations

from ..hooks import manager_factory_problems
from ..machines.pool.target import TargetFactory
from ..machines.requests.target import ManagerTargetFactory
from .description import Form, TargetDescription
from .errors import TargetLoadError, TargetUsageError
from .factory_entry import FACTORY
from .registry import EngineEntry, ProfileChoice, describe_target, engine

__all__ = [
    "TargetLoadError",
    "TargetUsageError",
    "choose_profile",
    "described",
    "entry_of",
    "load_manager",
    "load_target",
]

#: What ``--manager`` takes besides the target forms.
MANAGER_WORDS = {
    "auto": "the target's own manager, if its engine ships one the suite drives",
    "none": "no manager run",
}


def entry_of(target: TargetDescription) -> EngineEntry:
    """The entry that loads ``target`` (the factory form's own for ``module:factory``, the
    wire protocol's for ``exec:``)."""
    if target.form is Form.EXEC:
        from ..wire.entry import EXEC

        return EXEC
    return FACTORY if target.form is Form.FACTORY else engine(target.engine)


def described(target: TargetDescription | str) -> TargetDescription:
    """``target`` as a description (text is read by the one parser)."""
    return target if isinstance(target, TargetDescription) else describe_target(target)


def load_target(target: TargetDescription | str) -> tuple[TargetFactory, str]:
    """The pool factory and display name of ``--target``."""
    target = described(target)
    return entry_of(target).load_pool(target)


def choose_profile(target: TargetDescription | str) -> ProfileChoice:
    """The profile ``target`` is checked against unless ``--profile`` says otherwise, and
    why (the measured profile of a vLLM release, an engine's own, or the seed's)."""
    target = described(target)
    return entry_of(target).profile(target)


def load_manager(
    value: TargetDescription | str, target: TargetDescription | str
) -> tuple[ManagerTargetFactory | None, str]:
    """As :func:`_load_manager`, the factory checked against the hooks a manager factory
    (and a class that is its own factory, a manager target) may declare: a misspelt hook or
    one of another signature is a usage error naming it."""
    factory, name = _load_manager(value, target)
    problems = manager_factory_problems(factory) if factory is not None else []
    if problems:
        raise TargetUsageError(f"manager {name!r}: " + "; ".join(problems))
    return factory, name


def _load_manager(
    value: TargetDescription | str, target: TargetDescription | str
) -> tuple[ManagerTargetFactory | None, str]:
    """The manager factory for ``--manager`` and its display name: ``auto`` (the target's
    own manager, if its engine ships one), ``none``, an engine's name (``vllm``,
    ``lmdeploy``: the manager of the ``--target`` when it is of that engine), any engine
    form (``lmdeploy==X.Y.Z``, ``sglang@PATH,page=2``, ...), or ``module:factory`` called
    as ``factory(setup, profile)`` and returning a manager target."""
    target = described(target)
    if value == "none":
        return None, "none"
    if value == "auto":
        return entry_of(target).manager_on_auto(target)
    try:
        manager = described(value)
    except TargetUsageError as exc:
        known = ", ".join([*MANAGER_WORDS, "an engine's name or form", "module:factory"])
        raise TargetUsageError(f"{exc}\n--manager takes {known}") from exc
    entry = entry_of(manager)
    same_engine = manager.engine == target.engine and manager.form is not Form.FACTORY
    if same_engine and manager.text == manager.engine:
        manager = target  # the manager of the release --target names
    elif entry.manager_follows_target:
        shown = entry.display_name()
        raise TargetLoadError(
            f"--manager {manager.text} drives the KV cache manager of a {shown} release: "
            f"give a {shown} target ({entry.forms_line()}), not {target.text!r}"
        )
    return entry.load_manager(manager)
