"""Running one level of the suite against a target and collecting what it saw."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis.errors import Flaky, HypothesisException
from kvpool.spec import Profile

from ...search.seeded_search import Start, seeded_search
from ...search.shrink import shrink
from .fault import fault_of
from .levels import Level
from .lockstep import Nonconformance, RunRecord
from .machine import pool_case
from .signature import signature
from .surface import SurfaceMismatch
from .sweep import explore_spec, sweep
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
    #: The distinct findings, each shrunk, in the order they were found.
    failures: tuple[Failure, ...]
    #: Which machine ran: ``pool`` (at ``level``), or ``requests`` (on a pool or manager).
    machine: str = "pool"
    #: Fewest valid test cases the run's last search must have run for its verdict to stand
    #: (see :func:`too_few_valid`); 0: no floor.
    min_valid: int = 0

    @property
    def valid(self) -> int:
        """Test cases that ran at least one action to their end (not rejected, not
        failing)."""
        return self.record.valid

    @property
    def steps_per_second(self) -> float:
        """Actions drawn and run in lockstep per CPU second of exploring: a rate per core,
        which other work on the machine does not lower (shrinking, which replays on fresh
        records, not included)."""
        explored = self.record.exploring_seconds
        return self.record.steps / explored if explored > 0 else 0.0

    @property
    def too_few_valid(self) -> str | None:
        """Why the run's verdict does not stand, if its last search ran fewer valid test
        cases than the floor: rejections, not the examples asked for, decided how much was
        checked (the health checks that would say so are off)."""
        searched = self.record.searched
        if searched is None or searched >= self.min_valid:
            return None
        looked = "looked for further findings on" if self.failures else "ran"
        return (
            f"{self.label} {looked} only {searched} valid test case(s), fewer than the "
            f"floor of {self.min_valid} (--min-valid): {self.record.rejected} were dropped "
            "because they ran into a finding already reported, so the run cannot say "
            "there is nothing more to find. Fix the findings, or raise --max-examples."
        )

    @property
    def failure(self) -> Failure | None:
        """The first finding, if any."""
        return self.failures[0] if self.failures else None

    @property
    def label(self) -> str:
        """``pool/safety``, ``requests/manager``, ``pool/events (set)``: the run's name in
        tables."""
        name = f"{self.machine}/{self.level.name}"
        if self.level.consumer is not None:
            name += f" ({self.level.consumer})"
        return name

    @property
    def passed(self) -> bool:
        """No finding, and enough valid test cases to say so."""
        return self.failure is None and self.too_few_valid is None


def shrink_failure(
    factory: TargetFactory, profile: Profile, level: Level, failure: Failure, seconds: float
) -> Failure:
    """``failure`` of the pool machine at ``level``, shrunk (its kind kept)."""
    config, trace, message = shrink(
        factory, profile, level, failure.config, failure.trace, budget_seconds=seconds
    )
    return Failure(message, trace, config)


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
    max_findings: int = 1,
    findings_seconds: float = 60.0,
    min_valid: int = 0,
) -> LevelResult:
    """Run ``level`` for ``max_examples`` test cases of up to ``steps`` actions each.

    A seeded search draws the test cases (:mod:`.seeded_search`); each failing one is
    shrunk by replaying its actions (see :mod:`.shrink`), and up to ``max_findings``
    distinct findings are collected. A last search that ran fewer than ``min_valid`` valid
    test cases makes the run fail (:attr:`LevelResult.too_few_valid`).
    """
    record = RunRecord()

    def shrunk(failure: Failure) -> Failure:
        return shrink_failure(factory, profile, level, failure, shrink_seconds)

    return run_seeded(
        pool_case(factory, profile, level, max_blocks, steps),
        record,
        level,
        shrunk,
        machine="pool",
        max_examples=max_examples,
        steps=steps,
        seed=seed,
        on_example=on_example,
        max_findings=max_findings,
        findings_seconds=findings_seconds,
        min_valid=min_valid,
        last_look=lambda: swept(factory, profile, level, record),
    )


def run_seeded(
    start_case: Start,
    record: RunRecord,
    level: Level,
    shrunk: Callable[[Failure], Failure],
    *,
    machine: str,
    max_examples: int,
    steps: int,
    seed: int,
    on_example: Callable[[RunRecord], None] | None,
    max_findings: int,
    findings_seconds: float,
    min_valid: int,
    last_look: Callable[[], Failure | None] | None = None,
) -> LevelResult:
    """One run of ``machine`` (``pool`` or ``requests``) at ``level``: seeded searches of
    ``start_case``'s test cases (:mod:`.seeded_search`) collect up to ``max_findings``
    distinct findings (:func:`find_all`), each shrunk by ``shrunk``. While there is room
    for one more, ``last_look`` (the pool machine's sweep) may add a new one, shrunk too.
    The run's time counts from the first search to the last look."""

    def search(known: frozenset[str], search_seed: int) -> Failure | None:
        found = seeded_search(
            start_case,
            record,
            name=f"{machine}/{level.name}",
            max_examples=max_examples,
            steps=steps,
            seed=search_seed,
            known=known,
            on_example=on_example,
        )
        return None if found is None else failure_from(found, record)

    start = time.perf_counter()
    failures = find_all(
        search,
        record,
        shrunk,
        seed=seed,
        max_findings=max_findings,
        budget_seconds=findings_seconds,
    )
    if last_look is not None and len(failures) < max_findings:
        found = last_look()
        if found is not None and signature(found.message) not in {
            signature(f.message) for f in failures
        }:
            failures += (shrunk(found),)
    seconds = time.perf_counter() - start
    return LevelResult(level, record, seconds, failures, machine, min_valid)


def swept(
    factory: TargetFactory, profile: Profile, level: Level, record: RunRecord
) -> Failure | None:
    """The end of a run: the reachable cells its test cases missed, reached on purpose
    (:mod:`.sweep`); what that found, unshrunk, or ``None``."""
    explore_spec(level, record)
    started = time.process_time()
    try:
        sweep(factory, profile, level, record)
    except Exception as exc:
        return failure_from(exc, record)
    finally:
        record.exploring_seconds += time.process_time() - started
    return None


#: One search of a run: the findings already known (a test case running into one is
#: dropped) and the seed -> the first new failure, unshrunk, or ``None``.
Search = Callable[[frozenset[str], int], Failure | None]


def find_all(
    search: Search,
    record: RunRecord,
    shrunk: Callable[[Failure], Failure],
    *,
    seed: int,
    max_findings: int,
    budget_seconds: float,
) -> tuple[Failure, ...]:
    """Explore until ``max_findings`` distinct findings (:func:`~.lockstep.signature`) are
    found, a run finds nothing new, or the budget for looking further is spent. A test case
    that runs into a finding already known is dropped, so each run looks for a new one;
    the valid test cases of a search that found nothing new go to ``record.searched``."""
    failures: list[Failure] = []
    known: set[str] = set()
    deadline = time.monotonic() + budget_seconds
    for attempt in range(max_findings):
        if attempt and time.monotonic() > deadline:
            break
        valid_before = record.valid
        started = time.process_time()
        found = search(frozenset(known), seed + attempt)
        record.exploring_seconds += time.process_time() - started
        if found is None:
            record.searched = record.valid - valid_before
            break
        known.add(signature(found.message))
        if found.config is not None and found.trace:
            found = shrunk(found)
        known.add(signature(found.message))
        failures.append(found)
    return tuple(failures)


def failure_from(exc: Exception, record: RunRecord) -> Failure:
    """What a run that raised ``exc`` found, with the actions the record saw.

    Only a nonconformance, a nondeterministic target and a crash inside the target's own
    code are findings: a call the target does not take raises :class:`SurfaceMismatch`
    (a usage error), and an exception of kvpool's own code (the engine, the adapter, the
    spec, Hypothesis) is raised again as it is (a bug in kvpool)."""
    if isinstance(exc, Nonconformance):
        message = str(exc)
    elif isinstance(exc, Flaky):
        message = (
            "the target is nondeterministic: the same actions gave different "
            f"results on a second run ({exc})"
        )
    elif isinstance(exc, SurfaceMismatch | HypothesisException):
        raise exc
    else:
        fault = fault_of(exc)
        if fault == "mismatch":
            raise SurfaceMismatch(
                f"the suite's call into the target failed: {type(exc).__name__}: {exc}"
            ) from exc
        if fault == "suite":
            raise exc
        message = f"{type(exc).__name__}: {exc}"  # the target crashed in its own code
    return Failure(message, tuple(record.trace), record.config)
