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
        keys=keys_part(state),
        primary=primary_part(state),
        index=index_part(state),
        peer=view_of(state.peer) if state.peer is not None else None,
    )


#: Parts of recent views, by the ids of the state fields they were read from (kept alive
#: with them, so an id is never another field's). A transition copies the fields it does
#: not change from the state before (``dataclasses.replace``), so a step that leaves the
#: keys alone reuses their part of the view instead of building it again. One table per
#: part; each forgets everything once it holds :data:`KEPT` parts.
_KEYS: dict[tuple[int, int], tuple[object, object, tuple[frozenset[bytes], ...]]] = {}
_PRIMARY: dict[int, tuple[object, tuple[bytes | None, ...]]] = {}
_INDEX: dict[int, tuple[object, tuple[tuple[bytes, tuple[int, ...]], ...]]] = {}
KEPT = 32


def keys_part(state: PoolState) -> tuple[frozenset[bytes], ...]:
    primary, extra = state.primary, state.extra
    kept = _KEYS.get((id(primary), id(extra)))
    if kept is not None and kept[0] is primary and kept[1] is extra:
        return kept[2]
    if len(_KEYS) >= KEPT:
        _KEYS.clear()
    part = tuple([frozenset(state.keys_of(b)) for b in range(state.num_blocks)])
    _KEYS[(id(primary), id(extra))] = (primary, extra, part)
    return part


def primary_part(state: PoolState) -> tuple[bytes | None, ...]:
    primary = state.primary
    kept = _PRIMARY.get(id(primary))
    if kept is not None and kept[0] is primary:
        return kept[1]
    if len(_PRIMARY) >= KEPT:
        _PRIMARY.clear()
    part = tuple([p.key if p is not None else None for p in primary])
    _PRIMARY[id(primary)] = (primary, part)
    return part


def index_part(state: PoolState) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
    cache = state.cache
    kept = _INDEX.get(id(cache))
    if kept is not None and kept[0] is cache:
        return kept[1]
    if len(_INDEX) >= KEPT:
        _INDEX.clear()
    part = tuple(sorted(cache.items()))
    _INDEX[id(cache)] = (cache, part)
    return part


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
