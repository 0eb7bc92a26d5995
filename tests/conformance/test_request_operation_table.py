"""Each request operation's spec transition is named in one place: the spec's
``TRANSITIONS`` (its check and its program of pool calls), which the spec's own dispatch and
the request table (``manager/operations.py``) both read. A made-up request action added
there alone is checked and run by ``manager_step``."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import ClassVar

import pytest
from kvpool.conformance.machines.requests.operations import REQUEST_OPERATIONS
from kvpool.spec import ContractViolation, PoolConfig, initial_state
from kvpool.spec.actions import GetNewBlocks
from kvpool.spec.manager import (
    REQUEST_ACTIONS,
    ManagerConfig,
    ManagerResult,
    ManagerState,
    RequestAction,
    initial_manager_state,
    manager_step,
)
from kvpool.spec.manager import step as step_module
from kvpool.spec.manager.pool import PoolCall
from kvpool.spec.manager.step import TRANSITIONS, refused


def test_the_spec_names_each_request_actions_transition_once_and_the_table_points_at_it() -> None:
    assert list(TRANSITIONS) == list(REQUEST_ACTIONS)
    assert [op.action for op in REQUEST_OPERATIONS] == list(REQUEST_ACTIONS)
    assert all(op.rule is TRANSITIONS[op.action] for op in REQUEST_OPERATIONS)


@dataclass(frozen=True)
class Reserve(RequestAction):
    """A made-up request action: take ``count`` blocks off the free queue for nobody."""

    operation: ClassVar[str] = "reserve"
    count: int = 1


def reserve_violation(state: ManagerState, action: Reserve) -> ContractViolation | None:
    if action.count < 1:
        return refused(action, "request-tokens", f"count {action.count}")
    return None


def reserve_program(
    pool: PoolCall, state: ManagerState, action: Reserve
) -> tuple[ManagerState, ManagerResult]:
    pool(GetNewBlocks(action.count))
    return state, None


def test_a_made_up_request_action_is_checked_and_run_from_the_spec_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(TRANSITIONS, Reserve, (reserve_violation, reserve_program))
    config = PoolConfig(6)
    pool, manager = initial_state(config), initial_manager_state(ManagerConfig(2), config)
    after, _, result = manager_step(pool, manager, Reserve("", 2))
    assert result is None and len(after.free_queue) == len(pool.free_queue) - 2
    with pytest.raises(ContractViolation, match="count 0"):
        manager_step(pool, manager, Reserve("", 0))


def test_an_action_the_table_lacks_is_no_request_action() -> None:
    config = PoolConfig(6)
    pool, manager = initial_state(config), initial_manager_state(ManagerConfig(2), config)
    with pytest.raises(TypeError, match="not a request action"):
        manager_step(pool, manager, Reserve("", 2))


#: A dispatch of its own on a request action: a ``case`` of one.
DISPATCH = re.compile(r"case (" + "|".join(a.__name__ for a in REQUEST_ACTIONS) + r")\(")


def test_the_spec_step_dispatches_only_through_its_table() -> None:
    source = inspect.getsource(step_module)
    assert not DISPATCH.search(source)
    planted = source + "\n    match action:\n        case Admit(tokens=tokens):\n"
    assert DISPATCH.search(planted)
