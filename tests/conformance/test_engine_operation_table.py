"""The engine machine's action table is the one place an engine-machine action is declared:
a made-up action added there (and its capability declared) is drawn, taken by the run
through its driver call, skipped on a driver that does not declare it, checked on a driver
that declares it without the call, shrunk, and shown in the docs. No module outside the
table dispatches on the actions itself (a check that catches one that does)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, get_args

import pytest
from kvpool.conformance import api
from kvpool.conformance.machines.engine import driver as driver_module
from kvpool.conformance.machines.engine import operations
from kvpool.conformance.machines.engine.actions import Abort, Arrive, EngineAction, Flush, RunStep
from kvpool.conformance.machines.engine.driver_check import driver_problems
from kvpool.conformance.machines.engine.engine_run import EngineRun
from kvpool.conformance.machines.engine.runner import run_engine, simpler_action
from kvpool.conformance.search.choices import Choices
from kvpool.conformance.tools.reference.fragments import expand
from toy_driver import ToyDriver  # pytest puts this folder on sys.path

#: The engine machine's folder.
ENGINE_MACHINE = Path(operations.__file__).resolve().parent


@dataclass(frozen=True)
class Pause:
    """A made-up action: the operator pauses the engine for ``beats`` heartbeats."""

    beats: int = 2
    operation: str = "pause"


def draw_pause(choices: Choices, run: EngineRun) -> list[Any]:
    return [Pause(choices.integer(1, 3, "beats"))]


def take_pause(run: EngineRun, action: Pause) -> None:
    driver: Any = run.driver
    driver.pause(action.beats)


PAUSE = operations.EngineOperation(
    Pause,  # type: ignore[arg-type]
    (operations.EngineDraw("pause", lambda run: 3, draw_pause),),
    call="pause",
    take=take_pause,
    about="the operator pauses the engine for a few heartbeats",
    needs="pauses",
    simpler=lambda action: [replace(action, beats=action.beats - 1)] if action.beats > 1 else [],
)


class Pausing(ToyDriver):
    """The toy scheduler, counting the pauses it is asked for."""

    capabilities = ToyDriver.capabilities | {"pauses"}
    beats: ClassVar[list[int]] = []

    def pause(self, beats: int) -> None:
        Pausing.beats.append(beats)


@pytest.fixture
def with_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up action in the table, its capability among the declared ones."""
    monkeypatch.setattr(operations, "ENGINE_OPERATIONS", (*operations.ENGINE_OPERATIONS, PAUSE))
    known = MappingProxyType({**driver_module.CAPABILITIES, "pauses": "pause(beats)"})
    monkeypatch.setattr(driver_module, "CAPABILITIES", known)
    Pausing.beats = []


def run(factory: api.EngineDriverFactory) -> Any:
    return run_engine(factory, max_examples=5, steps=20, seed=1, max_blocks=10)


@pytest.mark.usefixtures("with_pause")
def test_a_made_up_action_is_drawn_and_taken_through_its_driver_call() -> None:
    result = run(Pausing)
    assert result.passed, result.failure
    assert result.record.operations["pause"] > 0
    assert len(Pausing.beats) == result.record.operations["pause"]
    assert set(Pausing.beats) <= {1, 2, 3}


@pytest.mark.usefixtures("with_pause")
def test_a_made_up_action_is_neither_drawn_nor_replayed_without_its_capability() -> None:
    result = run(ToyDriver)
    assert result.passed, result.failure
    assert result.record.operations["pause"] == 0
    engine = EngineRun(ToyDriver, api.EngineSetup(8, 2))
    assert not engine.allows(Pause())  # type: ignore[arg-type]
    assert EngineRun(Pausing, api.EngineSetup(8, 2)).allows(Pause())  # type: ignore[arg-type]


