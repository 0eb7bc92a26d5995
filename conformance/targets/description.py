"""What ``--target`` (or ``--manager``) names, read once: a frozen :class:`TargetDescription`.

The grammar, the same for every engine::

    NAME                 a built-in target, an installed package, or an engine's default release
    NAME==VERSION        a release, downloaded once into the cache
    NAME@PATH            a source tree, an unpacked wheel or a wheel file
    ...,KEY=VALUE        options after a comma (SGLang's ``page=N``, a fork's ``package=NAME``)
    module:factory       anyone's pool (or manager), imported from ``module``
    exec:CMD ARGS...     a program in any language, spoken to over the wire protocol
                         (``exec,timeout=SECONDS:CMD ...``: its reply timeout)

:func:`read_target_text` splits the text; which ``NAME`` exists, which options it takes and
what the bare name means is the engine's to say (its registry entry's ``parse``). Nothing
here touches the disk or imports anything.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import shlex
from pathlib import Path

from .errors import TargetUsageError


class Form(enum.Enum):
    """How a target names its code."""

    #: kvpool's own (``impl``, ``spec``) or a name an engine resolves itself (``nanovllm``).
    BUILT_IN = "built-in"
    #: The engine's package installed in this environment (``vllm``).
    INSTALLED = "installed"
    #: A release by number (``vllm==0.33.0``, or an engine's default one).
    RELEASE = "==version"
    #: Files at a path (``vllm@PATH``).
    PATH = "@path"
    #: Anyone's factory (``mypkg.pool:make_pool``).
    FACTORY = "module:factory"
    #: A program started as a child process, spoken to over the wire protocol
    #: (``exec:./mypool --flag``).
    EXEC = "exec:command"


@dataclasses.dataclass(frozen=True)
class TargetDescription:
    """One target as the command line named it.

    ``text`` is what was typed (traces and "reproduce with" lines quote it); the other
    fields are what it says. ``engine`` is the registry name (``""`` for a factory).
    """

    text: str
    engine: str
    form: Form
    version: str | None = None
    path: Path | None = None
    #: ``module:attr`` of a factory form.
    factory: str | None = None
    #: ``KEY=VALUE`` options after the comma, in order.
    options: tuple[tuple[str, str], ...] = ()
    #: The top-level package a fork's files live in (``aphrodite``), when named or found.
    package: str | None = None
    #: The program and its arguments of an ``exec:`` form (split as a shell would).
    command: tuple[str, ...] = ()

    def option(self, key: str) -> str | None:
        """The value of option ``key``, or ``None`` if it was not given."""
        return next((value for name, value in self.options if name == key), None)

    def with_changes(self, **changes: object) -> TargetDescription:
        """A copy with ``changes`` (engines normalize a parsed description with it)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


#: An engine name: letters, digits, ``_``, ``-`` and ``.``; starting with a letter.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
#: One trailing ``,KEY=VALUE`` option (a path may hold commas: only these are options).
_OPTION = re.compile(r",([^,=/\\]*)(?:=([^,/\\]*))?$")


def read_target_text(text: str) -> TargetDescription:
    """Split ``text`` into a description (the engine not yet checked).

    Raises :class:`~.errors.TargetUsageError` for text that fits no form.
    """
    if not text:
        raise TargetUsageError(f"{text!r} names no target: {FORMS_LINE}")
    if text.startswith((f"{EXEC}:", f"{EXEC},")):
        return _exec(text)
    body, options = _split_options(text)
    head = re.match(r"[^=@:]*", body)
    name = head.group(0) if head else ""
    rest = body[len(name) :]
    if rest.startswith(":") or (":" in rest and not rest.startswith(("==", "@"))):
        return _factory(text)
    if not _NAME.fullmatch(name):
        raise TargetUsageError(f"{text!r} names no target: {FORMS_LINE}")
    if rest == "":
        return TargetDescription(text, name, Form.BUILT_IN, options=options)
    if rest.startswith("=="):
        version = rest[2:]
        if not version:
            raise TargetUsageError(f"{text!r}: write a release as {name}==X.Y.Z")
        return TargetDescription(text, name, Form.RELEASE, version=version, options=options)
    if rest.startswith("@") and len(rest) > 1:
        return TargetDescription(text, name, Form.PATH, path=Path(rest[1:]), options=options)
    raise TargetUsageError(f"{text!r} names no target: {FORMS_LINE}")


def _split_options(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    options: list[tuple[str, str]] = []
    body = text
    while (found := _OPTION.search(body)) is not None:
        options.insert(0, (found.group(1), found.group(2) or ""))
        body = body[: found.start()]
    return body, tuple(options)


def _factory(text: str) -> TargetDescription:
    module, _, attr = text.partition(":")
    dotted = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
    if not dotted.fullmatch(module) or not dotted.fullmatch(attr):
        raise TargetUsageError(
            f"{text!r}: write your own factory as module:attribute (e.g. mypkg.pool:make_pool)"
        )
    return TargetDescription(text, "", Form.FACTORY, factory=text)


#: The name of the program form: ``exec:CMD ARGS...``.
EXEC = "exec"


def _exec(text: str) -> TargetDescription:
    """``exec[,KEY=VALUE...]:CMD ARGS...``: the program, split as a shell would (nothing is
    run here), with the options before the colon."""
    head, _, line = text.partition(":")
    options: list[tuple[str, str]] = []
    for option in head.split(",")[1:]:
        key, equals, value = option.partition("=")
        if not key or not equals:
            raise TargetUsageError(f"{text!r}: write an exec option as KEY=VALUE before the colon")
        options.append((key, value))
    try:
        command = tuple(shlex.split(line))
    except ValueError as exc:
        raise TargetUsageError(f"{text!r}: the command cannot be split: {exc}") from None
    if not command:
        raise TargetUsageError(f"{text!r}: name the program to run, as exec:CMD ARGS...")
    return TargetDescription(text, EXEC, Form.EXEC, options=tuple(options), command=command)


#: The forms, in one line, for usage errors.
FORMS_LINE = (
    "write NAME (a built-in target or installed engine), NAME==VERSION, NAME@PATH, "
    "NAME...,KEY=VALUE, module:factory or exec:CMD ARGS... (kvpool targets lists the names)"
)
