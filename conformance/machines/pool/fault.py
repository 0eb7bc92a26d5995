"""Whose fault an exception raised during a run is: the target's, a mismatch between the
suite's calls and the target's surface, or kvpool's own (read from where it was raised).

It imports nothing from the adapters or the machines, so every one of them can ask it.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Literal

from kvpool.spec import Profile

from .refusal import RefusedByReturn

_CONFORMANCE = Path(__file__).resolve().parents[2]
#: The adapters: the engine plugins and the framework that loads them.
_ADAPTERS = (_CONFORMANCE / "engines", _CONFORMANCE / "targets")
_SPEC = Path(inspect.getfile(Profile)).resolve().parent

Fault = Literal["target", "mismatch", "suite"]


def fault_of(exc: BaseException) -> Fault:
    """Whose fault ``exc``, raised during a run, is:

    - ``mismatch``: an ``AttributeError`` or ``TypeError`` raised where an adapter calls the
      target (a method it lacks, arguments its signature refuses, a result of another
      shape), or the target reading a field the suite's own objects (a request) do not
      have: a usage error;
    - ``target``: raised inside the target's own code (its pool, its manager): a crash
      of the target, which the lockstep run judges;
    - ``suite``: raised anywhere else in kvpool's code (the engine, the spec): a bug in
      kvpool.

    An adapter's ``NotImplementedError`` is the target's: the adapter says the target
    cannot take that call (vllm-mlx's ``cache_full_blocks`` has no ``block_mask``); so is
    a :class:`~.refusal.RefusedByReturn`, the pool's own refusal read off its return value.
    """
    if isinstance(exc, RefusedByReturn):  # the pool's own answer, read by the adapter
        return "target"
    if isinstance(exc, AttributeError) and _is_suite_object(getattr(exc, "obj", None)):
        return "mismatch"
    where = _innermost_file(exc)
    if where is None or (not _inside(where, _CONFORMANCE) and not _inside(where, _SPEC)):
        return "target"
    if isinstance(exc, AttributeError | TypeError) and any(
        _inside(where, root) for root in _ADAPTERS
    ):
        return "mismatch"
    if isinstance(exc, NotImplementedError) and any(_inside(where, root) for root in _ADAPTERS):
        return "target"
    return "suite"


def _is_suite_object(obj: object) -> bool:
    return obj is not None and type(obj).__module__.startswith("kvpool.conformance.")


def _innermost_file(exc: BaseException) -> Path | None:
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).resolve()


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
