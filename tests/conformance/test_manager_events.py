"""KV events at the manager level: after every request action, the events the manager's
pool published (``take_events``) must be the spec's pool's, keys in the spec's terms.
vLLM 0.33.0's manager publishes the spec's events; a manager that drops its evictions'
``BlockRemoved`` is caught (ours in ``faulty_managers``, and vLLM's here)."""

from __future__ import annotations

from typing import Any

import pytest
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import (
    ManagerTarget,
    ManagerTargetFactory,
    RequestSetup,
)
from kvpool.conformance.targets.loading import load_manager
from kvpool.spec import BlockRemoved, Profile
from kvpool.spec.profile import get_profile

PROFILE = get_profile("vllm-0.33")


@pytest.fixture(scope="module")
def vllm_manager() -> ManagerTargetFactory:
    factory, _ = load_manager("vllm", "vllm==0.33.0")
    assert factory is not None
    return factory


def _counting(factory: ManagerTargetFactory, drop_removals: bool, seen: list[str]) -> Any:
    """``factory``'s targets, counting the events they hand over (dropping every
    ``BlockRemoved`` when asked)."""

    def make(setup: RequestSetup, profile: Profile) -> ManagerTarget:
        target = factory(setup, profile)
        take = target.take_events  # type: ignore[attr-defined]

        def take_events() -> Any:
            events = take()
            if events is not None:
                seen.extend(type(e).__name__ for e in events)
                if drop_removals:
                    events = tuple(e for e in events if not isinstance(e, BlockRemoved))
            return events

        target.take_events = take_events  # type: ignore[attr-defined]
        return target

    make.fit_setup = factory.fit_setup  # type: ignore[attr-defined]
    return make


def _run(factory: Any, seed: int) -> Any:
    return run_requests(
        manager_builder(factory, PROFILE), ON_MANAGER, max_examples=40, steps=30, seed=seed,
        max_blocks=8, max_findings=1, shrink_seconds=5.0,
    )  # fmt: skip


def test_the_release_manager_publishes_the_spec_events(
    vllm_manager: ManagerTargetFactory,
) -> None:
    seen: list[str] = []
    result = _run(_counting(vllm_manager, False, seen), seed=1)
    assert result.failure is None, result.failure
    # stores, removals and clears were all compared
    assert {"BlockStored", "BlockRemoved", "AllBlocksCleared"} <= set(seen), sorted(set(seen))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_release_manager_losing_its_removals_is_caught(
    vllm_manager: ManagerTargetFactory, seed: int
) -> None:
    """The stream is judged first: the count model's replay keeps a hash the pool no
    longer holds, named as the property it breaks."""
    result = _run(_counting(vllm_manager, True, []), seed=seed)
    assert result.failure is not None
    message = result.failure.message
    assert "property 'events-replay-index' broken for the count consumer" in message
    assert "in 0 block(s); the count consumer holds 1 copy" in message
