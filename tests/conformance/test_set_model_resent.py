"""The set model judged on re-sent stores inside a request run.

A request in the ``"full"`` report mode has its hits published again: one more copy for
the count model (the run's count judge), nothing for the set model where it holds the
hash. Every request run also feeds a set consumer the stream under test and compares it,
by presence, with the spec's set model of the spec's stream (``SetJudge``). Here: the
honest set consumer passes a run with re-sent stores and takes them as the contract says
(a re-send of a hash it lost while the pool kept a copy gives it back); a set consumer
that takes a re-sent store as one more copy (the count model's reading) is caught on
seeds 1, 2 and 3 at ``kvpool conform``'s default size, each shrunk trace holding a
request in the full mode.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kvpool.conformance.consumers.models import ModelConsumer
from kvpool.conformance.consumers.set_judge import SetJudge
from kvpool.conformance.engines.builtin.impl_manager import impl_manager_target
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.requests import manager_run
from kvpool.conformance.machines.requests.manager_run import ManagerRun
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.conformance.run_options import MAX_EXAMPLES, STEPS
from kvpool.spec import SEED, BlockRemoved, BlockStored, PoolConfig
from kvpool.spec.events import as_fine
from kvpool.spec.manager import FULL, Admit, Compute, ManagerConfig

PROMPT = (1, 2, 3, 4, 5, 6, 7)


class CountsResentStores(ModelConsumer):
    """The planted fault: a set consumer that takes a store of a hash it already holds (a
    re-sent store) as one more copy, so the pool's one removal leaves it holding the hash."""

    def __init__(self) -> None:
        super().__init__("count")
        self.name = "set"


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(manager_run, "SetJudge", lambda: SetJudge(CountsResentStores()))
    yield


def test_a_re_send_is_nothing_new_to_a_set_consumer_and_gives_back_a_lost_hash() -> None:
    h = as_fine(b"\x01" * 32)
    store = BlockStored((h,), None, 0, 2, 2)
    judge = SetJudge()
    # two copies cached, one evicted: the set model loses the hash, by design
    assert judge.feed([store, store, BlockRemoved(h, 0)], [store, store, BlockRemoved(h, 0)]) == ()
    assert judge.truth.copies(h, 0) == 0
    assert judge.feed([store], [store]) == ()  # the re-send gives it back
    assert judge.truth.copies(h, 0) == 1
    counting = SetJudge(CountsResentStores())
    counting.feed([store], [store])
    (kept,) = counting.feed([store, BlockRemoved(h, 0)], [store, BlockRemoved(h, 0)])
    assert kept.property == "events-replay-index" and "set consumer holds" in kept.message


def test_a_run_with_re_sent_stores_judges_the_set_model() -> None:
    run = ManagerRun(impl_manager_target, SEED, RequestSetup(ManagerConfig(2), PoolConfig(12)))
    for action in (Admit("a", PROMPT), Compute("a"), Admit("b", PROMPT, report_mode=FULL)):
        run.apply(action)
    assert run.resent_copies, "a store was re-sent"
    held = run.set_judge.consumer.residency()
    assert held == run.set_judge.truth.residency() != {}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_planted_set_consumer_is_caught_at_default_settings(planted: None, seed: int) -> None:
    """The ``requests/manager`` run of ``kvpool conform --machine requests`` (our manager,
    which takes both report modes) at its default size."""
    result = run_requests(
        manager_builder(impl_manager_target, SEED), ON_MANAGER, seed=seed,
        max_examples=MAX_EXAMPLES, steps=STEPS, max_blocks=REQUEST_MIN_BLOCKS, max_findings=1,
        shrink_seconds=1.0,
    )  # fmt: skip
    assert result.failures, f"not caught on seed {seed}"
    failure = result.failures[0]
    assert "property 'events-replay-index' broken for the set consumer" in failure.message
    assert any(isinstance(a, Admit) and a.report_mode == FULL for a in failure.trace)
