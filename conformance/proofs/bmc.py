"""Bounded model checking: the shortest run of a small pool on which a planted fault shows.

The pool has a concrete number of blocks and keys; each step chooses one action (and its
arguments) symbolically. The states of the run follow the correct encoded pool; at the
last step the faulty variant and the correct one are applied to the same state, and the
run is a counterexample when they disagree on anything a conformance run sees (ref counts,
the free set, the queue order at level ``order``, keys, the multimap, a result) or when the
faulty pool accepts an action the contract refuses (level ``robustness``). Depths are
tried 1, 2, ... so the first run found is a shortest one; a shorter one would have been
found at its own depth.

Without a fault, the same machinery checks the counting invariant (the free count is the
number of free blocks) and every invariant on every run up to the depth.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3  # type: ignore[import-untyped]
from kvpool.spec import (
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetNewBlocks,
    MoveBlockHashes,
    PoolConfig,
    ResetPrefixCache,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.actions import Action
from kvpool.spec.profile import SEED

from . import actions as A
from .encoding import Expr, State, carries, fresh_state, initial_state, invariant_at

#: The action kinds a step may take, in the order of the ``op`` variable.
OPS = ("get_new_blocks", "free1", "free2", "touch1", "touch2", "cache_full", "evict", "reset")
#: The further kinds the drift check's unrolling has (``Unrolling(extended=True)``); the
#: fault search keeps to :data:`OPS`, so its shortest counterexamples stay what they were.
EXTRA_OPS = (
    "unpin1",
    "unpin2",
    "free1_evict_first",
    "free2_evict_first",
    "cache_partial",
    "move",
)

#: BMC faults: name -> the level at which a conformance run sees it.
BMC_FAULTS: dict[str, str] = {
    "CachedToFront": "order",
    "TouchForgetsQueue": "safety",
    "StaleKeyAfterReuse": "safety",
    "DoubleFreeAccepted": "robustness",
    "ResetWhileHeld": "safety",
}


def key_hash(key: int) -> bytes:
    """The block hash standing for key id ``key`` in a trace."""
    return bytes([key]) * 8


@dataclass(frozen=True)
class StepVars:
    op: Expr
    x: Expr
    y: Expr
    n: Expr
    key: Expr
    #: cache_partial's num_tokens (1 or 2) and replace_existing_hashes (0 or 1)
    tok: Expr
    rep: Expr


@dataclass
class BmcResult:
    fault: str | None
    blocks: int
    depth_reached: int
    found: bool
    seconds: float
    actions: tuple[Action, ...] = ()
    level: str = "safety"
    unknown: bool = False


class Unrolling:
    """The run's states, one set of Z3 variables per step, constrained by the correct pool."""

    def __init__(self, blocks: int, keys: int, extended: bool = False) -> None:
        self.blocks = blocks
        self.keys = keys
        self.ops = OPS + EXTRA_OPS if extended else OPS
        self.n = z3.IntVal(blocks)
        self.caching = z3.BoolVal(True)
        self.solver = z3.Solver()
        self.states: list[State] = []
        self.steps: list[StepVars] = []
        self.made = 0
        first = self._materialize(initial_state(self.n, self.caching), 0)
        self.states.append(first)

    # -- states ---------------------------------------------------------------------------

    def block_ids(self) -> list[Expr]:
        return [z3.IntVal(b) for b in range(self.blocks)]

    def key_ids(self) -> list[Expr]:
        return [z3.IntVal(k) for k in range(self.keys + 1)]

    def _materialize(self, s: State, index: int) -> State:
        """Fresh variables equal to ``s`` at every concrete block and key."""
        t = fresh_state(f"s{index}", self.n, self.caching)
        eqs = [t.nfree == s.nfree, t.lo == s.lo, t.hi == s.hi]
        for b in self.block_ids():
            eqs += [
                t.ref(b) == s.ref(b),
                t.free(b) == s.free(b),
                t.hasp(b) == s.hasp(b),
                t.pkey(b) == s.pkey(b),
                t.ptok(b) == s.ptok(b),
                t.wat(b) == s.wat(b),
                t.rank(b) == s.rank(b),
            ]
            for k in self.key_ids():
                eqs += [t.extra(b, k) == s.extra(b, k), t.mm(k, b) == s.mm(k, b)]
        self.solver.add(*eqs)
        return t

    def step_vars(self, index: int) -> StepVars:
        """The action variables of step ``index`` (a fresh set on every call)."""
        self.made += 1
        tag = f"{index}" if self.made == index + 1 else f"{index}.{self.made}"
        names = ("op", "x", "y", "n", "key", "tok", "rep")
        v = StepVars(*(z3.Int(f"{name}{tag}") for name in names))
        self.solver.add(
            v.tok >= 1,
            v.tok <= 2,
            v.rep >= 0,
            v.rep <= 1,
            v.op >= 0,
            v.op < len(self.ops),
            v.x >= 0,
            v.x < self.blocks,
            v.y >= 0,
            v.y < self.blocks,
            v.n >= 0,
            v.n < self.blocks,
            v.key >= 1,
            v.key <= self.keys,
        )
        return v

    # -- one step -------------------------------------------------------------------------

    def choice(
        self, s: State, v: StepVars, fault: str | None
    ) -> list[tuple[Expr, Expr, State, Expr]]:
        """Per kind: (chosen, allowed, state after, result) for the action ``v`` on ``s``."""
        blocks = self.block_ids()

        def earlier(b: Expr) -> Expr:
            return z3.Sum([z3.If(z3.And(s.free(o), s.rank(o) < s.rank(b)), 1, 0) for o in blocks])

        def sel(b: Expr) -> Expr:
            out = z3.BoolVal(False)
            for o in blocks:
                out = z3.If(b == o, z3.And(s.free(o), earlier(o) < v.n), out)
            return out

        profile = SEED
        front = {
            "unkeyed_front": profile.unkeyed_free_to_front,
            "caching_off_front": profile.caching_off_free_to_front,
        }
        false = z3.BoolVal(False)
        options: list[tuple[Expr, A.Step, Expr]] = []
        options.append(
            (v.op == 0, A.get_new_blocks(s, sel, v.n, _own(fault, "get_new_blocks")), false)
        )
        for i, args in ((1, [v.x]), (2, [v.x, v.y])):
            step = A.free_blocks(s, A.counts_of(args), _own(fault, "free_blocks"), args, **front)
            options.append((v.op == i, step, false))
        for i, args in ((3, [v.x]), (4, [v.x, v.y])):
            step = A.touch(s, A.counts_of(args), _own(fault, "touch"), args)
            options.append((v.op == i, step, false))
        options.append(
            (
                v.op == 5,
                A.cache_full_blocks(
                    s,
                    lambda b: b == v.x,
                    lambda b: v.key,
                    lambda b: z3.IntVal(1),
                    _own(fault, "cache_full_blocks"),
                ),
                false,
            )
        )
        options.append(
            (v.op == 6, A.evict_blocks(s, lambda b: b == v.x, _own(fault, "evict_blocks")), false)
        )
        reset, idle = A.reset_prefix_cache(s, _own(fault, "reset_prefix_cache"))
        options.append((v.op == 7, reset, idle))
        if len(self.ops) > len(OPS):
            options += self._extra_options(s, v, fault, front)
        out = []
        for chosen, step, result in options:
            allowed = z3.And(step.pre, *(step.pre_at(b, k) for b in blocks for k in self.key_ids()))
            out.append((chosen, allowed, step.post, result))
        return out

    def _extra_options(
        self, s: State, v: StepVars, fault: str | None, front: dict[str, bool]
    ) -> list[tuple[Expr, A.Step, Expr]]:
        """The :data:`EXTRA_OPS` steps (op numbers after :data:`OPS`)."""
        false = z3.BoolVal(False)
        base = len(OPS)
        out: list[tuple[Expr, A.Step, Expr]] = []
        for i, args in ((0, [v.x]), (1, [v.x, v.y])):
            step = A.unpin_blocks(s, A.counts_of(args), _own(fault, "unpin_blocks"), args)
            out.append((v.op == base + i, step, false))
        for i, args in ((2, [v.x]), (3, [v.x, v.y])):
            step = A.free_blocks(
                s, A.counts_of(args), _own(fault, "free_blocks"), args, evict_first=True, **front
            )
            out.append((v.op == base + i, step, false))
        partial = A.cache_partial_block(
            s, v.x, v.key, v.tok, v.rep == 1, _own(fault, "cache_partial_block")
        )
        out.append((v.op == base + 4, partial, false))
        move = A.move_block_hashes(s, v.x, v.y, _own(fault, "move_block_hashes"))
        out.append((v.op == base + 5, move, false))
        return out

    def advance(self, fault: str | None = None) -> None:
        """Add one more step of the correct pool (the action in contract)."""
        index = len(self.steps)
        s = self.states[-1]
        v = self.step_vars(index)
        self.steps.append(v)
        options = self.choice(s, v, None)
        self.solver.add(z3.Or(*(z3.And(c, ok) for c, ok, _, _ in options)))
        merged = _merge(
            s, [(c, post) for c, _, post, _ in options], self.block_ids(), self.key_ids()
        )
        self.states.append(self._materialize(merged, index + 1))

    def differs(self, a: State, b: State, level: str) -> Expr:
        """The two states differ in what a conformance run at ``level`` observes."""
        diffs = []
        blocks = self.block_ids()
        for x in blocks[1:]:
            diffs += [
                a.ref(x) != b.ref(x),
                a.free(x) != b.free(x),
                a.hasp(x) != b.hasp(x),
                z3.And(a.hasp(x), a.pkey(x) != b.pkey(x)),
            ]
            for k in self.key_ids():
                diffs += [a.extra(x, k) != b.extra(x, k), a.mm(k, x) != b.mm(k, x)]
        diffs.append(a.nfree != b.nfree)
        if level == "order":
            for x in blocks[1:]:
                for y in blocks[1:]:
                    if x.as_long() < y.as_long():
                        both = z3.And(a.free(x), a.free(y), b.free(x), b.free(y))
                        diffs.append(
                            z3.And(both, (a.rank(x) < a.rank(y)) != (b.rank(x) < b.rank(y)))
                        )
        return z3.Or(*diffs)

    def invariant_broken(self, s: State) -> Expr:
        """Some invariant fails, or the free count is not the number of free blocks."""
        blocks = self.block_ids()
        count = z3.Sum([z3.If(s.free(b), 1, 0) for b in blocks])
        broken = [s.nfree != count]
        for b in blocks:
            for k in self.key_ids():
                broken.append(z3.Not(invariant_at(s, b, k)))
        return z3.Or(*broken)


