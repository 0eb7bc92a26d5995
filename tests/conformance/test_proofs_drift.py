"""The Z3 encoding and the executable spec must not drift: random action sequences of every
spec action run through ``kvpool.spec.step`` and through the encoded transitions
(``kvpool.conformance.tools.proofs.drift``: the functions the proofs are about, evaluated on
concrete states) agree on the contract's verdict, on every state field the encoding has
and on every answer, step by step.

Covered: all fifteen actions of ``kvpool.spec.actions`` (the seed profile), on four
pools: 6 and 8 blocks with a 3-block peer and ``hash_block_size`` 2 (block sizes 2, 4 and
6: one to three hash blocks per block), 7 blocks with ``hash_block_size`` 1 (block sizes 1
to 3), and 5 blocks with caching off and a 3-block peer. ``cache_full_blocks`` takes
tables of up to four blocks with earlier cached blocks, masks, the null block and
duplicates; ``free_blocks`` takes foreign blocks; two KV-cache groups; events on in three
pools. Compared after each step: the verdict; ref counts, the free queue in order and its
length, each block's primary key and its token count, its extra keys, the multimap (as
sets: the order of duplicates under a key is not encoded), which blocks have a reuse
watcher, for the pool and its peer; the blocks handed out, the watchers fired, the answers
of the queries and of ``reset_prefix_cache``; and at the end of each run, every encoded
invariant at every block and key of both encoded pools. Events themselves and watcher
names are not encoded, so not compared.

``KVPOOL_DRIFT_SEEDS=N`` (and ``KVPOOL_DRIFT_STEPS``) run a longer campaign;
``KVPOOL_DRIFT_SPREAD=1`` tries each planted drift on every run and prints how many catch it.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import random
import shutil
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
import z3  # type: ignore[import-untyped]
from kvpool.conformance.tools import proofs
from kvpool.conformance.tools.proofs.drift import Encoded, Outcome, Values
from kvpool.spec import PoolConfig, initial_state, step, violation
from kvpool.spec.actions import (
    ALL_ACTIONS,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.observation import Observation
from kvpool.spec.state import PoolState

CONFIGS = (
    PoolConfig(6, enable_caching=True, hash_block_size=2, peer_blocks=3),
    PoolConfig(7, enable_caching=True, hash_block_size=1),
    PoolConfig(
        8, enable_caching=True, hash_block_size=2, peer_blocks=3, enable_kv_cache_events=False
    ),
    PoolConfig(5, enable_caching=False, hash_block_size=1, peer_blocks=3),
)
CAMPAIGN = os.environ.get("KVPOOL_DRIFT_SEEDS")
SEEDS = range(int(CAMPAIGN) if CAMPAIGN else 16)
STEPS = int(os.environ.get("KVPOOL_DRIFT_STEPS", "60" if CAMPAIGN else "50"))
#: Run a planted drift on every run and print how many catch it (else: stop at three).
SPREAD = bool(CAMPAIGN) or os.environ.get("KVPOOL_DRIFT_SPREAD") == "1"


def chain(request: int, length: int = 12) -> tuple[bytes, ...]:
    """A request's fine hashes: requests 0 and 1 share their first three, 2 shares none."""
    owner = [0 if request == 1 and i < 3 else request for i in range(length)]
    return tuple(bytes([owner[i] + 1, i + 1]) * 4 for i in range(length))


CHAINS = tuple(chain(r) for r in range(3))
#: How often each action is drawn: the ones that build up state (blocks held, keys)
#: more often than the ones that clear it (evict, reset) or only read it.
WEIGHTS = {
    "GetNewBlocks": 3.0,
    "PeerGetNewBlocks": 1.0,
    "FreeBlocks": 3.0,
    "Touch": 2.0,
    "UnpinBlocks": 1.0,
    "CacheFullBlocks": 4.0,
    "CachePartialBlock": 3.0,
    "GetCachedBlock": 1.5,
    "EvictBlocks": 1.0,
    "MoveBlockHashes": 1.5,
    "ResetPrefixCache": 1.0,
    "IsBlockWritable": 1.0,
    "GetUsage": 0.3,
    "GetNumFreeBlocks": 0.3,
    "TakeEvents": 0.5,
}
assert set(WEIGHTS) == {a.__name__ for a in ALL_ACTIONS}


