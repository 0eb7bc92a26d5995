"""The spec itself as a target: the suite's self-check (it must always conform)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from kvpool.spec import ALL_ACTIONS, Action, Observation, PoolConfig, PoolState, Profile, step
from kvpool.spec.state import initial_state

from ...machines.pool.target import EVICT_FIRST, OBSERVABLES, PoolView


def view_of(state: PoolState) -> PoolView:
    """Everything the spec knows, as a :class:`PoolView`."""
    return PoolView(
        free_count=len(state.free_queue),
        free_queue=state.free_queue,
        ref_cnt=state.ref_cnt,
        keys=keys_part(state),
        primary=primary_part(state),
        index=index_part(state),
        peer=view_of(state.peer) if state.peer is not None else None,
    )


#: Parts of recent views, by the part's name and the state fields it was read from (kept
#: alive with it, so an id is never another field's). A transition copies the fields it
#: does not change from the state before (``dataclasses.replace``), so a step that leaves
#: the keys alone reuses their part of the view instead of building it again. It forgets
#: everything once it holds :data:`KEPT` parts.
_PARTS: dict[tuple[str, int, int], tuple[object, object, Any]] = {}
KEPT = 64
T = TypeVar("T")


def _part(
    name: str, first: object, second: object, build: Callable[[PoolState], T], state: PoolState
) -> T:
    """``build(state)``, or the part built before from the same ``first`` and ``second``."""
    key = (name, id(first), id(second))
    kept = _PARTS.get(key)
    if kept is not None and kept[0] is first and kept[1] is second:
        return cast(T, kept[2])
    if len(_PARTS) >= KEPT:
        _PARTS.clear()
    part = build(state)
    _PARTS[key] = (first, second, part)
    return part


def _build_keys(state: PoolState) -> tuple[frozenset[bytes], ...]:
    return tuple([frozenset(state.keys_of(b)) for b in range(state.num_blocks)])


def _build_primary(state: PoolState) -> tuple[bytes | None, ...]:
    return tuple([p.key if p is not None else None for p in state.primary])


def _build_index(state: PoolState) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
    return tuple(sorted(state.cache.items()))


def keys_part(state: PoolState) -> tuple[frozenset[bytes], ...]:
    """Every block's keys in ``state``, by id."""
    return _part("keys", state.primary, state.extra, _build_keys, state)


def primary_part(state: PoolState) -> tuple[bytes | None, ...]:
    """Every block's primary key in ``state`` (``None``: unkeyed), by id."""
    return _part("primary", state.primary, None, _build_primary, state)


def index_part(state: PoolState) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
    """The prefix-cache index of ``state``, key by key in order."""
    return _part("index", state.cache, None, _build_index, state)


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