def _own(fault: str | None, action: str) -> str | None:
    """``fault`` if it is a fault of ``action``."""
    if fault is None or fault not in A.FAULTS:
        return None
    return fault if A.FAULTS[fault].action == action else None


def _merge(
    s: State, options: list[tuple[Expr, State]], blocks: list[Expr], keys: list[Expr]
) -> State:
    """The state after whichever option is chosen (the last one is the default)."""

    def pick(get: Callable[[State], Expr]) -> Expr:
        value = get(options[-1][1])
        for chosen, post in reversed(options[:-1]):
            value = z3.If(chosen, get(post), value)
        return value

    return s.with_(
        ref=lambda b: pick(lambda t: t.ref(b)),
        free=lambda b: pick(lambda t: t.free(b)),
        nfree=pick(lambda t: t.nfree),
        hasp=lambda b: pick(lambda t: t.hasp(b)),
        pkey=lambda b: pick(lambda t: t.pkey(b)),
        ptok=lambda b: pick(lambda t: t.ptok(b)),
        extra=lambda b, k: pick(lambda t: t.extra(b, k)),
        mm=lambda k, b: pick(lambda t: t.mm(k, b)),
        wat=lambda b: pick(lambda t: t.wat(b)),
        rank=lambda b: pick(lambda t: t.rank(b)),
        lo=pick(lambda t: t.lo),
        hi=pick(lambda t: t.hi),
    )


