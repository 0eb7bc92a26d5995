"""The spec itself as a target: the suite's self-check (it must always conform)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from kvpool.spec import ALL_ACTIONS, Action, Observation, PoolConfig, PoolState, Profile, step
from kvpool.spec.state import initial_state

from ..engine.target import EVICT_FIRST, OBSERVABLES, PoolView


def view_of(state: PoolState) -> PoolView:
    """Everything the spec knows, as a :class:`PoolView`."""
    return PoolView(
        free_count=len(state.free_queue),
        free_queue=state.free_queue,
        ref_cnt=state.ref_cnt,
        keys=_keys(state),
        primary=_primary(state),
        index=_index(state),
        peer=view_of(state.peer) if state.peer is not None else None,
    )


#: Parts of recent views, by the state fields they were read from (kept alive with them,
#: so an id is never another field's). A transition copies the fields it does not change
#: from the state before (``dataclasses.replace``), so a step that leaves the keys alone
#: reuses their part of the view instead of building it again.
_PARTS: dict[tuple[str, int, int], tuple[object, object, Any]] = {}
T = TypeVar("T")


def _part(name: str, first: object, second: object, build: Callable[[], T]) -> T:
    key = (name, id(first), id(second))
    kept = _PARTS.get(key)
    if kept is not None and kept[0] is first and kept[1] is second:
        return cast(T, kept[2])
    if len(_PARTS) >= 64:
        _PARTS.clear()
    part = build()
    _PARTS[key] = (first, second, part)
    return part


def _keys(state: PoolState) -> tuple[frozenset[bytes], ...]:
    return _part(
        "keys",
        state.primary,
        state.extra,
        lambda: tuple(frozenset(state.keys_of(b)) for b in range(state.num_blocks)),
    )


def _primary(state: PoolState) -> tuple[bytes | None, ...]:
    return _part(
        "primary",
        state.primary,
        None,
        lambda: tuple(p.key if p is not None else None for p in state.primary),
    )


def _index(state: PoolState) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
    return _part("index", state.cache, None, lambda: tuple(sorted(state.cache.items())))


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
