"""Killing mutants: each one runs the suite's levels in turn until one catches it.

What counts as a kill
---------------------
A mutant is killed only by a nonconformance of the target: a :class:`~..lockstep.
Nonconformance` raised by :class:`~..lockstep.LockstepRun`, which names the observable
or the rule that differs. That is the target's doing when

- an observation differs from the spec's (a result, the events, the reuse watchers);
- its view differs after an action (free count, free queue order, ref counts, keys,
  primary keys, the prefix-cache index), or its free list is corrupt;
- it accepts an action that breaks a rule (the rule is named), or refuses one the spec
  allows. A pool raising inside its own operation is such a refusal: the run judges it,
  whatever the exception's type, and a refusal of an action that breaks a rule is right
  unless the pool changed on the way;
- it hands out a block that is not free, twice, or the wrong number of blocks.

Everything else means the run broke, not that the suite caught the mutant, and is an
error of the run (``kvpool mutants`` exits 2 naming the mutant): the target failing to
be built, the adapter failing to read its view between operations, the spec raising or
breaking its own invariants, Hypothesis giving up or calling the target nondeterministic
(a mutant of a deterministic pool is deterministic), and a finding that does not
reproduce when its shrunk trace is replayed. The finding is judged by that replay (the
runner keeps only a message): the kill stands only if the replay raises a
``Nonconformance`` of the same kind.

A kill must also show what the mutant's entry in the corpus says it shows (its
``shows``: an observable, a rule or a property); a kill by something else is a wrong kill,
and so is a kill that shows only a crash with one of Python's own exceptions (a mutant that
raises ``NameError`` breaks no rule the suite names).
Before any mutant, the unmutated pool runs under the very same settings and must pass.
"""

from __future__ import annotations

import builtins
import re
import time
from dataclasses import dataclass
from typing import Literal

from kvpool.spec import SEED, PoolConfig, Profile

from ...engines.vllm_api.adapter import VllmApiTarget
from ...engines.vllm_api.detection import PoolFactory
from ...machines.pool.levels import LEVELS, Level
from ...machines.pool.lockstep import LockstepRun, Nonconformance
from ...machines.pool.runner import Failure, LevelResult, run_level
from ...machines.pool.signature import signature
from ...machines.pool.target import Target, TargetFactory
from .corpus import Mutant
from .load import mutant_pool_class

#: The levels tried, cheapest first.
ORDER_OF_LEVELS = ("safety", "order", "robustness")

#: The actions of one test case.
STEPS = 40
#: The largest pool drawn.
MAX_BLOCKS = 8
#: Seconds the shrinker may take per finding (at most the mutant's budget).
SHRINK_SECONDS = 20.0

Outcome = Literal["killed", "survived", "wrong kill", "error"]


class RunBroke(Exception):
    """A run failed for a reason other than a nonconformance of the target."""


@dataclass(frozen=True)
class MutantResult:
    name: str
    outcome: Outcome
    #: Seconds until the failing run ended (shrinking included).
    seconds: float
    #: ``pool/LEVEL`` of the run that caught it, and what it reported (for an error: what
    #: went wrong).
    caught_by: str = ""
    message: str = ""
    trace_length: int = 0
    #: What the kill had to show (from the corpus).
    shows: str = ""

    @property
    def killed(self) -> bool:
        return self.outcome == "killed"


@dataclass(frozen=True)
class CleanResult:
    """The unmutated pool's run: ``problem`` is ``None`` when every level passed."""

    seconds: float
    caught_by: str = ""
    problem: str | None = None


