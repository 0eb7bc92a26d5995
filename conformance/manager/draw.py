"""Drawing request actions from the spec manager's current state.

Prompts start with a shared "system prompt" more often than not and use a tiny alphabet,
so requests hit each other's blocks, partial entries get hit, and pools run short (which
brings eviction, refused admissions and preemption). Every drawn action is inside the
scheduler's contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st
from kvpool.spec import PoolConfig
from kvpool.spec.manager import (
    FULL_ATTENTION,
    Admit,
    Append,
    Compute,
    EvictCached,
    Finish,
    KVGroup,
    ManagerConfig,
    ManagerState,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
)

from .target import RequestSetup

#: The shared start of most prompts.
SYSTEM_PROMPT = (7, 1, 7, 2, 7, 3, 7, 4, 7, 5, 7, 6)
SALTS = (None, None, None, "tenant-b")
#: KV-cache group layouts: one or two full-attention groups, a hybrid, a sliding window.
LAYOUTS: tuple[tuple[KVGroup, ...], ...] = (
    (FULL_ATTENTION,),
    (FULL_ATTENTION,),
    (FULL_ATTENTION, FULL_ATTENTION),
    (FULL_ATTENTION, KVGroup(sliding_window_blocks=1)),
    (KVGroup(sliding_window_blocks=2),),
)


@st.composite
def setups(draw: st.DrawFn, max_blocks: int) -> RequestSetup:
    """A small manager over a small pool."""
    hbs = draw(st.sampled_from([1, 2]), label="hash_block_size")
    block_size = hbs * draw(st.sampled_from([2, 2, 3]), label="hash blocks per block")
    groups = draw(st.sampled_from(LAYOUTS), label="groups")
    pool = PoolConfig(
        num_gpu_blocks=draw(st.integers(5, max(5, max_blocks)), label="num_gpu_blocks"),
        enable_caching=draw(st.sampled_from([True, True, True, False]), label="caching"),
        hash_block_size=hbs,
        enable_kv_cache_events=draw(st.booleans(), label="events"),
    )
    return RequestSetup(ManagerConfig(block_size, groups), pool)


@dataclass
class RequestContext:
    """What the drawing remembers beyond the spec state: the next request id, and the
    blocks that were the first of some request's table (to evict a prefix's head)."""

    next_id: int = 1
    #: Request id -> the first block of each of its tables, when it last had tables.
    heads: dict[str, set[int]] = field(default_factory=dict)

    def new_id(self) -> str:
        rid = f"r{self.next_id}"
        self.next_id += 1
        return rid

    def remember(self, state: ManagerState) -> None:
        """Note the first block of every running request's tables."""
        for rid, r in state.requests.items():
            if r.running:
                self.heads[rid] = {t[0] for t in r.tables if t and t[0]}


def running(state: ManagerState) -> list[str]:
    return sorted(rid for rid, r in state.requests.items() if r.running)


def preempted(state: ManagerState) -> list[str]:
    return sorted(rid for rid, r in state.requests.items() if not r.running)


def prompt(data: st.DataObject) -> tuple[int, ...]:
    shared = data.draw(st.sampled_from([0, 3, 4, 6, 7]), label="shared prefix")
    rest = data.draw(st.lists(st.sampled_from([1, 2]), max_size=4), label="own tokens")
    tokens = SYSTEM_PROMPT[:shared] + tuple(rest)
    return tokens or (1,)


Drawer = Callable[[st.DataObject, ManagerState, RequestContext], RequestAction]


def draw_admit(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    salt = data.draw(st.sampled_from(SALTS), label="salt")
    return Admit(ctx.new_id(), prompt(data), salt)


def draw_append(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    rid = data.draw(st.sampled_from(running(state)), label="request")
    tokens = data.draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=3), label="tokens")
    return Append(rid, tuple(tokens))


def draw_compute(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    rid = data.draw(st.sampled_from(running(state)), label="request")
    partial = not state.config.has_sliding_window and data.draw(st.booleans(), label="partial")
    return Compute(rid, cache_partial=partial)


def draw_preempt(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return Preempt(data.draw(st.sampled_from(running(state)), label="request"))


def draw_resume(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return Resume(data.draw(st.sampled_from(preempted(state)), label="request"))


def draw_finish(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return Finish(data.draw(st.sampled_from(sorted(state.requests)), label="request"))


def draw_reset(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    return ResetCache()


def evictable(state: ManagerState) -> list[int]:
    """Blocks no request holds that were written (so likely still cached): a prefix's head
    among them leaves its later blocks cached behind a miss."""
    return sorted(set(state.contents) - state.held_blocks() - {0})


def draw_evict(data: st.DataObject, state: ManagerState, ctx: RequestContext) -> RequestAction:
    """Half the time a block that was the head of a request's table, a preempted request's
    first (its resume looks the prefix up again), else the lowest (a fresh pool hands
    blocks out in id order): its loss must end every hit on that prefix there, although
    the prefix's later blocks stay cached."""
    candidates = evictable(state)
    if data.draw(st.booleans(), label="a head"):
        waiting = {b for rid in preempted(state) for b in ctx.heads.get(rid, ())}
        known = {b for blocks in ctx.heads.values() for b in blocks}
        heads = [b for b in candidates if b in waiting] or [b for b in candidates if b in known]
        heads = heads or candidates[:1]
        return EvictCached(block_ids=(data.draw(st.sampled_from(heads), label="head"),))
    blocks = data.draw(
        st.lists(st.sampled_from(candidates), min_size=1, max_size=2, unique=True),
        label="blocks",
    )
    return EvictCached(block_ids=tuple(blocks))


def busy(state: ManagerState) -> bool:
    """Enough requests live that admitting more mostly meets a full pool."""
    return len(state.requests) >= 3


#: operation -> (weight in this state, 0 when it cannot be drawn; drawer)
DRAWERS: dict[str, tuple[Callable[[ManagerState], int], Drawer]] = {
    "admit": (lambda s: 1 if busy(s) else 4, draw_admit),
    "append": (lambda s: 3 if running(s) else 0, draw_append),
    "compute": (lambda s: 6 if running(s) else 0, draw_compute),
    "preempt": (lambda s: 1 if running(s) else 0, draw_preempt),
    "resume": (lambda s: 2 if preempted(s) else 0, draw_resume),
    "finish": (lambda s: (4 if busy(s) else 2) if s.requests else 0, draw_finish),
    "reset_cache": (lambda s: 1, draw_reset),
    "evict_cached": (lambda s: 3 if evictable(s) else 0, draw_evict),
}
