"""Running the engine machine: the seeded search every machine uses, and the shrinker every
machine uses, on the clients' and the model's actions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...search.choices import Choices
from ...search.seeded_search import Start, Step
from ...search.shrink import Replay, shrink_sequence
from ..pool.levels import Level
from ..pool.lockstep import RunRecord, replay_actions
from ..pool.runner import Failure, LevelResult, run_seeded
from .draw import ENGINE_MIN_BLOCKS, engine_setup
from .driver import EngineDriverFactory, EngineSetup
from .engine_run import EngineRun
from .operations import next_actions, operation_of

#: The engine machine's one run: the engine's own scheduler, judged by the properties.
ON_ENGINE = Level(
    "scheduler",
    "the engine's own scheduler plans every batch; the suite plays the clients and the "
    "model and judges what the engine shows by the request-level properties",
    exact_order=False,
    out_of_contract=False,
)


def engine_case(factory: EngineDriverFactory, max_blocks: int, consumer: str | None) -> Start:
    """Test cases of the engine machine: an engine drawn and built, then one client or
    model action (a burst: several arrivals) drawn and run per step."""

    def start(choices: Choices, record: RunRecord) -> Step:
        setup = engine_setup(choices, max_blocks)
        fixed = getattr(factory, "block_size", None)  # an engine built for one block size
        if fixed is not None:
            setup = replace(setup, block_size=fixed)
        if consumer is not None:
            setup = replace(setup, enable_kv_cache_events=True)
        run = EngineRun(factory, setup, record, consumer)

        def step(choices: Choices) -> None:
            for action in next_actions(choices, run):
                run.apply(action)

        return step

    return start


def replay_engine(
    factory: EngineDriverFactory,
    setup: EngineSetup,
    actions: list[Any],
    skip: bool,
    consumer: str | None = None,
) -> tuple[str | None, list[Any]]:
    """Run ``actions`` on a fresh engine; the first finding and the actions run (with
    ``skip``, those that make no sense at their turn are left out)."""
    try:
        run = EngineRun(factory, setup, RunRecord(), consumer)
    except Exception as exc:  # the engine could not even be built
        return f"{type(exc).__name__}: {exc}", []
    try:
        return replay_actions(run.apply, actions, lambda a: skip and not run.allows(a))
    finally:
        run.close()


def smaller_setups(setup: EngineSetup) -> list[EngineSetup]:
    """Simpler engines to try: fewer blocks."""
    return [replace(setup, num_blocks=n) for n in range(ENGINE_MIN_BLOCKS, setup.num_blocks)]


def simpler_action(action: Any) -> list[Any]:
    """Variants of an action asking for less (the table's, per action)."""
    return operation_of(action).simpler(action)


def shrink_engine_failure(
    factory: EngineDriverFactory, failure: Failure, seconds: float, consumer: str | None
) -> Failure:
    """``failure`` of the engine machine, shrunk (its kind kept)."""

    def replay_on(setup: EngineSetup, skip: bool) -> Replay:
        return lambda actions: replay_engine(factory, setup, actions, skip, consumer)

    config, trace, message = shrink_sequence(
        replay_on, smaller_setups, simpler_action, failure.config, failure.trace, seconds
    )
    return Failure(message, trace, config)


def run_engine(
    factory: EngineDriverFactory,
    *,
    max_examples: int,
    steps: int,
    seed: int,
    max_blocks: int,
    consumer: str | None = None,
    on_example: Callable[[RunRecord], None] | None = None,
    shrink_seconds: float = 20.0,
    max_findings: int = 1,
    findings_seconds: float = 60.0,
    min_valid: int = 0,
) -> LevelResult:
    """Run the engine machine on engines from ``factory``; shrink each distinct finding.
    With ``consumer``, the engine's KV events (a driver declaring ``events``) are judged by
    that consumer model after every action."""
    level = ON_ENGINE if consumer is None else replace(ON_ENGINE, consumer=consumer)

    def shrunk(failure: Failure) -> Failure:
        return shrink_engine_failure(factory, failure, shrink_seconds, consumer)

    return run_seeded(
        engine_case(factory, max_blocks, consumer),
        RunRecord(),
        level,
        shrunk,
        machine="engine",
        max_examples=max_examples,
        steps=steps,
        seed=seed,
        on_example=on_example,
        max_findings=max_findings,
        findings_seconds=findings_seconds,
        min_valid=min_valid,
    )
