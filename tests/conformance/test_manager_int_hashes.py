"""The manager adapter reads a release's 64-bit integer event hashes through the pool
adapter's one mapping (:mod:`kvpool.conformance.engines.vllm_api.int_hashes`).

A release's own ``KVCacheManager`` runs with the release's default: events publish the low
64 bits of each hash. The manager's events are judged as the bytes they stand for and
pass; the mapping broken in the one place it is written (the fine hashes forgotten, so an
integer reads as its own eight bytes) is caught by the manager run as a stream finding, on
vLLM 0.33.0, on Aphrodite 0.24.1 and on vLLM 0.18.0, whose events name no group: there
each event gets the group of the keys the manager's call changed (before, the manager's
events of such a release were not judged at all), and that tagging broken is caught too.
"""

from __future__ import annotations

from typing import Any

import pytest
from kvpool.conformance.engines.vllm_api.int_hashes import IntHashes
from kvpool.conformance.machines.pool.runner import LevelResult
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import (
    ManagerTarget,
    ManagerTargetFactory,
    RequestSetup,
)
from kvpool.conformance.targets.loading import load_manager
from kvpool.spec import Profile
from kvpool.spec.profile import get_profile

#: The release's manager and the profile that judges it.
MANAGERS = {
    "vllm==0.33.0": ("vllm", "vllm-0.33"),
    "aphrodite==0.24.1": ("aphrodite", "vllm-0.30"),
    "vllm==0.18.0": ("vllm", "vllm-0.14"),
}


def _recording(factory: ManagerTargetFactory, raw_hashes: list[object]) -> Any:
    """``factory``'s targets, keeping every hash their release's events published raw."""

    def make(setup: RequestSetup, profile: Profile) -> ManagerTarget:
        target = factory(setup, profile)
        manager = target.manager  # type: ignore[attr-defined]
        take = manager.take_events

        def take_events() -> Any:
            events = take()
            for event in events:
                raw_hashes.extend(getattr(event, "block_hashes", ()))
            return events

        manager.take_events = take_events
        return target

    make.fit_setup = factory.fit_setup  # type: ignore[attr-defined]
    return make


def _run(target: str, seed: int, raw_hashes: list[object]) -> LevelResult:
    word, profile = MANAGERS[target]
    factory, _ = load_manager(word, target)
    assert factory is not None
    return run_requests(
        manager_builder(_recording(factory, raw_hashes), get_profile(profile)), ON_MANAGER,
        max_examples=40, steps=30, seed=seed, max_blocks=8, max_findings=1, shrink_seconds=5.0,
    )  # fmt: skip


@pytest.mark.parametrize("target", sorted(MANAGERS))
def test_the_managers_integer_hashes_are_judged_as_the_bytes_they_stand_for(target: str) -> None:
    raw: list[object] = []
    result = _run(target, 1, raw)
    assert result.failure is None, result.failure
    assert raw and all(isinstance(h, int) for h in raw), raw[:3]  # integers were read


@pytest.mark.parametrize("target", sorted(MANAGERS))
def test_a_wrong_mapping_is_caught_by_the_manager_run(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the one mapping broken: no fine hash remembered, every integer read as its 8 bytes
    monkeypatch.setattr(IntHashes, "remember", lambda *_: None)
    caught = []
    for seed in (1, 2, 3):
        failure = _run(target, seed, []).failure
        if failure is not None:
            assert (
                "property 'events-replay-index' broken for the count consumer" in failure.message
            ), failure.message
            caught.append(seed)
    assert caught == [1, 2, 3], caught


def test_a_wrong_group_tagging_is_caught_on_a_release_whose_events_name_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvpool.conformance.engines.vllm_api import events

    # every event of vLLM 0.18.0's manager tagged as group 0, whichever group changed
    monkeypatch.setattr(events, "_take_group", lambda *_, **__: None)
    caught = []
    for seed in (1, 2, 3):
        failure = _run("vllm==0.18.0", seed, []).failure
        if failure is not None:
            assert (
                "property 'events-replay-index' broken for the count consumer" in failure.message
            ), failure.message
            caught.append(seed)
    assert caught == [1, 2, 3], caught
