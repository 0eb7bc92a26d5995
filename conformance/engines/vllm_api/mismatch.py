"""What the adapter says when a release no longer takes its calls: which release, which
place of the adapter, and what changed.

A release the suite has not met may have moved what the adapter uses: a block attribute
renamed, a method's arguments changed, a result of another shape. Such an error, raised at
the adapter's own call (:func:`~...engine.fault.fault_of` says ``mismatch``), stops the
run with a usage error (exit 2), never a finding; this module gives it a message that names
the release, the adapter's line and function, and the error itself.
"""

from __future__ import annotations

from pathlib import Path

from ...machines.pool.fault import fault_of

#: The folder of the suite's adapters (a frame there is the adapter's place).
ADAPTERS = Path(__file__).resolve().parents[1]


def described(exc: BaseException, target: str) -> BaseException | None:
    """``exc`` said again naming ``target`` (the release) and the adapter's place, when it
    is an ``AttributeError`` or ``TypeError`` of the adapter's call; ``None`` otherwise."""
    if type(exc) not in (AttributeError, TypeError) or fault_of(exc) != "mismatch":
        return None
    place = adapter_place(exc)
    message = (
        f"{target} no longer takes the adapter's call at {place}: {exc} (the release changed "
        "what the adapter reads or passes there; a loading error, not a finding)"
    )
    return type(exc)(message)


def adapter_place(exc: BaseException) -> str:
    """The innermost frame of ``exc``'s traceback in the adapters: file, line, function."""
    tb = exc.__traceback__
    place = "the adapter"
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename).resolve()
        if ADAPTERS in path.parents:
            inside = path.relative_to(ADAPTERS.parent)
            place = f"{inside} line {tb.tb_lineno} ({tb.tb_frame.f_code.co_name})"
        tb = tb.tb_next
    return place
