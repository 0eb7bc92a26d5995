"""Killing mutants: each one runs the suite's levels in turn until one catches it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kvpool.spec import SEED, PoolConfig, Profile

from ..levels import LEVELS
from ..runner import run_level
from ..target import Target
from ..targets.vllm_api import VllmApiTarget
from .corpus import MUTANTS_BY_NAME
from .load import mutant_pool_class

#: The levels tried, cheapest first.
ORDER_OF_LEVELS = ("safety", "order", "robustness")


@dataclass(frozen=True)
class MutantResult:
    name: str
    killed: bool
    #: Seconds until the failing run ended (shrinking included).
    seconds: float
    #: ``pool/LEVEL`` of the run that caught it, and what it reported.
    caught_by: str = ""
    message: str = ""
    trace_length: int = 0


def kill(name: str, seed: int, max_examples: int, budget_seconds: float) -> MutantResult:
    """Run the levels against mutant ``name`` until one fails or the budget is spent."""
    pool_class = mutant_pool_class(MUTANTS_BY_NAME[name])

    def factory(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(pool_class, config, profile, name=f"mutant:{name}")

    start = time.perf_counter()
    for level_name in ORDER_OF_LEVELS:
        if time.perf_counter() - start > budget_seconds:
            break
        result = run_level(
            factory,
            SEED,
            LEVELS[level_name],
            max_examples=max_examples,
            steps=40,
            seed=seed,
            max_blocks=8,
            shrink_seconds=min(20.0, budget_seconds),
        )
        failure = result.failure
        if failure is not None:
            return MutantResult(
                name,
                True,
                time.perf_counter() - start,
                result.label,
                failure.message,
                len(failure.trace),
            )
    return MutantResult(name, False, time.perf_counter() - start)
