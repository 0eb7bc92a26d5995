"""The end of a pool run: every reachable cell the drawn test cases missed, reached on purpose.

Drawing reaches most cells of the operation x block state matrix (:mod:`.state_coverage`)
by weight, but the rare states (a held block whose watcher waits, a shared block with a
key, an unpinned one with a key) last a step or two, and on some seeds no test case draws
every call while a block is in one. So a run does not leave it to luck: once its drawn test
cases are done, each reachable cell they missed is reached by the shortest action sequence
the exploration of the spec found for it (:func:`~.state_coverage.witnesses`), run in
lockstep on a new pool like any test case, compared after every step. At the robustness
level the same holds for the rules: each rule a call can break in the explored pools that
no drawn test case broke is broken once by its shortest witness, and the target must
refuse it with its state unchanged. A target that differs there has a finding like any
other, shrunk and traced.
"""

from __future__ import annotations

from kvpool.spec import Profile

from .levels import Level
from .lockstep import ExpectedEnd, LockstepRun, RunRecord
from .state_coverage import Witness, missed, refusal_witnesses, unrefused, witnesses
from .target import TargetFactory


def explore_spec(level: Level, record: RunRecord) -> None:
    """The exploration of the spec the sweep reads its witnesses from (once per process
    and contract: it is cached), done ahead, so that it is not counted in a run's steps
    per second: it is the spec's, whatever the target and however many steps ran."""
    if record.drawable is not None and level.consumer is None:
        witnesses(record.drawable)
        if level.out_of_contract:
            refusal_witnesses(record.drawable)


def sweep(factory: TargetFactory, profile: Profile, level: Level, record: RunRecord) -> None:
    """Run the witness of every reachable cell ``record`` has not reached and, at a level
    that draws calls outside the contract, of every rule it never saw refused; each on a
    new target. The first failure (a nonconformance, a crash) is raised with
    ``record.trace`` holding its actions. Each witness counts as a test case
    (``record.swept`` counts them)."""
    drawable = record.drawable
    if drawable is None or level.consumer is not None:
        return  # nothing ran, or the events level (it steers its own draws; no matrix)
    cells = witnesses(drawable)
    for cell in missed(record.cells, drawable):
        if not record.cells.get(cell, 0):  # an earlier witness may have reached it
            run_witness(factory, profile, level, record, cells[cell])
    if level.out_of_contract:
        rules = refusal_witnesses(drawable)
        for rule in unrefused(record.refusals, drawable):
            if not record.refusals.get(rule, 0):
                run_witness(factory, profile, level, record, rules[rule])


def run_witness(
    factory: TargetFactory, profile: Profile, level: Level, record: RunRecord, witness: Witness
) -> None:
    """One witness in lockstep on a new target, as a test case; one the target cannot
    take (an operation or an argument it does not offer) stops there, counted as skipped."""
    record.examples += 1
    before = record.steps
    run = LockstepRun(factory, profile, level, witness.config, record)
    for action in witness.actions:
        if not run.can_apply(action):
            record.skipped += 1
            break
        try:
            run.apply(action)
        except ExpectedEnd:  # a known finding whose state the spec cannot take
            record.expected_ended += 1
            break
    record.swept += 1
    if record.steps > before:
        record.valid += 1
