"""Running one level of the suite against a target and collecting what it saw."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as use_seed
from hypothesis.errors import Flaky
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from kvpool.spec import Profile

from .levels import Level
from .lockstep import Nonconformance, RunRecord
from .machine import lockstep_machine
from .shrink import shrink
from .target import TargetFactory


@dataclass(frozen=True)
class Failure:
    """A nonconformance: why, and the shrunk action sequence that shows it (pool actions,
    or request actions for the request machine) with the pool or manager it ran on."""

    message: str
    trace: tuple[Any, ...]
    config: Any


@dataclass(frozen=True)
class LevelResult:
    level: Level
    record: RunRecord
    seconds: float
    failure: Failure | None
    #: Which machine ran: ``pool`` (at ``level``), or ``requests`` (on a pool or manager).
    machine: str = "pool"

    @property
    def label(self) -> str:
        """``pool/safety``, ``requests/manager``: the run's name in tables."""
        return f"{self.machine}/{self.level.name}"

    @property
    def passed(self) -> bool:
        return self.failure is None


def run_level(
    factory: TargetFactory,
    profile: Profile,
    level: Level,
    *,
    max_examples: int,
    steps: int,
    seed: int,
    max_blocks: int,
    on_example: Callable[[RunRecord], None] | None = None,
    shrink_seconds: float = 20.0,
) -> LevelResult:
    """Run ``level`` for ``max_examples`` test cases of up to ``steps`` actions each.

    Hypothesis draws the test cases; the first failing one is then shrunk by replaying its
    actions (see :mod:`.shrink`).
    """
    record = RunRecord()
    machine = lockstep_machine(factory, profile, level, max_blocks, record, on_example)
    start = time.perf_counter()
    failure = explore(machine, record, max_examples=max_examples, steps=steps, seed=seed)
    if failure is not None and failure.config is not None and failure.trace:
        config, trace, message = shrink(
            factory, profile, level, failure.config, failure.trace, budget_seconds=shrink_seconds
        )
        failure = Failure(message, trace, config)
    return LevelResult(level, record, time.perf_counter() - start, failure)


def explore(
    machine: type[RuleBasedStateMachine],
    record: RunRecord,
    *,
    max_examples: int,
    steps: int,
    seed: int,
) -> Failure | None:
    """Let Hypothesis run ``machine``; the first failure, unshrunk, as the record saw it."""
    use_seed(seed)(machine)
    run_settings = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    try:
        run_state_machine_as_test(machine, settings=run_settings)
    except Nonconformance as exc:
        return Failure(str(exc), tuple(record.trace), record.config)
    except Flaky as exc:
        return Failure(
            f"the target is nondeterministic: the same actions gave different "
            f"results on a second run ({exc})",
            tuple(record.trace),
            record.config,
        )
    except Exception as exc:  # the target crashed inside the adapter or the spec broke
        return Failure(f"{type(exc).__name__}: {exc}", tuple(record.trace), record.config)
    return None
