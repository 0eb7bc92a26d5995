"""A worker of a campaign: its jobs in turn, round after round, until it is told to stop.

Each turn of a job first replays whatever the shared database holds for it that this
worker has not replayed yet (failures found by other workers, here or on other machines),
then draws ``examples_per_round`` new test cases with a fresh seed. A failure is shrunk,
its trace written, and reported to the parent at once; the worker then drops test cases
that run into the same kind of failure, to look for new ones. On SIGINT a worker stops as
the next test case starts (see :mod:`.interrupts`); asked to stop by the parent's event, it
stops after the current round.
"""

from __future__ import annotations

import random
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from ...machines.pool.lockstep import RunRecord
from ...machines.pool.runner import Failure
from ...machines.pool.signature import signature
from .database import open_database
from .hunt import hunt
from .interrupts import Interrupts
from .jobs import Job, build_jobs, load
from .messages import Crashed, Finished, Found, JobCounts, Message, Progress
from .plan import CampaignPlan, JobSpec
from .sharing import DatabaseErrors, SharedExamples
from .tether import tether
from .traces import save_finding

#: Seconds between two progress messages of a worker.
PROGRESS_EVERY = 0.5
#: A replay round's ``max_examples``: Hypothesis replays the job's stored examples (the
#: smallest first) until one fails or this many ran.
REPLAY_EXAMPLES = 20


def work(
    plan: CampaignPlan, worker: int, outbox: Queue[Message], stop: Event, supervisor: int
) -> None:
    """A worker process's entry point (workers count from 1), started by process
    ``supervisor``, with which it dies (:mod:`.tether`). Its last message is
    :class:`Finished`, or :class:`Crashed` when kvpool itself failed."""
    tether(supervisor)
    interrupts = Interrupts()
    interrupts.install()
    running: Worker | None = None
    try:
        running = Worker(plan, worker, outbox, stop, interrupts)
        running.run()
        reason = "stopped"
    except KeyboardInterrupt:
        reason = "interrupted"
    except Exception as exc:  # a bug of kvpool or of this machine, not of the pool
        outbox.put(Crashed(worker, f"{type(exc).__name__}: {exc}"))
        return
    if running is not None:
        outbox.put(running.progress())
    outbox.put(Finished(worker, reason))


class Worker:
    """The state of one worker: its jobs, what it knows, what it ran."""

    def __init__(
        self,
        plan: CampaignPlan,
        worker: int,
        outbox: Queue[Message],
        stop: Event,
        interrupts: Interrupts,
    ) -> None:
        self.plan = plan
        self.worker = worker
        self.outbox = outbox
        self.stop = stop
        self.interrupts = interrupts
        self.loaded = load(plan)
        self.jobs = build_jobs(plan, self.loaded)
        self.errors = DatabaseErrors()
        self.database = SharedExamples(open_database(plan.database, self.errors))
        #: Kinds of failure (signatures) reported, and stored examples replayed, by job.
        self.known: dict[JobSpec, set[str]] = {job.spec: set() for job in self.jobs}
        self.replayed: dict[JobSpec, set[bytes]] = {job.spec: set() for job in self.jobs}
        self.rounds = {job.spec: 0 for job in self.jobs}
        self.replays = {job.spec: 0 for job in self.jobs}
        #: Test cases drawn in this worker's own (generating) rounds.
        self.drawn = 0
        self.random = random.Random(f"{plan.seed}/{worker}")
        self.last_sent = 0.0

    def run(self) -> None:
        while True:
            for job in self.jobs:
                if self.stopping():
                    return
                self.replay(job)
                if self.stopping():
                    return
                self.explore(job)

    def stopping(self) -> bool:
        return self.stop.is_set() or self.interrupts.requested

    def replay(self, job: Job) -> None:
        """Replay the stored examples of ``job`` this worker has not replayed yet; report
        each kind of failure they raise."""
        stored = set(self.database.fetch(job.key))
        if not stored - self.replayed[job.spec]:
            return
        for _ in range(len(stored) + 1):
            if self.stopping():
                return
            drawn = self.drawn
            failure, _ = self.round(job, replay=True)
            if failure is None or signature(failure.message) in self.known[job.spec]:
                break
            self.report(job, failure, replayed=True, seed=None, drawn_before=drawn)
        self.replayed[job.spec] |= stored

    def explore(self, job: Job) -> None:
        """Draw new test cases for ``job``; report a failure they raise."""
        drawn = self.drawn
        failure, seed = self.round(job, replay=False)
        if failure is not None:
            self.report(job, failure, replayed=False, seed=seed, drawn_before=drawn)

    def round(self, job: Job, replay: bool) -> tuple[Failure | None, int]:
        known = self.known[job.spec]
        self.database.keep_failures = bool(known)
        seed = self.random.randrange(2**32)
        before = job.record.examples
        failure = hunt(
            job.cases(frozenset(known), self.tick),
            job.record,
            database=self.database,
            key=job.key,
            replay=replay,
            max_examples=REPLAY_EXAMPLES if replay else self.plan.examples_per_round,
            steps=self.plan.steps,
            seed=seed,
        )
        if replay:
            self.replays[job.spec] += 1
        else:
            self.rounds[job.spec] += 1
            self.drawn += job.record.examples - before
        self.send(self.progress())
        return failure, seed

    def report(
        self, job: Job, failure: Failure, replayed: bool, seed: int | None, drawn_before: int
    ) -> None:
        """Shrink ``failure``, write its trace (once per kind), tell the parent."""
        known = self.known[job.spec]
        known.add(signature(failure.message))
        trace: str | None = None
        written = False
        error: str | None = "it happens before any action, when the pool is built"
        if failure.config is not None and failure.trace:
            failure = job.shrink(failure)
            known.add(signature(failure.message))
            try:
                path, written = save_finding(
                    self.plan, job.spec, failure, seed, self.loaded.version
                )
                trace, error = str(path), None
            except Exception as exc:  # recording replays the target; report it, go on
                error = f"recording the trace failed: {type(exc).__name__}: {exc}"
        self.send(
            Found(
                self.worker,
                job.spec,
                signature(failure.message),
                failure,
                trace,
                written,
                replayed,
                drawn_before,
                error,
            )
        )

    def tick(self, record: RunRecord) -> None:
        """Called as each test case starts: stop here on Ctrl-C; a progress message now
        and then."""
        self.interrupts.check()
        if time.monotonic() - self.last_sent >= PROGRESS_EVERY:
            self.send(self.progress())

    def send(self, message: Message) -> None:
        if isinstance(message, Progress):
            self.last_sent = time.monotonic()
        self.outbox.put(message)

    def progress(self) -> Progress:
        jobs: dict[str, JobCounts] = {}
        reached: dict[str, set[str]] = {}
        for job in self.jobs:
            record = job.record
            jobs[job.spec.label] = JobCounts(
                self.rounds[job.spec], self.replays[job.spec], record.examples, record.steps
            )
            seen = reached.setdefault(job.spec.machine, set())
            seen.update(s for s, n in record.situations.items() if n)
        return Progress(
            self.worker,
            jobs,
            {machine: frozenset(s) for machine, s in reached.items()},
            self.errors.count,
            self.errors.last,
        )