def decode_action(model: Any, v: StepVars) -> Action:
    """The spec action a step of the model took."""

    def val(e: Expr) -> int:
        return int(model.eval(e, model_completion=True).as_long())

    op, x, y, n, key = OPS[val(v.op)], val(v.x), val(v.y), val(v.n), val(v.key)
    if op == "get_new_blocks":
        return GetNewBlocks(n)
    if op == "free1":
        return FreeBlocks((x,))
    if op == "free2":
        return FreeBlocks((x, y))
    if op == "touch1":
        return Touch((x,))
    if op == "touch2":
        return Touch((x, y))
    if op == "cache_full":
        return CacheFullBlocks((key_hash(key),), (x,), 0, 1, 1, 0)
    if op == "evict":
        return EvictBlocks((x,))
    return ResetPrefixCache()


def pool_config(blocks: int) -> PoolConfig:
    """The pool a counterexample runs on (caching on, events off, one token per block)."""
    return PoolConfig(
        num_gpu_blocks=blocks, enable_caching=True, hash_block_size=1, enable_kv_cache_events=False
    )


def search(
    fault: str | None,
    blocks: int = 4,
    depth: int = 8,
    keys: int = 2,
    timeout: float = 60.0,
    progress: Callable[[int, float], None] | None = None,
) -> BmcResult:
    """Depth by depth, the shortest run on which ``fault`` shows (or, with no fault, on
    which an invariant or the free count breaks)."""
    start = time.perf_counter()
    level = BMC_FAULTS.get(fault, "safety") if fault else "safety"
    run = Unrolling(blocks, keys)
    run.solver.set("timeout", max(1, int(timeout * 1000)))
    for d in range(1, depth + 1):
        s = run.states[-1]
        if fault is None:
            run.advance()
            bad = run.invariant_broken(run.states[-1])
        else:
            v = run.step_vars(d - 1)
            good = run.choice(s, v, None)
            bad_options = run.choice(s, v, fault)
            cases = []
            for (chosen, ok, post, res), (_, ok_f, post_f, res_f) in zip(
                good, bad_options, strict=True
            ):
                accepted_wrongly = z3.And(z3.Not(ok), ok_f)
                if level != "robustness":
                    accepted_wrongly = z3.BoolVal(False)
                diverges = z3.And(ok, z3.Or(run.differs(post, post_f, level), res != res_f))
                cases.append(z3.And(chosen, z3.Or(diverges, accepted_wrongly)))
            bad = z3.Or(*cases)
        run.solver.push()
        run.solver.add(bad)
        answer = run.solver.check()
        if progress is not None:
            progress(d, time.perf_counter() - start)
        if answer == z3.sat:
            model = run.solver.model()
            steps = run.steps if fault is None else [*run.steps, v]
            acts = tuple(decode_action(model, sv) for sv in steps)
            return BmcResult(fault, blocks, d, True, time.perf_counter() - start, acts, level)
        run.solver.pop()
        if answer == z3.unknown:
            return BmcResult(
                fault, blocks, d, False, time.perf_counter() - start, (), level, unknown=True
            )
        if fault is not None:
            # the correct pool takes this step before the next depth is tried
            options = run.choice(s, v, None)
            run.steps.append(v)
            run.solver.add(z3.Or(*(z3.And(c, ok) for c, ok, _, _ in options)))
            merged = _merge(
                s, [(c, post) for c, _, post, _ in options], run.block_ids(), run.key_ids()
            )
            run.states.append(run._materialize(merged, d))
    return BmcResult(fault, blocks, depth, False, time.perf_counter() - start, (), level)


