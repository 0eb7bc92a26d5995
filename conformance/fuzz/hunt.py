"""One round of a job: Hypothesis runs a machine against the shared example database.

A round either replays what the database holds for the job (``replay``: Hypothesis's
reuse phase alone, so a failure it raises was found before, by this worker or another) or
draws new test cases (its generate phase). Hypothesis's own shrinking is left out: on the
lockstep machine it took 12 to 40 s for each of three planted faults we measured, where
shrinking the action sequence by replay (:mod:`..shrink`) takes well under a second. The
unshrunk failing example is what the database keeps; it replays just as well.
"""

from __future__ import annotations

from unittest import SkipTest

from hypothesis import Phase
from hypothesis import seed as use_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test

from ..engine.lockstep import RunRecord
from ..engine.runner import Failure, failure_from, lockstep_settings
from ..engine.source_constants import without_source_constants


def hunt(
    machine: type[RuleBasedStateMachine],
    record: RunRecord,
    *,
    database: ExampleDatabase,
    key: bytes,
    replay: bool,
    max_examples: int,
    steps: int,
    seed: int,
) -> Failure | None:
    """Run ``machine`` once, storing (or replaying) failures under ``key``; the failure it
    raised, as the record saw it, or ``None``."""
    use_seed(seed)(machine)
    run_settings = lockstep_settings(
        max_examples=max_examples,
        steps=steps,
        phases=[Phase.reuse] if replay else [Phase.generate],
        database=database,
    )
    test = get_state_machine_test(machine, settings=run_settings)
    # The attribute Hypothesis reads a test's database key from (its own find() sets it);
    # tests/fuzz checks that the examples land under this key.
    test._hypothesis_internal_database_key = key  # type: ignore[attr-defined]
    try:
        with without_source_constants():
            test()
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
