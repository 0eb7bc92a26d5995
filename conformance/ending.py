"""Whose an exception is, and how a Ctrl-C is told from a target's own
``KeyboardInterrupt``: what :mod:`.exits`' policy needs to pick the status of an exception
that escaped a command.

An exception belongs to the target when the innermost frame of its traceback that is
neither the standard library's nor a library kvpool runs on (click, rich, Hypothesis) lies
outside kvpool's own code (``conformance/`` and ``spec/``; ``impl/`` is a target like any
other). A ``KeyboardInterrupt`` raised while a SIGINT handler of :func:`watching_interrupts`
is in place is the user's, wherever it landed.
"""

from __future__ import annotations

import signal
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import FrameType, TracebackType

_CONFORMANCE = Path(__file__).resolve().parent
_SPEC = _CONFORMANCE.parent / "spec"


def _library_roots() -> tuple[Path, ...]:
    """Folders whose frames are passed over: they run code, they own none of it."""
    roots = []
    for name in ("stdlib", "platstdlib"):
        roots.append(Path(sysconfig.get_paths()[name]).resolve())
    for module in ("click", "rich", "hypothesis"):
        found = sys.modules.get(module)
        where = getattr(found, "__file__", None)
        if where:
            roots.append(Path(where).resolve().parent)
    return tuple(roots)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _is_library(path: Path, roots: tuple[Path, ...]) -> bool:
    if "site-packages" in path.parts and not any(
        _inside(path, r) for r in roots if "site-packages" in r.parts
    ):
        return False  # an engine installed from the package index is a target's code
    return any(_inside(path, root) for root in roots)


def _frames(tb: TracebackType | None) -> list[Path]:
    files = []
    while tb is not None:
        files.append(Path(tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    return files


def raised_by_target(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the target's code (not kvpool's, see the module's
    docstring); ``False`` when its traceback shows no code but libraries'."""
    roots = _library_roots()
    for file in reversed(_frames(exc.__traceback__)):
        if str(file) == "<string>" or str(file).startswith("<frozen "):
            continue  # generated (a dataclass's __init__) or the import system: pass over
        if str(file).startswith("<"):
            return True  # compiled from a text a target brought (a mutant of impl/)
        path = file.resolve()
        if _is_library(path, roots):
            continue
        return not (_inside(path, _CONFORMANCE) or _inside(path, _SPEC))
    return False


@cache
def _kvpool_file(filename: str) -> bool:
    path = Path(filename).resolve()
    return _inside(path, _CONFORMANCE) or _inside(path, _SPEC)


def innermost_in_kvpool(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is kvpool's own code (cheap: a
    refusal is judged on every out-of-contract step, and most are the target's)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return _kvpool_file(tb.tb_frame.f_code.co_filename)


_interrupted = False


def interrupted_by_user() -> bool:
    """Whether the user pressed Ctrl-C (SIGINT arrived) under :func:`watching_interrupts`."""
    return _interrupted


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


@contextmanager
def watching_interrupts() -> Iterator[None]:
    """Note every SIGINT, so that a ``KeyboardInterrupt`` a target raises itself (a finding)
    is told from the user's Ctrl-C (status 130). Outside the main thread: a no-op."""
    global _interrupted
    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread: signals cannot be watched here
        yield
        return
    _interrupted = False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