# --- the encoding evaluated on concrete actions (the drift check) --------------------------


@dataclass(frozen=True)
class ConcreteState:
    """What the encoding says after a concrete action, in the spec's vocabulary."""

    allowed: bool
    ref_cnt: tuple[int, ...]
    free_queue: tuple[int, ...]
    #: block -> its primary key id (blocks with a key only)
    primary: dict[int, int]
    #: key id -> the blocks the multimap has under it
    cache: dict[int, frozenset[int]]
    nfree: int
    #: block -> every key id it carries (primary and extra; blocks with a key only)
    keys: dict[int, frozenset[int]]
    #: the blocks with a reuse watcher
    watchers: frozenset[int]


Coded = tuple[int, int, int, int, int, int, int]


def encode_action(action: Action, keys: int) -> Coded | None:
    """``(op, x, y, n, key, tok, rep)`` of a spec action (``op`` indexes
    ``OPS + EXTRA_OPS``), or ``None`` if the bounded pool has no such step."""
    hashes = {key_hash(k): k for k in range(1, keys + 1)}
    base = len(OPS)

    def pair(blocks: tuple[int, ...], one: int, two: int) -> Coded | None:
        if len(blocks) == 1:
            return one, blocks[0], 0, 0, 1, 1, 0
        if len(blocks) == 2:
            return two, blocks[0], blocks[1], 0, 1, 1, 0
        return None

    if isinstance(action, GetNewBlocks):
        return 0, 0, 0, action.num_blocks, 1, 1, 0
    if isinstance(action, FreeBlocks) and not action.foreign:
        if action.evict_first:
            return pair(action.blocks, base + 2, base + 3)
        return pair(action.blocks, 1, 2)
    if isinstance(action, Touch):
        return pair(action.blocks, 3, 4)
    if isinstance(action, UnpinBlocks):
        return pair(action.blocks, base, base + 1)
    if (
        isinstance(action, CacheFullBlocks)
        and len(action.blocks) == 1
        and action.block_hashes[:1] == action.block_hashes
        and action.block_hashes[0] in hashes
        and (action.num_cached_blocks, action.num_full_blocks, action.block_size) == (0, 1, 1)
    ):
        return 5, action.blocks[0], 0, 0, hashes[action.block_hashes[0]], 1, 0
    if (
        isinstance(action, CachePartialBlock)
        and action.group_id == 0
        and action.num_tokens in (1, 2)
        and len(action.block_hashes) == action.num_tokens
        and action.block_hashes[-1] in hashes
    ):
        key = hashes[action.block_hashes[-1]]
        rep = int(action.replace_existing_hashes)
        return base + 4, action.block, 0, 0, key, action.num_tokens, rep
    if isinstance(action, MoveBlockHashes):
        return base + 5, action.src, action.dst, 0, 1, 1, 0
    if isinstance(action, EvictBlocks) and len(action.block_ids) == 1:
        return 6, action.block_ids[0], 0, 0, 1, 1, 0
    if isinstance(action, ResetPrefixCache):
        return 7, 0, 0, 0, 1, 1, 0
    return None