def draw(rng: random.Random, state: PoolState) -> Action:
    """One action, mostly inside the contract (ids from the blocks it needs), sometimes
    not (any id, one past the end included)."""
    n, hbs = state.num_blocks, state.config.hash_block_size
    held = [b for b in range(1, n) if state.ref_cnt[b] > 0]
    keyed = [b for b in range(1, n) if state.primary[b] is not None]
    unkeyed = [b for b in range(1, n) if state.primary[b] is None]

    def pick(candidates: list[int], size: int = n) -> int:
        """Mostly one of ``candidates``, else any id, else the first id past the end."""
        roll = rng.random()
        if candidates and roll < 0.88:
            return rng.choice(candidates)
        return size if roll > 0.96 else rng.randrange(size)

    def several(candidates: list[int], most: int = 3) -> tuple[int, ...]:
        """Up to ``most`` of ``candidates``, distinct but for a rare repeat."""
        count = rng.randint(1, most)
        chosen = rng.sample(candidates, min(count, len(candidates)))
        out = [b if rng.random() < 0.92 else pick([]) for b in chosen] or [pick([])]
        if rng.random() < 0.15:
            out.append(out[0])
        return tuple(out)

    kind = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
    block_size = hbs * rng.randint(1, 3)
    hashes = rng.choice(CHAINS)
    group = rng.choice((0, 0, 1, 2**32)) if rng.random() < 0.05 else rng.choice((0, 1))
    if kind == "GetNewBlocks":
        return GetNewBlocks(rng.randint(0, len(state.free_queue) + (rng.random() < 0.1)))
    if kind == "PeerGetNewBlocks":
        free = len(state.peer.free_queue) if state.peer else 1
        return PeerGetNewBlocks(rng.randint(0, free))
    if kind == "FreeBlocks":
        foreign: tuple[int, ...] = ()
        if rng.random() < 0.35:
            peer_held = [b for b in range(1, 3) if state.peer and state.peer.ref_cnt[b]]
            foreign = tuple(
                rng.sample(peer_held, rng.randint(min(1, len(peer_held)), len(peer_held)))
            )
            foreign = foreign if foreign and rng.random() < 0.9 else (rng.randrange(4),)
        keyed_held = [b for b in keyed if b in held]
        blocks = several(keyed_held if keyed_held and rng.random() < 0.5 else held)
        if rng.random() < 0.1:  # every request finished: each holder lets go
            blocks = tuple(b for b in held for _ in range(state.ref_cnt[b]))
        return FreeBlocks(blocks, rng.random() < 0.3, foreign)
    if kind == "Touch":
        return Touch(several(keyed + held[:1]))
    if kind == "UnpinBlocks":
        return UnpinBlocks(several(held, 2), rng.choice("vw"))
    again = [b for b in keyed if b in held and state.primary[b].num_tokens <= 4 * block_size]
    if kind == "CacheFullBlocks" and again and rng.random() < 0.25:
        # the cache-fresh boundary: a keyed block cached again at its key's own length
        b = rng.choice(again)
        tokens = state.primary[b].num_tokens  # type: ignore[union-attr]
        size = rng.choice([s for s in (hbs, 2 * hbs, 3 * hbs) if tokens % s == 0])
        i = tokens // size - 1
        return CacheFullBlocks(hashes[: tokens // hbs], (0,) * i + (b,), i, i + 1, size, group)
    if kind == "CachePartialBlock" and again and rng.random() < 0.5:
        # a second entry on a keyed block, up to (often at) the length of its primary key
        b = rng.choice(again)
        tokens = state.primary[b].num_tokens  # type: ignore[union-attr]
        tokens = tokens if rng.random() < 0.5 else hbs * rng.randint(1, tokens // hbs)
        return CachePartialBlock(hashes[: tokens // hbs], b, tokens, group, block_size)
    fresh = [b for b in held if state.primary[b] is None]
    if kind == "CacheFullBlocks" and fresh and rng.random() < 0.4:
        # a request's table growing: blocks it cached before, then new full ones
        done = [b for b in held if state.primary[b] is not None][: rng.randint(0, 2)]
        new = rng.sample(fresh, min(3, len(fresh)))
        nc = len(done)
        nf = nc + rng.randint(1, len(new))
        used = hashes[: nf * block_size // hbs]
        return CacheFullBlocks(used, tuple(done + new), nc, nf, block_size, group)
    if kind == "CacheFullBlocks":
        keyed_held = [b for b in keyed if b in held]
        source = keyed_held if keyed_held and rng.random() < 0.3 else held
        table = tuple(
            rng.sample(source, min(len(source), 4)) if rng.random() < 0.8 else several(held, 4)
        )
        table = tuple(0 if rng.random() < 0.1 else b for b in table) or (pick(held),)
        nf = rng.randint(0 if rng.random() < 0.1 else 1, len(table))
        nc = rng.randint(0, nf) if rng.random() < 0.6 else 0
        mask = None
        if rng.random() < 0.25:
            mask = tuple(rng.random() < 0.7 for _ in range(nf - nc))
        used = hashes[: nf * block_size // hbs + rng.choice((0, 0, 0, 1, -1))]
        return CacheFullBlocks(used, table, nc, nf, block_size, group, mask)
    if kind == "CachePartialBlock":
        tokens = hbs * rng.randint(0 if rng.random() < 0.05 else 1, 2 * block_size // hbs)
        if rng.random() < 0.05:
            tokens += 1
        used = hashes[: tokens // hbs + rng.choice((0, 0, 1))]
        block = pick(keyed if keyed and rng.random() < 0.4 else held)
        return CachePartialBlock(used, block, tokens, group, block_size, rng.random() < 0.2)
    if kind == "GetCachedBlock":
        groups = tuple(rng.choice((0, 1)) for _ in range(rng.randint(1, 2)))
        if rng.random() < 0.2:
            groups += (2**32,)
        stored = [k[:-4] for k in state.cache]
        block_hash = rng.choice(stored) if stored and rng.random() < 0.7 else rng.choice(hashes)
        return GetCachedBlock(block_hash, groups)
    if kind == "EvictBlocks":
        return EvictBlocks(several(keyed, 2))
    if kind == "MoveBlockHashes":
        return MoveBlockHashes(pick(keyed), pick([b for b in unkeyed if b in held] or unkeyed))
    if kind == "ResetPrefixCache":
        return ResetPrefixCache()
    if kind == "IsBlockWritable":
        return IsBlockWritable(rng.randrange(n + 1))  # any block, the null one, one too far
    if kind == "GetUsage":
        return GetUsage()
    if kind == "GetNumFreeBlocks":
        return GetNumFreeBlocks()
    assert kind == "TakeEvents", kind
    return TakeEvents()


def random_run(seed: int) -> tuple[PoolConfig, list[Action]]:
    """A run drawn from the spec's states (the encoding is checked against it)."""
    rng = random.Random(seed)
    config = CONFIGS[seed % len(CONFIGS)]
    state = initial_state(config)
    actions = []
    for _ in range(STEPS):
        actions.append(draw(rng, state))
        if violation(state, actions[-1]) is None:
            state, _ = step(state, actions[-1])
    return config, actions


# --- the comparison -------------------------------------------------------------------------


def pool_differs(
    spec: PoolState, got: Values, enc: Encoded, encoding: ModuleType, invariants: bool
) -> str | None:
    """The first field on which the encoded pool is not the spec's (or, with
    ``invariants``, an encoded invariant fails at some block and key)."""
    ids = enc.keys.ids
    if any(k not in ids for k in spec.cache):
        return "a spec key the encoding was never given"
    primary = tuple(None if p is None else (ids[p.key], p.num_tokens) for p in spec.primary)
    extra = frozenset((b, ids[k]) for b, ks in enumerate(spec.extra) for k in ks)
    fields = {
        "ref counts": (spec.ref_cnt, got.ref),
        "free queue": (spec.free_queue, got.queue()),
        "free count": (len(spec.free_queue), got.nfree),
        "primary keys": (
            primary,
            tuple((got.pkey[b], got.ptok[b]) if got.hasp[b] else None for b in range(got.n)),
        ),
        "extra keys": (extra, got.extra),
        "multimap": (frozenset((ids[k], b) for k, bs in spec.cache.items() for b in bs), got.mm),
        "watchers": (frozenset(spec.watchers), frozenset(b for b in range(got.n) if got.wat[b])),
    }
    for name, (want, have) in fields.items():
        if want != have:
            return f"{name}: spec {want}, encoding {have}"
    if not invariants:
        return None
    s = got.state()
    for b in range(got.n):
        for k in range(len(ids) + 1):
            if not z3.is_true(z3.simplify(encoding.invariant_at(s, z3.IntVal(b), z3.IntVal(k)))):
                return f"an encoded invariant fails at block {b}, key {k}"
    return None


def answer_differs(action: Action, seen: Observation, out: Outcome, enc: Encoded) -> str | None:
    """The first answer on which the encoding is not the spec."""
    fired = frozenset(b for b, _ in seen.fired)
    if isinstance(action, (GetNewBlocks, PeerGetNewBlocks)):
        if (seen.result, fired) != (out.handed_out, out.fired):
            return f"handed out/fired: spec {seen.result} {fired}, encoding {out}"
    elif isinstance(action, ResetPrefixCache):
        if (seen.result, fired) != (out.answer, out.fired):
            return f"reset: spec {seen.result} {fired}, encoding {out}"
    elif isinstance(action, (IsBlockWritable, GetNumFreeBlocks)):
        if seen.result != out.answer:
            return f"answer: spec {seen.result}, encoding {out.answer}"
    elif isinstance(action, GetUsage):
        assert isinstance(seen.result, float)
        if not math.isclose(seen.result, out.answer):
            return f"usage: spec {seen.result}, encoding {out.answer}"
    elif isinstance(action, GetCachedBlock):
        hits = seen.result
        if (hits is None) != (out.answer is None) or (
            hits is not None
            and not all(b in allowed for b, allowed in zip(hits, out.answer, strict=True))  # type: ignore[arg-type]
        ):
            return f"lookup: spec {hits}, encoding allows {out.answer}"
    elif isinstance(action, CachePartialBlock):
        key = None if seen.result is None else enc.keys.ids.get(seen.result)  # type: ignore[arg-type]
        if key != out.key:
            return f"registered key: spec {key}, encoding {out.key}"
    return None


def disagreement(
    config: PoolConfig,
    actions: list[Action],
    modules: tuple[ModuleType, ModuleType] | None = None,
    tally: Counter[str] | None = None,
) -> str | None:
    """Where the encoding (``modules``: a patched ``actions``/``encoding`` pair, else the
    real ones) first disagrees with the spec on ``actions``, or ``None``."""
    extra = {} if modules is None else {"actions": modules[0], "encoding": modules[1]}
    enc = Encoded(config, **extra)
    encoding = enc.encoding
    state = initial_state(config)
    for i, action in enumerate(actions, 1):
        where = f"step {i} {action}: "
        refused = violation(state, action)
        out = enc.apply(action)
        seen = Observation()
        if out.allowed != (refused is None) or (out.shape is not None and out.allowed):
            return f"{where}verdict: spec {refused}, encoding {out}"
        if refused is None:
            state, seen = step(state, action)
            problem = answer_differs(action, seen, out, enc)
            if problem:
                return where + problem
        if tally is not None:
            tally[feature(action, refused is None, state, seen.result)] += 1
        for name, spec_pool, got in (("", state, enc.pool), ("peer ", state.peer, enc.peer)):
            if (spec_pool is None) != (got is None):
                return f"{where}{name}pool exists in one only"
            if spec_pool is not None and got is not None:
                last = i == len(actions)
                problem = pool_differs(spec_pool, got, enc, encoding, invariants=last)
                if problem:
                    return f"{where}{name}{problem}"
    return None


def feature(action: Action, allowed: bool, after: PoolState, answer: object) -> str:
    """A name for what a step exercised (the coverage table)."""
    name = type(action).__name__
    if isinstance(action, FreeBlocks):
        name += "(foreign)" if action.foreign else ""
        name += "(evict_first)" if action.evict_first else ""
    if isinstance(action, CacheFullBlocks):
        new = action.num_full_blocks - action.num_cached_blocks
        name += f"({'several' if new > 1 else new} new"
        name += ", after cached" if action.num_cached_blocks else ""
        hbs = after.config.hash_block_size
        name += f", {action.block_size // hbs} hash blocks/block)"
    if isinstance(action, CachePartialBlock) and action.replace_existing_hashes:
        name += "(replace)"
    if isinstance(action, GetCachedBlock) and allowed:
        name += "(hit)" if answer is not None else "(miss)"
    if isinstance(action, ResetPrefixCache):
        name += "(done)" if answer else "(blocks held)"
    if isinstance(action, TakeEvents):
        name += "(events on)" if after.config.enable_kv_cache_events else ""
    return f"{name} {'allowed' if allowed else 'refused'}"


RUNS = {f"seed{seed}": random_run(seed) for seed in SEEDS}


@functools.cache
def compared(run: str) -> tuple[str | None, Counter[str]]:
    """Where the real encoding first disagrees with the spec on ``run`` (or ``None``), and
    the cases it compared: computed once per process, for the step-by-step test and the
    coverage test alike."""
    tally: Counter[str] = Counter()
    config, actions = RUNS[run]
    return disagreement(config, actions, tally=tally), tally


@pytest.mark.parametrize("run", sorted(RUNS))
def test_encoding_and_spec_agree_step_by_step(run: str) -> None:
    assert compared(run)[0] is None


def test_the_runs_cover_every_action_and_every_named_case() -> None:
    """Every action is compared both allowed and refused, and each case the old drift
    check skipped occurs allowed."""
    tally: Counter[str] = Counter()
    for run in RUNS:
        problem, cases = compared(run)
        assert problem is None
        tally.update(cases)
    kinds = Counter(line.split("(")[0].split(" ")[0] for line in tally if "allowed" in line)
    refused = Counter(line.split("(")[0].split(" ")[0] for line in tally if "refused" in line)
    always = {"GetUsage", "GetNumFreeBlocks", "TakeEvents", "ResetPrefixCache"}
    for action in ALL_ACTIONS:
        assert kinds[action.__name__], action.__name__
        assert action.__name__ in always or refused[action.__name__], action.__name__
    allowed = [line for line in tally if line.endswith("allowed")]
    for case in (
        ("CacheFullBlocks(several new, after cached",),
        ("CacheFullBlocks(several new", "2 hash blocks/block"),
        ("CacheFullBlocks(several new", "3 hash blocks/block"),
        ("FreeBlocks(foreign)",),
        ("FreeBlocks(evict_first)",),
        ("CachePartialBlock(replace)",),
        ("TakeEvents(events on)",),
        ("GetCachedBlock(hit)",),
        ("GetCachedBlock(miss)",),
        ("ResetPrefixCache(done)",),
        ("ResetPrefixCache(blocks held)",),
    ):
        assert any(line.startswith(case[0]) and case[-1] in line for line in allowed), case
    print("\n".join(f"{tally[line]:5} {line}" for line in sorted(tally)))


# --- a planted drift is caught -----------------------------------------------------------

#: One changed clause each, in a copy of the encoding: name -> (file, clause, changed).
DRIFTS: dict[str, tuple[str, str, str]] = {
    "initial queue reversed": ("encoding.py", "rank=lambda b: b,", "rank=lambda b: -b,"),
    "block ids in range up to N": (
        "encoding.py",
        "return z3.And(b >= 0, b < s.n)",
        "return z3.And(b >= 0, b <= s.n)",
    ),
    "a block carries only its primary key": (
        "encoding.py",
        "return z3.Or(z3.And(s.hasp(b), s.pkey(b) == k), s.extra(b, k))",
        "return z3.And(s.hasp(b), s.pkey(b) == k)",
    ),
    "keyed frees to the front": (
        "actions.py",
        "z3.And(z3.Not(s.hasp(b)), z3.BoolVal(unkeyed_front))",
        "z3.BoolVal(unkeyed_front)",
    ),
    "re-caching at the same length allowed": (
        "actions.py",
        "fresh = z3.Implies(s.hasp(b), s.ptok(b) < tokens(b))",
        "fresh = z3.Implies(s.hasp(b), s.ptok(b) <= tokens(b))",
    ),
    "move keeps dst's token count": (
        "actions.py",
        "ptok=lambda b: z3.If(b == dst, s.ptok(src), s.ptok(b)),",
        "ptok=s.ptok,",
    ),
    "get_new_blocks keeps watchers": (
        "actions.py",
        "wat=lambda b: z3.And(s.wat(b), z3.Not(sel(b))),",
        "wat=s.wat,",
    ),
    "partial entry stripped at equal length": (
        "actions.py",
        "z3.And(z3.Not(already), s.hasp(block), s.ptok(block) < tokens),",
        "z3.And(z3.Not(already), s.hasp(block), s.ptok(block) <= tokens),",
    ),
    "reset counts the null block as free": (
        "actions.py",
        "idle = s.nfree == s.n - 1",
        "idle = s.nfree == s.n",
    ),
    "touch takes a free unkeyed block": (
        "actions.py",
        "hit = z3.Implies(z3.And(c(b) > 0, b != NULL, s.ref(b) == 0), s.hasp(b))",
        "hit = TRUE",
    ),
}


def drifted_package(name: str, tmp: Path) -> str:
    """The proofs package copied with the clause of ``name`` changed, importable under the
    name returned (until the caller removes it from ``sys.modules``)."""
    file, clause, changed = DRIFTS[name]
    folder = tmp / "drifted"
    shutil.copytree(
        Path(proofs.__file__).parent, folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    text = (folder / file).read_text()
    assert text.count(clause) == 1, f"{name}: the clause is not in {file} once"
    (folder / file).write_text(text.replace(clause, changed))
    package = f"drifted_{abs(hash(name))}"
    spec = importlib.util.spec_from_file_location(
        package, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    sys.modules[package] = importlib.util.module_from_spec(spec)
    return package


def forget(package: str) -> None:
    for key in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
        del sys.modules[key]


def drifted(name: str, tmp: Path) -> tuple[ModuleType, ModuleType]:
    """``actions`` and ``encoding`` from a copy with the clause of ``name`` changed."""
    package = drifted_package(name, tmp)
    try:
        return (
            importlib.import_module(f"{package}.actions"),
            importlib.import_module(f"{package}.encoding"),
        )
    finally:
        forget(package)


@pytest.mark.parametrize("name", sorted(DRIFTS))
def test_a_planted_drift_in_the_encoding_is_caught(name: str, tmp_path: Path) -> None:
    """Each drift is caught by at least three of the default runs (with
    ``KVPOOL_DRIFT_SPREAD=1``, every run is tried and the count printed)."""
    modules = drifted(name, tmp_path)
    caught = []
    for run, (config, actions) in RUNS.items():
        if disagreement(config, actions, modules):
            caught.append(run)
            if len(caught) == 3 and not SPREAD:
                break
    if SPREAD:
        print(f"{name}: caught by {len(caught)} of {len(RUNS)} runs")
    assert len(caught) >= 3, caught


def test_the_proofs_alone_miss_a_drift_that_keeps_the_invariants(tmp_path: Path) -> None:
    """Why the drift test exists: with re-caching at a key's own length allowed, every
    obligation is still proved, and only the comparison with the spec (above) sees it."""
    package = drifted_package("re-caching at the same length allowed", tmp_path)
    try:
        obligations = importlib.import_module(f"{package}.obligations")
        prover = importlib.import_module(f"{package}.prover")
        results = [prover.prove(o) for o in obligations.all_obligations()]
    finally:
        forget(package)
    assert len(results) >= 36 and all(r.status == "proved" for r in results)


def test_the_unchanged_copy_agrees(tmp_path: Path) -> None:
    """The copying itself plants nothing: a copy with a no-op change agrees everywhere."""
    DRIFTS["no-op"] = ("actions.py", "TRUE = z3.BoolVal(True)", "TRUE = z3.BoolVal(1 == 1)")
    try:
        modules = drifted("no-op", tmp_path)
    finally:
        del DRIFTS["no-op"]
    config, actions = RUNS["seed0"]
    assert disagreement(config, actions, modules) is None
