"""What the docs say about each pool operation and each request action, gathered from the
spec: its class, its check and transition, and the facts their code states."""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass

from kvpool.spec.actions import ALL_ACTIONS, Action
from kvpool.spec.manager.actions import REQUEST_ACTIONS, RequestAction
from kvpool.spec.profile import PROFILES
from kvpool.spec.rules import RULES

# ``kvpool.spec.step`` is also the name of a function the package exports: import the module
step_module = importlib.import_module("kvpool.spec.step")
manager_step_module = importlib.import_module("kvpool.spec.manager.step")

from .code_facts import (  # noqa: E402
    EVENT_CLASSES,
    code_of,
    constructed,
    flat_functions,
    match_case,
    profile_fields_read,
    reach,
    rule_ids,
)


def _in_rule_order(found: set[str]) -> tuple[str, ...]:
    return tuple(r for r in RULES if r in found)


@dataclass(frozen=True)
class PoolActionFacts:
    """One pool operation as the spec defines it."""

    action: type[Action]
    #: The caller's contract (``None`` when the action is allowed).
    check: types.FunctionType
    #: The transition: ``(state, action) -> (state, observation)``.
    transition: types.FunctionType
    #: Rule ids a refusal of this action may name, in :data:`RULES` order (with
    #: ``unsupported-action`` when some profile lacks the operation).
    rules: tuple[str, ...]
    #: Event classes the transition may publish.
    events: tuple[type, ...]
    #: Profile fields that change what the action accepts or does.
    profile_fields: tuple[str, ...]
    #: The flat rules of :mod:`kvpool.spec.flat` the action is built from.
    flat_functions: tuple[types.FunctionType, ...]
    #: Profiles whose pool offers the operation, in :data:`PROFILES` order.
    offered_by: tuple[str, ...]

    @property
    def operation(self) -> str:
        return self.action.operation


def pool_action_facts(action: type[Action]) -> PoolActionFacts:
    """The facts of one pool operation, read off ``step.TRANSITIONS`` and the code."""
    check, transition = step_module.TRANSITIONS[action]
    assert isinstance(check, types.FunctionType) and isinstance(transition, types.FunctionType)
    checking = reach(code_of(check))
    doing = reach(code_of(transition))
    offered_by = tuple(name for name, p in PROFILES.items() if p.offers(action.operation))
    rules = rule_ids(checking)
    if len(offered_by) < len(PROFILES):
        # step.violation refuses an operation the profile lacks, before any check runs
        rules |= rule_ids(reach(code_of(step_module.violation)))
    return PoolActionFacts(
        action=action,
        check=check,
        transition=transition,
        rules=_in_rule_order(rules),
        events=constructed(doing, EVENT_CLASSES),
        profile_fields=profile_fields_read([*checking, *doing]),
        flat_functions=flat_functions([*checking, *doing]),
        offered_by=offered_by,
    )


def all_pool_action_facts() -> list[PoolActionFacts]:
    """Every pool operation, in :data:`ALL_ACTIONS` order."""
    return [pool_action_facts(a) for a in ALL_ACTIONS]


@dataclass(frozen=True)
class RequestActionFacts:
    """One request action as the spec's KV cache manager defines it."""

    action: type[RequestAction]
    rules: tuple[str, ...]
    #: The pool operations the manager may call to carry it out.
    pool_calls: tuple[type[Action], ...]

    @property
    def operation(self) -> str:
        return self.action.operation


def request_action_facts(action: type[RequestAction]) -> RequestActionFacts:
    """The facts of one request action: its arm of ``request_violation`` (the rules) and
    of ``apply_request`` (the pool calls, through every function it reaches)."""
    try:
        checking = [match_case(manager_step_module.request_violation, action)]
    except KeyError:  # an action with no precondition has no arm in the check
        checking = []
    doing = reach(match_case(manager_step_module.apply_request, action))
    calls = constructed(doing, ALL_ACTIONS)
    return RequestActionFacts(
        action=action,
        rules=_in_rule_order(rule_ids(checking)),
        pool_calls=tuple(c for c in ALL_ACTIONS if c in calls),
    )


def all_request_action_facts() -> list[RequestActionFacts]:
    """Every request action, in :data:`REQUEST_ACTIONS` order."""
    return [request_action_facts(a) for a in REQUEST_ACTIONS]
