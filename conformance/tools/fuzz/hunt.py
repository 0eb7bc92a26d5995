"""One round of a job: Hypothesis runs a job's test cases against the shared example
database.

Hypothesis draws one number per test case, the seed of that case's ``random.Random``; the
case itself (its pool, then every action) is drawn by the seeded search's drawers
(:func:`~..engine.seeded_search.run_case`), at the seeded search's speed. The database
keeps that number for a failing case, which replays it exactly on any worker.

A round either replays what the database holds for the job (``replay``: Hypothesis's
reuse phase alone, so a failure it raises was found before, by this worker or another) or
draws new test cases (its generate phase). Hypothesis's own shrinking is left out: a
failure is shrunk by replaying its actions (:mod:`..engine.shrink`). The unshrunk failing
case is what the database keeps; it replays just as well.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from unittest import SkipTest

from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
from hypothesis import seed as use_seed
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Unsatisfiable

from ...machines.pool.lockstep import RunRecord
from ...machines.pool.runner import Failure, failure_from
from ...machines.pool.source_constants import without_source_constants
from ...search.choices import RandomChoices
from ...search.seeded_search import Dropped, Start, run_case

#: The seed of one test case, the one value Hypothesis draws (and the database keeps).
CASE_SEEDS = st.integers(0, 2**64 - 1)


@dataclass(frozen=True)
class Cases:
    """A job's test cases for one round: started by ``start``; one that runs into a
    finding in ``known`` is dropped; ``tick`` is called as each starts."""

    start: Start
    known: frozenset[str]
    tick: Callable[[RunRecord], None]


def lockstep_settings(
    *,
    max_examples: int,
    steps: int,
    phases: list[Phase],
    database: ExampleDatabase | None = None,
) -> settings:
    """Hypothesis settings for one run of a lockstep machine: quiet, no deadline, no health
    checks (a slow pool is not a bad test), one failure at a time."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=database,
        derandomize=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=phases,
    )


def hunt(
    cases: Cases,
    record: RunRecord,
    *,
    database: ExampleDatabase,
    key: bytes,
    replay: bool,
    max_examples: int,
    steps: int,
    seed: int,
) -> Failure | None:
    """Run ``cases`` once, storing (or replaying) failures under ``key``; the failure it
    raised, as the record saw it, or ``None``."""

    @given(CASE_SEEDS)
    def test(case_seed: int) -> None:
        record.examples += 1
        cases.tick(record)
        before = record.steps
        try:
            run_case(cases.start, RandomChoices(f"case {case_seed}"), record, steps, cases.known)
        except Dropped:
            reject()
        if record.steps > before:  # a case that ran nothing checked nothing
            record.valid += 1

    run_settings = lockstep_settings(
        max_examples=max_examples,
        steps=steps,
        phases=[Phase.reuse] if replay else [Phase.generate],
        database=database,
    )
    run = run_settings(use_seed(seed)(test))
    # The attribute Hypothesis reads a test's database key from (its own find() sets it);
    # tests/fuzz checks that the examples land under this key.
    run._hypothesis_internal_database_key = key  # type: ignore[attr-defined]
    try:
        with without_source_constants():
            run()
    except Unsatisfiable:
        return None  # every test case ran into a failure already known: nothing new
    except SkipTest as exc:
        if replay:
            # nothing left to replay: another worker replayed the stored examples first and,
            # as they no longer fail, the database dropped them (Hypothesis then refuses to
            # run a reuse-only test with no examples)
            return None
        return failure_from(exc, record)
    except Exception as exc:
        return failure_from(exc, record)
    return None
