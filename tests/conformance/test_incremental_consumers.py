"""The consumers kept in place (consumers/incremental.py) against the spec's pure models on
random streams: the same holdings after every event, the same violations, and the same
set-vs-count differences reported at the same removals as the spec's
``consumer_violations`` computed over every key; and a planted fault in the fast path is
caught by the same comparison."""

from __future__ import annotations

import random

import pytest
from kvpool.conformance.consumers.incremental import IncrementalConsumer, SetBesideCount
from kvpool.spec.consumer import (
    ConsumerState,
    EventViolation,
    apply_event,
    consumer_violations,
    new_consumer,
)
from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

MEDIA = (None, "GPU", "CPU")
Step = tuple[Event, str | None]


def random_stream(rng: random.Random, length: int) -> list[Step]:
    """Stores (with and without a known parent), removals of held and unknown hashes, and
    now and then a clear, over a few hashes, groups and media (so copies pile up)."""
    hashes = [bytes([i]) * 4 for i in range(12)]
    steps: list[Step] = []
    for _ in range(length):
        medium = rng.choice(MEDIA)
        group = rng.choice((0, 1))
        roll = rng.random()
        if roll < 0.5:
            parent = rng.choice([None, *hashes])
            stored = tuple(rng.sample(hashes, rng.randint(1, 3)))
            steps.append((BlockStored(stored, parent, group, 4, 4 * len(stored)), medium))
        elif roll < 0.97:
            steps.append((BlockRemoved(rng.choice(hashes), group), medium))
        else:
            steps.append((AllBlocksCleared(), medium))
    return steps


class _StoreForgets(SetBesideCount):
    """A planted fault: a store of a lost hash leaves it lost (the set consumer does not
    hold it again)."""

    def apply(
        self, event: Event, medium: str | None, reported: set[Key] | None = None
    ) -> list[EventViolation]:
        lost = set(self.lost)
        found = super().apply(event, medium, reported)
        if isinstance(event, BlockStored):
            for where in lost - self.lost:
                self._lose(where)
        return found


Key = tuple[str, int | None, bytes | None]


def set_beside_count(
    steps: list[Step], kind: type[SetBesideCount]
) -> tuple[list[list[EventViolation]], list[list[EventViolation]]]:
    """What each event shows a set consumer judged beside a count consumer: by the fast
    path (as the monitor calls it), and by the reference: the spec's ``apply_event`` on
    the set model, then at a removal the spec's ``consumer_violations`` over every key,
    less those reported at the removal before (a clear forgets what was reported). The
    holdings are compared after every event too."""
    fast = kind()
    plain_judged: ConsumerState = new_consumer("set")
    plain_truth: ConsumerState = new_consumer("count")
    reported_fast: set[Key] = set()
    reported_plain: set[Key] = set()
    got_fast, got_plain = [], []
    for event, medium in steps:
        got_fast.append(fast.apply(event, medium, reported_fast))
        plain_judged, own = apply_event(plain_judged, event, medium)
        plain_truth, _ = apply_event(plain_truth, event, medium)
        assert fast.count.held == dict(plain_truth.held)
        if fast.view().held != dict(plain_judged.held):
            got_plain.append([])  # the holdings differ: the comparison fails here
            break
        expected = list(own)
        if isinstance(event, AllBlocksCleared):  # as the monitor does: forget
            reported_fast.clear()
            reported_plain.clear()
        if isinstance(event, BlockRemoved):
            now = consumer_violations(plain_judged, plain_truth)
            expected += [
                v for v in now if (v.property, v.group_id, v.block_hash) not in reported_plain
            ]
            reported_plain = {(v.property, v.group_id, v.block_hash) for v in now}
        got_plain.append(expected)
    return got_fast, got_plain


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("model", ["count", "set"])
def test_the_consumer_kept_in_place_holds_and_finds_what_the_spec_model_does(
    seed: int, model: str
) -> None:
    fast = IncrementalConsumer(model)
    plain = new_consumer(model)
    for event, medium in random_stream(random.Random(seed), 300):
        found = fast.apply(event, medium)
        plain, expected = apply_event(plain, event, medium)
        assert found == list(expected)
        assert fast.held == dict(plain.held)
        assert fast.view().residency("GPU") == plain.residency("GPU")


@pytest.mark.parametrize("seed", range(40))
def test_a_set_consumer_beside_a_count_one_holds_and_finds_what_the_spec_does(
    seed: int,
) -> None:
    fast, plain = set_beside_count(random_stream(random.Random(seed), 400), SetBesideCount)
    assert fast == plain
    differences = [v for vs in fast for v in vs if v.property == "events-replay-index"]
    assert differences, "the stream shows no difference: it tests nothing"


def test_a_set_consumer_that_forgets_a_store_is_caught_by_the_comparison() -> None:
    caught = 0
    for seed in range(40):
        fast, plain = set_beside_count(random_stream(random.Random(seed), 400), _StoreForgets)
        caught += fast != plain
    assert caught > 0


def test_keys_held_counts_what_the_set_consumer_holds() -> None:
    both = SetBesideCount()
    both.apply(BlockStored((b"a", b"b"), None, 0, 4, 8), None, set())
    both.apply(BlockStored((b"a",), None, 0, 4, 4), None, set())
    both.apply(BlockRemoved(b"a", 0), None, set())  # lost: a copy remains
    assert both.keys_held() == 1 and both.count.keys_held() == 2
    assert both.view().held == {(None, 0, b"b"): 1}
