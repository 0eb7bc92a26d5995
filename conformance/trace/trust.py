"""What a trace file may name on its own: a trace is data, never code.

A trace's ``#meta`` names the pool it ran on (``target``), its manager, its profile and,
for a diff trace, pool B (``versus``). Replaying it means loading those, and loading anything but a
built-in means importing a module, loading Python files from a path or downloading a
wheel. A file pasted into an issue or downloaded from one must not make ``kvpool`` do
that, so a name taken from a file is used only when it is built into kvpool (``impl``,
``spec``, and the managers ``auto``, ``none``, ``impl``); anything else the user names on
the command line, and :class:`NamedInFile` says exactly which command to run. A profile is
taken from the file only when it is built in: a field of a file is never read as a path,
so a profile file of the user's own is named with ``--profile FILE`` (and the error does
not repeat what the trace holds there).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from kvpool.spec import PROFILES, Profile, built_in_profile, get_profile

from .files import TraceFileError
from .model import TraceMeta
from .show import printable

#: Targets a trace file may name on its own: pools whose code ships inside kvpool and
#: imports nothing else (``vllm-mlx`` and ``vllm`` load an installed package; not these).
FILE_TARGETS = frozenset({"impl", "spec"})
#: Managers a trace file may name on its own (``auto`` loads the target's own manager only
#: when that target is built in).
FILE_MANAGERS = frozenset({"auto", "none", "impl"})


@dataclass(frozen=True)
class Chosen:
    """The names a replay loads: each from the command line, or from the file if built in.
    ``manager`` is set only for a trace of the request machine on a manager, ``versus``
    only for a diff trace."""

    target: str
    manager: str | None = None
    versus: str | None = None
    #: The profile the trace is judged by: built in, or the command line's own file.
    profile: Profile | None = None


class NamedInFile(TraceFileError):
    """A trace names code that kvpool loads only when the user names it on the command
    line; ``options`` are the command-line options that would name it."""

    def __init__(self, meta: TraceMeta, options: tuple[tuple[str, str], ...]) -> None:
        self.options = options
        named = ", ".join(
            what if value == "FILE" else f"{what} {printable(value)!r}"
            for what, value in _what(meta, options)
        )
        super().__init__(
            f"the trace names {named}, which kvpool loads only when you name it yourself "
            "(a trace file is data: it never makes kvpool import, load or download code)"
        )

    def command(self, path: str) -> str:
        """The command to run, e.g. ``kvpool replay FILE --target vllm==0.33.0``."""
        return _replay(path, self.options, shown=True)


def _what(meta: TraceMeta, options: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    label = {
        "--target": "pool" if meta.versus is None else "pool A",
        "--manager": "manager",
        "--consumer": "consumer",
        "--profile": "a profile that is not built in",
    }
    return [(label.get(option, "pool B"), _shown(option, value)) for option, value in options]


def _shown(option: str, value: str) -> str:
    """What an error shows of ``value``: a profile's name in a file is not repeated (it
    reads as a path, which kvpool never follows)."""
    return "FILE" if option == "--profile" else value


def _replay(path: str, options: tuple[tuple[str, str], ...], shown: bool = False) -> str:
    """``kvpool replay PATH --target T ...``: each word quoted for the shell, control
    characters shown as ``?`` (``shown``: as an error shows them)."""
    named = [(o, _shown(o, v) if shown else v) for o, v in options]
    words = [shlex.quote(path), *(shlex.quote(w) for option in named for w in option)]
    return printable(" ".join(["kvpool", "replay", *words]))


def needed_options(meta: TraceMeta) -> tuple[tuple[str, str], ...]:
    """The options a replay of a trace with ``meta`` needs on the command line, in order:
    every name in it that is not built in (none when it names only built-ins)."""
    options = []
    if meta.target not in FILE_TARGETS:
        options.append(("--target", meta.target))
    if _uses_manager(meta) and (meta.manager or "auto") not in FILE_MANAGERS:
        options.append(("--manager", meta.manager or "auto"))
    if meta.versus is not None and meta.versus not in FILE_TARGETS:
        options.append(("--versus", meta.versus))
    if meta.consumer is not None and not _built_in_consumer(meta.consumer):
        options.append(("--consumer", meta.consumer))  # a router plugin
    if meta.profile not in PROFILES:
        options.append(("--profile", meta.profile))  # the user's own profile file
    return tuple(options)


def _built_in_consumer(name: str) -> bool:
    from ..consumers.naming import BUILT_IN

    return name in BUILT_IN


def _consumer_given(name: str | None) -> str | None:
    """The trace's plugin consumer, when the command line has named (and loaded) it."""
    from ..consumers.naming import is_registered

    return name if name is not None and is_registered(name) else None


def _uses_manager(meta: TraceMeta) -> bool:
    return meta.machine == "requests" and meta.level == "manager"


def choose(
    meta: TraceMeta,
    target: str | None = None,
    manager: str | None = None,
    versus: str | None = None,
    profile: str | None = None,
) -> Chosen:
    """What to load for a replay of a trace with ``meta``: the command line's ``target``,
    ``manager``, ``versus`` and ``profile`` (a built-in name or the user's file) where
    given, else the file's names if they are built in.
    Raises :class:`NamedInFile` listing every option still needed."""
    given = {
        "--target": target,
        "--manager": manager,
        "--versus": versus,
        "--consumer": _consumer_given(meta.consumer),
        "--profile": profile,
    }
    missing = tuple((o, v) for o, v in needed_options(meta) if given[o] is None)
    if missing:
        raise NamedInFile(meta, missing)
    if meta.versus is not None:  # a diff trace loads both sides by their profiles' names
        built_in_profile(meta.profile)
        built_in_profile(meta.versus_profile or meta.profile)
    return Chosen(
        target or meta.target,
        (manager or meta.manager or "auto") if _uses_manager(meta) else None,
        (versus or meta.versus) if meta.versus is not None else None,
        get_profile(profile) if profile is not None else built_in_profile(meta.profile),
    )


def replay_command(path: str, meta: TraceMeta) -> str:
    """The ``kvpool replay`` command that replays the trace at ``path`` as it was written:
    with the options naming whatever in it is not built in, so it works when copied."""
    return _replay(path, needed_options(meta))
