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
    EvictBlocks,
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    ResetPrefixCache,
    Touch,
)
from kvpool.spec.actions import Action
from kvpool.spec.profile import SEED

from . import actions as A
from .encoding import Expr, State, fresh_state, initial_state, invariant_at

#: The action kinds a step may take, in the order of the ``op`` variable.
OPS = ("get_new_blocks", "free1", "free2", "touch1", "touch2", "cache_full", "evict", "reset")
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

    def __init__(self, blocks: int, keys: int) -> None:
        self.blocks = blocks
        self.keys = keys
        self.ops = OPS
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
        names = ("op", "x", "y", "n", "key")
        v = StepVars(*(z3.Int(f"{name}{tag}") for name in names))
        self.solver.add(
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
        out = []
        for chosen, step, result in options:
            allowed = z3.And(step.pre, *(step.pre_at(b, k) for b in blocks for k in self.key_ids()))
            out.append((chosen, allowed, step.post, result))
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
