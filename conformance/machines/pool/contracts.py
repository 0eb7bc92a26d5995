"""``--check-contracts``: the spec's own PEP 316 contracts, checked on every lockstep step.

Each transition of the spec (``kvpool.spec.step.TRANSITIONS``) states in its docstring what
it needs (``pre:`` lines) and what it promises (``post:`` lines, where ``__return__`` is
what it returns). CrossHair searches the small flat rules for counterexamples; the
transitions are too large for it, so in this debug mode every step a lockstep run takes
evaluates its transition's conditions on the real states of the run. A condition that
does not hold is a bug of the spec, not of the target: :class:`ContractBroken` names the
transition, the condition and the action (the run reports it, with its shrunk trace, as
it reports the spec breaking one of its invariants).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Any

from kvpool.spec import Action, Observation, PoolState
from kvpool.spec.step import TRANSITIONS, step

#: Whether the steps of this context check the contracts (set by :func:`checking_contracts`).
_CHECKING: ContextVar[bool] = ContextVar("kvpool_check_contracts", default=False)


@dataclass(frozen=True)
class Condition:
    """One ``pre:`` or ``post:`` line of a docstring, compiled."""

    kind: str  # "pre" or "post"
    text: str
    code: Any


#: How every message of a broken contract starts: the target is not to blame.
SPEC_BUG = "the spec broke its own contract (a bug of the spec, not of the target): "


class ContractBroken(AssertionError):
    """The spec broke its own contract: a spec bug, never a finding about the target."""


@cache
def conditions(function: Callable[..., Any]) -> tuple[Condition, ...]:
    """The ``pre:`` and ``post:`` lines of ``function``'s docstring, in order."""
    out = []
    for line in inspect.cleandoc(function.__doc__ or "").splitlines():
        kind, colon, text = line.strip().partition(":")
        if colon and kind in ("pre", "post") and text.strip():
            text = text.strip()
            out.append(Condition(kind, text, compile(text, f"<{kind}: {text}>", "eval")))
    return tuple(out)


def _where(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def _check(function: Callable[..., Any], kind: str, names: dict[str, Any], action: Action) -> None:
    for condition in conditions(function):
        if condition.kind != kind:
            continue
        try:
            # one namespace, so that comprehensions in a condition see the arguments
            holds = eval(condition.code, {**function.__globals__, **names})
        except Exception as exc:
            raise ContractBroken(
                f"{SPEC_BUG}{_where(function)}: {kind}: {condition.text} raised "
                f"{type(exc).__name__}: {exc} (action {action!r})"
            ) from exc
        if not holds:
            raise ContractBroken(
                f"{SPEC_BUG}{_where(function)}: {kind}: {condition.text} does not hold "
                f"(action {action!r})"
            )


def checked_step(state: PoolState, action: Action) -> tuple[PoolState, Observation]:
    """:func:`kvpool.spec.step` with the transition's ``pre:`` lines checked before it runs
    and its ``post:`` lines after (only for actions inside the contract, which the lockstep
    run has already established)."""
    _, transition = TRANSITIONS[type(action)]
    names = dict(zip(inspect.signature(transition).parameters, (state, action), strict=True))
    _check(transition, "pre", names, action)
    result = step(state, action)
    _check(transition, "post", {**names, "__return__": result}, action)
    return result


def spec_step(state: PoolState, action: Action) -> tuple[PoolState, Observation]:
    """The step a lockstep run takes: checked when :func:`checking_contracts` is on."""
    return checked_step(state, action) if _CHECKING.get() else step(state, action)


@contextmanager
def checking_contracts(on: bool = True) -> Iterator[None]:
    """Within this block, every lockstep step checks its transition's contract."""
    token = _CHECKING.set(on)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def contract_count() -> int:
    """How many conditions the transitions state (what a checked step evaluates at most)."""
    return sum(len(conditions(t)) for _, t in TRANSITIONS.values())