def _factory(pool_class: PoolFactory, name: str) -> TargetFactory:
    def factory(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(pool_class, config, profile, name=name)

    return factory


def _run(
    factory: TargetFactory, level: Level, seed: int, max_examples: int, budget: float
) -> LevelResult:
    """One level at the corpus settings (the same for the clean pool and every mutant)."""
    return run_level(
        factory,
        SEED,
        level,
        max_examples=max_examples,
        steps=STEPS,
        seed=seed,
        max_blocks=MAX_BLOCKS,
        shrink_seconds=min(SHRINK_SECONDS, budget),
    )


def nonconformance(factory: TargetFactory, level: Level, failure: Failure) -> str:
    """The target's nonconformance that ``failure`` reports, found again by replaying its
    trace; :class:`RunBroke` when the replay shows anything else (see the module's notes)."""
    if failure.config is None:
        raise RunBroke(f"the run failed before a pool was built: {failure.message}")
    try:
        run = LockstepRun(factory, SEED, level, failure.config)
        for action in failure.trace:
            run.apply(action)
    except Nonconformance as exc:
        found = str(exc)
        if signature(found) != signature(failure.message):
            raise RunBroke(
                f"the run reported {failure.message!r}, its trace replayed shows {found!r}"
            ) from exc
        return found
    except Exception as exc:  # the adapter, the spec or the harness failed
        raise RunBroke(f"not a nonconformance of the target: {type(exc).__name__}: {exc}") from exc
    raise RunBroke(f"the finding does not reproduce when its trace is replayed: {failure.message}")


def clean_run(seed: int, max_examples: int, pool_class: PoolFactory | None = None) -> CleanResult:
    """Every level against the unmutated pool (``kvpool.impl``'s, unless ``pool_class``
    is given) at the settings the mutants run under."""
    if pool_class is None:
        from kvpool.impl import BlockPool

        pool_class = BlockPool
    factory = _factory(pool_class, "impl")
    start = time.perf_counter()
    for level_name in ORDER_OF_LEVELS:
        try:
            result = _run(factory, LEVELS[level_name], seed, max_examples, SHRINK_SECONDS)
        except Exception as exc:  # the runner itself broke
            problem = f"the run broke: {type(exc).__name__}: {exc}"
            return CleanResult(time.perf_counter() - start, f"pool/{level_name}", problem)
        if result.failure is not None:
            problem = f"{result.failure.message} (a trace of {len(result.failure.trace)} actions)"
            return CleanResult(time.perf_counter() - start, result.label, problem)
    return CleanResult(time.perf_counter() - start)


def kill(mutant: Mutant, seed: int, max_examples: int, budget_seconds: float) -> MutantResult:
    """Run the levels against ``mutant`` until one fails or the budget is spent, and judge
    the failure: a kill, a wrong kill (it does not show ``mutant.shows``) or an error.
    The budget is CPU time of this process, so that a machine busy with other work does
    not turn a slow kill into a survivor; the time reported is the wall clock's."""
    start = time.perf_counter()
    cpu_start = time.process_time()

    def result(
        outcome: Outcome, caught_by: str = "", message: str = "", length: int = 0
    ) -> MutantResult:
        return MutantResult(
            mutant.name,
            outcome,
            time.perf_counter() - start,
            caught_by,
            message,
            length,
            mutant.shows,
        )

    try:
        factory = _factory(mutant_pool_class(mutant), f"mutant:{mutant.name}")
    except Exception as exc:  # a patch that no longer applies (MutantError) or builds
        return result("error", "", f"the mutant cannot be built: {type(exc).__name__}: {exc}")
    for level_name in ORDER_OF_LEVELS:
        if time.process_time() - cpu_start > budget_seconds:
            break
        level = LEVELS[level_name]
        try:
            run = _run(factory, level, seed, max_examples, budget_seconds)
        except Exception as exc:  # the runner itself broke (a bug in kvpool, or a mismatch)
            broke = f"not a nonconformance of the target: {type(exc).__name__}: {exc}"
            return result("error", f"pool/{level_name}", broke)
        failure = run.failure
        if failure is None:
            continue
        length = len(failure.trace)
        try:
            message = nonconformance(factory, level, failure)
        except RunBroke as exc:
            return result("error", run.label, str(exc), length)
        outcome: Outcome = "killed" if shows_in(mutant.shows, message) else "wrong kill"
        return result(outcome, run.label, message, length)
    return result("survived")


#: A refusal of an allowed action with the exception it was: a crash when it is one of
#: Python's own (``NameError``, ``TypeError``, ...), not a rule the mutant breaks.
REFUSED_WITH = re.compile(r"was refused although it is allowed: (\w+):")


def crash_only(message: str) -> bool:
    """Whether ``message`` reports only that the pool crashed with one of Python's own
    exceptions (a refusal the pool never declares): a crash shows no rule."""
    refused = REFUSED_WITH.search(message)
    if refused is None:
        return False
    kind = getattr(builtins, refused.group(1), None)
    return isinstance(kind, type) and issubclass(kind, BaseException)


def shows_in(shows: str, message: str) -> bool:
    """Whether a kill's ``message`` shows what the corpus says: ``shows`` is one observable,
    rule or property, or several that are each the same bug seen at another step, joined
    by `` | `` (a release of two references is seen as a wrong ref_cnt, or, when the block
    was listed twice, as the pool's own refusal of the second release by the free queue's
    membership rule). A crash with one of Python's own exceptions shows nothing."""
    return not crash_only(message) and any(part in message for part in shows.split(" | "))
