"""The search that draws a run's test cases: a seeded ``random.Random`` (through
:class:`~.choices.RandomChoices`), not Hypothesis.

Hypothesis only ever explored here: a failure is shrunk by replaying its actions
(:mod:`.shrink`), never by Hypothesis's own shrinker. Yet each of its draws cost far more
than the action it drew: on the pool machine it was about 70% of a step's time (see the
speed section of docs/guide/levels.md). This search draws the same actions with the same
drawers, one ``random.Random`` per search seeded by the run's seed and the machine's name,
so a seed names one run in every process whatever was imported.

It keeps what the Hypothesis runs counted: a test case that runs into a finding already
reported (by :func:`~.signature.signature`) is dropped as ``rejected``, one a known
finding ends (:class:`~.lockstep.ExpectedEnd`) counts in ``expected_ended``, and the search
runs until ``max_examples`` test cases were valid or, as Hypothesis gives up, ten times
that many were tried.
"""

from __future__ import annotations

from collections.abc import Callable

from ..machines.pool.fault import fault_of
from ..machines.pool.lockstep import ExpectedEnd, Nonconformance, RunRecord
from ..machines.pool.signature import signature
from .choices import Choices, RandomChoices

#: One step of a test case: draw the next action from ``choices`` and run it.
Step = Callable[[Choices], None]
#: Starts a test case: draws its pool (or manager) from ``choices``, builds the run (on
#: ``record``) and returns its step.
Start = Callable[[Choices, RunRecord], Step]
#: Hypothesis's limit too: a search stops after this many tries per valid case asked for.
TRIES_PER_EXAMPLE = 10


class Dropped(Exception):
    """A test case ran into a finding already reported, or a known one ended it."""


def seeded_search(
    start: Start,
    record: RunRecord,
    *,
    name: str,
    max_examples: int,
    steps: int,
    seed: int,
    known: frozenset[str] = frozenset(),
    on_example: Callable[[RunRecord], None] | None = None,
) -> Exception | None:
    """Run test cases of ``steps`` actions each (as many as Hypothesis's stateful runs
    took) until ``max_examples`` were valid; what the first failing one raised, with
    ``record.trace`` holding its actions, or ``None``. ``name`` (the machine and level)
    and ``seed`` seed the draws."""
    choices = RandomChoices(f"{seed}:{name}")
    valid_before = record.valid
    for _ in range(TRIES_PER_EXAMPLE * max_examples):
        if record.valid - valid_before >= max_examples:
            break
        record.examples += 1
        if on_example is not None:
            on_example(record)
        before = record.steps
        try:
            run_case(start, choices, record, steps, known)
        except Dropped:
            continue
        except Exception as exc:  # a finding, or a bug of kvpool (the runner tells which)
            return exc
        if record.steps > before:  # a case that ran nothing checked nothing
            record.valid += 1
    return None


def run_case(
    start: Start, choices: Choices, record: RunRecord, steps: int, known: frozenset[str]
) -> None:
    """One test case: its pool, then ``steps`` actions. Raises :class:`Dropped` for a case
    a finding in ``known`` (or a known finding, :mod:`.expectations`) ended; any other
    failure as it was raised."""
    try:
        step = start(choices, record)
        for _ in range(steps):
            step(choices)
    except ExpectedEnd as exc:
        record.expected_ended += 1
        raise Dropped() from exc
    except Exception as exc:
        if not isinstance(exc, Nonconformance) and fault_of(exc) != "target":
            raise  # a usage error or a bug in kvpool: never a finding, never dropped
        message = str(exc) if isinstance(exc, Nonconformance) else f"{type(exc).__name__}: {exc}"
        if signature(message) in known:
            record.rejected += 1
            raise Dropped() from exc
        raise
