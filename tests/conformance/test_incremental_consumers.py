"""The consumers kept in place (consumers/incremental.py) against the spec's pure models on
random streams: the same holdings after every event, the same violations, and the same
set-vs-count differences reported at the same removals as the spec's
``consumer_violations`` computed over every key; and a planted fault in the fast path is
caught by the same comparison."""

from __future__ import annotations

import random

import pytest
from kvpool.conformance.consumers.incremental import (
    IncrementalConsumer,
    IncrementalDifferences,
    touched,
)
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


class _NoStoreDirt(IncrementalDifferences):
    """A planted fault: a store is not noted, so a difference it closes stays reported."""

    def applied(self, event: Event, medium: str | None) -> None:
        if not isinstance(event, BlockStored):
            super().applied(event, medium)


def differences_at_removals(
    steps: list[Step], tracker: type[IncrementalDifferences]
) -> tuple[list[list[EventViolation]], list[list[EventViolation]]]:
    """What each event shows a set consumer judged beside a count consumer: by the fast
    path (``apply``, as the monitor calls it), and by the reference: the spec's
    ``apply_event`` on the set model, then at a removal the spec's ``consumer_violations``
    over every key, less those reported at the removal before (a clear forgets what was
    reported)."""
    judged, truth = IncrementalConsumer("set"), IncrementalConsumer("count")
    fast = tracker(judged, truth)
    plain_judged: ConsumerState = new_consumer("set")
    plain_truth: ConsumerState = new_consumer("count")
    reported_fast: set[tuple[str, int | None, bytes | None]] = set()
    reported_plain: set[tuple[str, int | None, bytes | None]] = set()
    got_fast, got_plain = [], []
    for event, medium in steps:
        if isinstance(event, AllBlocksCleared):  # as the monitor does: both, then forget
            judged.apply(event, medium)
            truth.apply(event, medium)
            fast.applied(event, medium)
            reported_fast.clear()
        else:
            got_fast.append(fast.apply(event, medium, reported_fast))
        plain_judged, own = apply_event(plain_judged, event, medium)
        plain_truth, _ = apply_event(plain_truth, event, medium)
        if isinstance(event, AllBlocksCleared):
            reported_plain.clear()
            continue
        expected = list(own)
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
def test_differences_followed_per_event_are_those_the_spec_finds_over_every_key(
    seed: int,
) -> None:
    fast, plain = differences_at_removals(
        random_stream(random.Random(seed), 400), IncrementalDifferences
    )
    assert fast == plain
    differences = [v for vs in fast for v in vs if v.property == "events-replay-index"]
    assert differences, "the stream shows no difference: it tests nothing"


def test_a_tracker_that_misses_stores_is_caught_by_the_comparison() -> None:
    caught = 0
    for seed in range(40):
        fast, plain = differences_at_removals(random_stream(random.Random(seed), 400), _NoStoreDirt)
        caught += fast != plain
    assert caught > 0


def test_a_removal_touches_its_residence_and_a_clear_none() -> None:
    assert touched(BlockRemoved(b"h", 1), "GPU") == [("GPU", 1, b"h")]
    assert touched(BlockStored((b"a", b"b"), None, 0, 4, 8), None) == [
        (None, 0, b"a"),
        (None, 0, b"b"),
    ]
    assert touched(AllBlocksCleared(), None) == []