def concrete_run(blocks: int, keys: int, actions: list[Action]) -> list[ConcreteState]:
    """Run ``actions`` through the encoding, one Z3 query per step: whether the encoded
    contract allows it, and the state after (unchanged when refused)."""
    run = Unrolling(blocks, keys, extended=True)
    out = []
    for action in actions:
        coded = encode_action(action, keys)
        if coded is None:
            raise ValueError(f"the bounded pool has no step for {action}")
        s = run.states[-1]
        v = run.step_vars(len(run.steps))
        pinned = [
            var == value
            for var, value in zip((v.op, v.x, v.y, v.n, v.key, v.tok, v.rep), coded, strict=True)
        ]
        options = run.choice(s, v, None)
        allowed_expr = z3.Or(*(z3.And(c, ok) for c, ok, _, _ in options))
        run.solver.push()
        run.solver.add(*pinned, allowed_expr)
        allowed = run.solver.check() == z3.sat
        run.solver.pop()
        if allowed:
            run.steps.append(v)
            run.solver.add(*pinned, allowed_expr)
            merged = _merge(
                s, [(c, post) for c, _, post, _ in options], run.block_ids(), run.key_ids()
            )
            run.states.append(run._materialize(merged, len(run.steps)))
        else:
            run.solver.add(*pinned)  # the step variables exist; the state stays
        assert run.solver.check() == z3.sat
        out.append(_read(run, run.solver.model(), run.states[-1], allowed))
    return out


def _read(run: Unrolling, model: Any, s: State, allowed: bool) -> ConcreteState:
    def val(e: Expr) -> Any:
        v = model.eval(e, model_completion=True)
        return z3.is_true(v) if z3.is_bool(v) else v.as_long()

    ids = range(run.blocks)
    free = sorted((val(s.rank(b)), b) for b in ids if val(s.free(b)))
    cache: dict[int, frozenset[int]] = {}
    for k in range(1, run.keys + 1):
        under = frozenset(b for b in ids if val(s.mm(k, b)))
        if under:
            cache[k] = under
    keys: dict[int, frozenset[int]] = {}
    for b in ids:
        carried = frozenset(k for k in range(1, run.keys + 1) if val(carries(s, b, k)))
        if carried:
            keys[b] = carried
    return ConcreteState(
        allowed,
        tuple(val(s.ref(b)) for b in ids),
        tuple(b for _, b in free),
        {b: val(s.pkey(b)) for b in ids if val(s.hasp(b))},
        cache,
        val(s.nfree),
        keys,
        frozenset(b for b in ids if val(s.wat(b))),
    )
