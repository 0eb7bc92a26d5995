"""The fuzz campaign's example database is read as data: any bytes stored under a job's
key (a corrupted directory, a hostile shared Redis) replay as nothing or as test cases,
never as a finding against the pool; an oversized example is dropped and counted, and a
flooded key costs no more than the bound."""

from __future__ import annotations

import tempfile
from dataclasses import replace

import pytest
from hostile import FUZZ
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase
from kvpool.conformance.tools.fuzz import sharing
from kvpool.conformance.tools.fuzz.hunt import hunt
from kvpool.conformance.tools.fuzz.jobs import build_jobs, load
from kvpool.conformance.tools.fuzz.plan import CampaignPlan, DatabaseSpec, JobSpec
from kvpool.conformance.tools.fuzz.sharing import DatabaseErrors, Tolerant

PLAN = CampaignPlan(
    target="impl",
    profile="seed",
    manager="none",
    jobs=(JobSpec("pool", "safety"),),
    steps=20,
    blocks=8,
    request_blocks=12,
    examples_per_round=20,
    trace_dir="traces",
    database=DatabaseSpec("db"),
    seed=1,
)
(JOB,) = build_jobs(PLAN, load(PLAN))

stored = st.lists(
    st.one_of(
        st.binary(max_size=300),
        st.binary(min_size=1, max_size=8).map(lambda b: b * 500),
        st.just(b""),
        st.just(b"\x00" * 10_000),
    ),
    min_size=1,
    max_size=8,
)


@settings(parent=FUZZ, suppress_health_check=list(HealthCheck))  # hunt runs Hypothesis inside
@given(stored)
def test_any_stored_bytes_replay_as_no_finding_on_a_conformant_pool(values: list[bytes]) -> None:
    errors = DatabaseErrors()
    with tempfile.TemporaryDirectory() as directory:
        backend = DirectoryBasedExampleDatabase(directory)
        for value in values:
            backend.save(JOB.key, value)
        found = hunt(
            JOB.cases(frozenset(), lambda record: None),
            JOB.record,
            database=Tolerant(backend, directory, errors),
            key=JOB.key,
            replay=True,
            max_examples=20,
            steps=20,
            seed=1,
        )
    assert found is None, found


def test_an_oversized_example_is_dropped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharing, "MAX_EXAMPLE_BYTES", 10)
    backend = InMemoryExampleDatabase()
    backend.save(b"k", b"small")
    backend.save(b"k", b"x" * 11)
    errors = DatabaseErrors()
    assert list(Tolerant(backend, "mem", errors).fetch(b"k")) == [b"small"]
    assert errors.count == 1 and "an example of 11 bytes (at most 10)" in (errors.last or "")


def test_a_flooded_key_is_read_up_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharing, "MAX_EXAMPLES_PER_KEY", 5)
    backend = InMemoryExampleDatabase()
    for i in range(50):
        backend.save(b"k", i.to_bytes(2, "big"))
    assert len(list(Tolerant(backend, "mem", DatabaseErrors()).fetch(b"k"))) == 5


def test_a_planted_finding_still_replays_through_the_bounds() -> None:
    """The bounds drop only what is outside them: a real stored failure still replays."""
    faulty = replace(PLAN, target="faulty_pools:TouchForgetsQueue")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
    try:
        (job,) = build_jobs(faulty, load(faulty))
        backend = InMemoryExampleDatabase()

        def run(replay: bool) -> object:
            return hunt(
                job.cases(frozenset(), lambda record: None),
                job.record,
                database=Tolerant(backend, "mem", DatabaseErrors()),
                key=job.key,
                replay=replay,
                max_examples=300,
                steps=30,
                seed=1,
            )

        assert run(replay=False) is not None, "the planted fault is found"
        assert run(replay=True) is not None, "and replays from the database"
    finally:
        sys.path.pop(0)


def test_a_fifo_stored_under_a_key_replays_as_nothing_and_is_counted() -> None:
    """A FIFO (or a device) in the directory database: the replay round neither waits on
    it nor finds anything in it; the error is counted for the campaign's summary."""
    import os
    import signal

    from kvpool.conformance.tools.fuzz.database import RegularFilesDatabase

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("the replay waits on the FIFO")

    errors = DatabaseErrors()
    with tempfile.TemporaryDirectory() as directory:
        backend = RegularFilesDatabase(directory, errors)
        folder = backend._key_path(JOB.key)
        folder.mkdir(parents=True)
        os.mkfifo(folder / "fifo")
        (folder / "zeros").symlink_to("/dev/zero")
        previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(30)
        try:
            found = hunt(
                JOB.cases(frozenset(), lambda record: None),
                JOB.record,
                database=Tolerant(backend, directory, errors),
                key=JOB.key,
                replay=True,
                max_examples=20,
                steps=20,
                seed=1,
            )
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    assert found is None, found
    assert errors.count >= 2 and "only regular files are read" in (errors.last or "")
