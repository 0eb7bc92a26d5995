"""``kvpool conform --check-contracts``: every transition's ``pre:``/``post:`` lines are
evaluated on the real states of a lockstep run, and a planted wrong postcondition is
reported as a bug of the spec, naming the transition and the condition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.contracts import (
    SPEC_BUG,
    ContractBroken,
    checked_step,
    conditions,
    contract_count,
)
from kvpool.spec import FreeBlocks, GetNewBlocks, PoolConfig, allocation, get_profile, initial_state
from kvpool.spec.step import TRANSITIONS

RUN = ["conform", "--machine", "pool", "--level", "safety", "-n", "15", "--seed", "3"]


def test_every_state_changing_transition_states_a_postcondition() -> None:
    for action_type, (_, transition) in TRANSITIONS.items():
        kinds = {c.kind for c in conditions(transition)}
        assert "post" in kinds, f"{transition.__qualname__} ({action_type.__name__}) has no post:"
    assert contract_count() >= 40


def test_a_checked_step_returns_what_step_returns() -> None:
    state = initial_state(PoolConfig(4), get_profile("seed"))
    state, seen = checked_step(state, GetNewBlocks(2))
    assert seen.result == (1, 2)
    state, _ = checked_step(state, FreeBlocks((2, 1)))
    assert state.free_queue[-2:] == (2, 1) or state.free_queue[:2] == (2, 1)


def wrong_free_blocks(state: Any, action: Any) -> Any:
    """The real transition under a postcondition that is false whenever a block is freed.

    post: len(__return__[0].free_queue) == len(state.free_queue)
    """
    return allocation.free_blocks(state, action)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    check, _ = TRANSITIONS[FreeBlocks]
    monkeypatch.setitem(TRANSITIONS, FreeBlocks, (check, wrong_free_blocks))


@pytest.mark.usefixtures("planted")
def test_a_planted_wrong_postcondition_is_caught_on_a_step() -> None:
    state, _ = checked_step(initial_state(PoolConfig(3), get_profile("seed")), GetNewBlocks(1))
    with pytest.raises(ContractBroken, match="wrong_free_blocks: post: len") as caught:
        checked_step(state, FreeBlocks((1,)))
    assert str(caught.value).startswith(SPEC_BUG) and "FreeBlocks(blocks=(1,)" in str(caught.value)


@pytest.mark.usefixtures("planted")
def test_the_flag_is_what_catches_it_in_a_run(tmp_path: Path) -> None:
    run = [*RUN, "--no-coverage", "--trace-dir", str(tmp_path)]
    unchecked = CliRunner().invoke(main, run)
    assert unchecked.exit_code == 0, unchecked.output
    checked = CliRunner().invoke(main, [*run, "--check-contracts"])
    # a broken contract of the spec is a bug in kvpool, never a finding about the pool
    assert checked.exit_code == 4, checked.output
    assert "this is a bug in kvpool" in checked.output
    assert SPEC_BUG.strip() in " ".join(checked.output.split())
    assert "wrong_free_blocks: post:" in checked.output


def test_impl_passes_with_every_contract_checked() -> None:
    result = CliRunner().invoke(main, [*RUN, "--check-contracts"])
    assert result.exit_code == 0, result.output