@pytest.mark.usefixtures("with_pause")
def test_a_driver_declaring_a_made_up_action_without_its_call_is_a_usage_error() -> None:
    class Silent(ToyDriver):
        capabilities = ToyDriver.capabilities | {"pauses"}

    assert driver_problems(Silent(api.EngineSetup(8, 2))) == [
        "declares 'pauses' but has no method pause()"
    ]
    assert driver_problems(Pausing(api.EngineSetup(8, 2))) == []


@pytest.mark.usefixtures("with_pause")
def test_a_made_up_action_is_shrunk_by_its_simpler_variants() -> None:
    assert simpler_action(Pause(3)) == [Pause(2)]
    assert simpler_action(Pause(1)) == []


@pytest.mark.usefixtures("with_pause")
def test_a_made_up_action_is_shown_in_the_docs() -> None:
    page = expand("<!-- kvpool:engine-actions -->\n", "tutorial/extension-api.md")
    assert "| `pause` | `pause()` | `pauses` | the operator pauses the engine" in page
    assert "| `abort` | `abort()` | `abort` |" in page


def test_the_table_declares_every_engine_action_once() -> None:
    declared = [op.action for op in operations.ENGINE_OPERATIONS]
    assert sorted(declared, key=str) == sorted(get_args(EngineAction), key=str)
    assert len(set(declared)) == len(declared)
    for op in operations.ENGINE_OPERATIONS:
        assert op.needs is None or op.needs in driver_module.CAPABILITIES, op.name
        assert op.needs is None or op.call in driver_module.CAPABILITIES[op.needs], op.name
        assert op.needs is not None or callable(getattr(api.EngineDriver, op.call)), op.name


class Recording(ToyDriver):
    """The toy scheduler, noting each call of the machine's actions."""

    def __init__(self, setup: api.EngineSetup) -> None:
        super().__init__(setup)
        self.called: list[str] = []

    def submit(self, request: api.Submission) -> None:
        self.called.append("submit")
        super().submit(request)

    def step(self) -> api.Batch:
        self.called.append("step")
        return super().step()

    def abort(self, request_id: str) -> None:
        self.called.append("abort")
        super().abort(request_id)

    def flush(self) -> bool:
        self.called.append("flush")
        return super().flush()


def test_each_action_makes_the_driver_call_the_table_declares() -> None:
    engine = EngineRun(Recording, api.EngineSetup(8, 2))
    driver: Any = engine.driver
    actions = [Arrive("r1", (1, 2, 3)), RunStep(), Abort("r1"), RunStep(), Flush()]
    for action in actions:
        driver.called.clear()
        engine.apply(action)
        assert driver.called[:1] == [operations.operation_of(action).call], action


def test_the_draws_follow_the_tables_order() -> None:
    kinds = [kind.kind for op in operations.ENGINE_OPERATIONS for kind in op.draws]
    assert kinds == ["arrive", "burst", "step", "abort", "flush"]  # seeds' draws depend on it


#: A dispatch on an engine action outside the table: a ``case`` of an action type, or an
#: ``isinstance`` test of one.
DISPATCH = re.compile(
    r"case (Arrive|Abort|RunStep|Flush)\(|isinstance\(\w+, (Arrive|Abort|RunStep|Flush)\b"
)


def dispatches(source: str) -> list[str]:
    """The lines of ``source`` that dispatch on an engine action themselves."""
    return [line.strip() for line in source.splitlines() if DISPATCH.search(line)]


def test_no_module_of_the_engine_machine_dispatches_on_an_action() -> None:
    found = {
        path.name: dispatches(path.read_text(encoding="utf-8"))
        for path in ENGINE_MACHINE.glob("*.py")
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_dispatch_check_catches_a_match_of_its_own() -> None:
    planted = "match action:\n    case Abort(request_id=rid):\n        driver.abort(rid)\n"
    assert dispatches(planted) == ["case Abort(request_id=rid):"]
    assert dispatches("if isinstance(action, Flush):\n") == ["if isinstance(action, Flush):"]
