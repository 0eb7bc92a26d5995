"""The spec itself as a target: the suite's self-check (it must always conform)."""

from __future__ import annotations

from kvpool.spec import ALL_ACTIONS, Action, Observation, PoolConfig, PoolState, Profile, step
from kvpool.spec.state import initial_state

from ..engine.target import EVICT_FIRST, OBSERVABLES, PoolView


def view_of(state: PoolState) -> PoolView:
    """Everything the spec knows, as a :class:`PoolView`."""
    return PoolView(
        free_count=len(state.free_queue),
        free_queue=state.free_queue,
        ref_cnt=state.ref_cnt,
        keys=tuple(frozenset(state.keys_of(b)) for b in range(state.num_blocks)),
        primary=tuple(p.key if p is not None else None for p in state.primary),
        index=tuple(sorted(state.cache.items())),
        peer=view_of(state.peer) if state.peer is not None else None,
    )


class SpecTarget:
    """Runs the spec as if it were a pool."""

    name = "spec"
    operations = frozenset(a.operation for a in ALL_ACTIONS) | {EVICT_FIRST}
    observes = frozenset(OBSERVABLES) - {"structure"}

    def __init__(self, config: PoolConfig, profile: Profile) -> None:
        self.state = initial_state(config, profile)

    def apply(self, action: Action) -> Observation:
        self.state, observation = step(self.state, action)
        return observation

    def view(self) -> PoolView:
        return view_of(self.state)

    def structure_problems(self) -> list[str]:
        return []
