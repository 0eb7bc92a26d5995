"""The shared example database: one key per job, the same in every worker; failures
stored by one run replay first in the next; a worker that knows a failure never deletes
it from the others; a failing backend never ends a campaign; a missing client is named."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis.database import ExampleDatabase, InMemoryExampleDatabase, MultiplexedDatabase
from kvpool.conformance.machines.pool.runner import Failure
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.tools.fuzz.database import DatabaseError, database_key, redis_database
from kvpool.conformance.tools.fuzz.hunt import hunt
from kvpool.conformance.tools.fuzz.jobs import Job, build_jobs, load
from kvpool.conformance.tools.fuzz.plan import CampaignPlan, DatabaseSpec, JobSpec
from kvpool.conformance.tools.fuzz.sharing import DatabaseErrors, SharedExamples, Tolerant

SAFETY = JobSpec("pool", "safety")


def plan(target: str = "faulty_pools:TouchForgetsQueue", **changes: object) -> CampaignPlan:
    base = CampaignPlan(
        target=target,
        profile="seed",
        manager="none",
        jobs=(SAFETY,),
        steps=30,
        blocks=8,
        request_blocks=12,
        examples_per_round=300,
        trace_dir="traces",
        database=DatabaseSpec("db"),
        seed=1,
    )
    return replace(base, **changes)


def test_the_key_names_target_profile_job_and_pool_size() -> None:
    key = database_key(plan(), SAFETY)
    assert key == b"kvpool-fuzz/v2/faulty_pools:TouchForgetsQueue/seed/pool/safety/blocks=8"
    assert database_key(plan(), SAFETY) == key, "every worker computes the same key"
    others = {
        database_key(plan("impl"), SAFETY),
        database_key(plan(profile="vllm-0.33"), SAFETY),
        database_key(plan(), JobSpec("pool", "order")),
        database_key(plan(blocks=16), SAFETY),
        database_key(plan(), JobSpec("requests", "pool")),
        database_key(plan(manager="impl"), JobSpec("requests", "manager")),
    }
    assert key not in others and len(others) == 6


def safety_job() -> Job:
    chosen = plan()
    (job,) = build_jobs(chosen, load(chosen))
    return job


def run(
    job: Job, db: ExampleDatabase, *, replay: bool, known: frozenset[str] = frozenset()
) -> Failure | None:
    return hunt(
        job.cases(known, lambda record: None),
        job.record,
        database=db,
        key=job.key,
        replay=replay,
        max_examples=300,
        steps=30,
        seed=1,
    )


def test_a_failure_is_stored_under_the_jobs_key_and_replays_first() -> None:
    job = safety_job()
    db = InMemoryExampleDatabase()
    found = run(job, db, replay=False)
    assert found is not None and "after touch" in found.message
    assert list(db.data) == [job.key], "stored under the key we set, and nothing else"
    fresh = safety_job()  # another worker: fresh records, the same database
    again = run(fresh, db, replay=True)
    assert again is not None and signature(again.message) == signature(found.message)
    assert fresh.record.examples <= 3, "the stored example is the first one run"


def test_a_replay_round_with_nothing_left_to_replay_is_not_a_failure() -> None:
    # two workers replay the same stored example; once it stopped failing, the first one's
    # replay drops it, and the second one's round finds the database empty for the job
    job = safety_job()
    assert run(job, InMemoryExampleDatabase(), replay=True) is None
    assert job.record.examples == 0, "nothing was run: nothing to replay"


def test_a_worker_that_knows_the_failure_keeps_it_for_the_others() -> None:
    job = safety_job()
    backend = InMemoryExampleDatabase()
    found = run(job, backend, replay=False)
    assert found is not None
    known = frozenset({signature(found.message)})
    shared = SharedExamples(backend)
    shared.keep_failures = True
    assert run(job, shared, replay=True, known=known) is None, "a known failure is dropped"
    assert list(backend.fetch(job.key)), "and still stored for the other workers"
    # without keep_failures, Hypothesis deletes the example the worker dropped
    plain = SharedExamples(backend)
    assert run(job, plain, replay=True, known=known) is None
    assert not list(backend.fetch(job.key))


class Broken(ExampleDatabase):
    """A backend that fails at everything, like a Redis server that went away."""

    def fetch(self, key: bytes) -> Iterable[bytes]:
        raise ConnectionError("connection refused")

    def save(self, key: bytes, value: bytes) -> None:
        raise ConnectionError("connection refused")

    def delete(self, key: bytes, value: bytes) -> None:
        raise ConnectionError("connection refused")


def test_a_failing_backend_is_counted_and_the_others_go_on() -> None:
    job = safety_job()
    errors = DatabaseErrors()
    local = InMemoryExampleDatabase()
    both = MultiplexedDatabase(Tolerant(local, "here", errors), Tolerant(Broken(), "redis", errors))
    found = run(job, SharedExamples(both), replay=False)
    assert found is not None and "after touch" in found.message, "the pool's failure"
    assert errors.count >= 1
    assert errors.last == "redis save: ConnectionError: connection refused"
    assert list(both.fetch(job.key)) == list(local.fetch(job.key)) != []
    # unguarded, the backend's error would pass for a failure of the pool
    unguarded = run(safety_job(), SharedExamples(Broken()), replay=False)
    assert unguarded is not None and unguarded.message.startswith("ConnectionError")


def test_without_the_redis_client_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis -> ImportError
    with pytest.raises(DatabaseError, match=r"pip install -e '\.\[fuzz\]'"):
        redis_database("redis://127.0.0.1:1/0")


def test_an_unreachable_or_malformed_redis_is_a_clear_error() -> None:
    with pytest.raises(DatabaseError, match=r"cannot reach Redis at redis://127\.0\.0\.1:1/0"):
        redis_database("redis://127.0.0.1:1/0")
    with pytest.raises(DatabaseError, match="is not a Redis URL"):
        redis_database("http://example")
