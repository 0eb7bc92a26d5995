"""Replaying a program on a pool: verification, timing and memory.

A program's id-level calls are *compiled* for one pool first (ids turned into that pool's
block objects, hash lists into request objects), outside any measurement, so the timed
loop is nothing but ``for method, args in calls: method(*args)`` — the same loop for every
pool. The garbage collector is off while a pool is built, set up and timed (as ``timeit``
does), so a collection pass over a million blocks does not land in one pool's timing.

The clock is the process's CPU time (``time.process_time``), not the wall clock: on a
shared machine the wall clock also counts the time other processes run, which lands on
whichever pool happens to be timed then. Every lookup brings a hash object of its own
(equal to the cached one, its hash not yet computed), as a new request with the same
prefix does; otherwise a pool keyed by the very objects it was filled with would skip the
byte comparison a real lookup pays.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .programs import Call, Program

if TYPE_CHECKING:
    from ...targets.description import TargetDescription

#: A compiled call: a bound pool method and its arguments.
Compiled = tuple[Callable[..., Any], tuple[Any, ...]]


@dataclass(frozen=True)
class Contender:
    """A pool to measure: how to build one and the request objects it reads."""

    name: str
    #: ``make_pool(num_gpu_blocks, hash_block_size)`` -> a pool (caching on, events off).
    make_pool: Callable[[int, int], Any]
    #: ``make_request(hashes)`` -> the request object its cache calls read.
    make_request: Callable[[list[bytes]], Any]


def ours() -> Contender:
    from kvpool.impl import BlockPool

    from ...engines.vllm_api.requests import FakeRequest

    return Contender(
        "ours",
        lambda n, hbs: BlockPool(n, True, hash_block_size=hbs, enable_kv_cache_events=False),
        lambda hashes: FakeRequest(block_hashes=hashes, all_token_ids=[]),
    )


def compiled_contender() -> Contender:
    """Our pool's compiled build (mypyc, :mod:`.compiled`), built first if needed."""
    from ...engines.vllm_api.requests import FakeRequest
    from .compiled import load

    pool_class = load().BlockPool
    return Contender(
        "ours, compiled (mypyc)",
        lambda n, hbs: pool_class(n, True, hash_block_size=hbs, enable_kv_cache_events=False),
        lambda hashes: FakeRequest(block_hashes=hashes, all_token_ids=[]),
    )


def vllm(spec: TargetDescription | str) -> Contender:
    """A released vLLM's pool, loaded as the conformance suite loads it."""
    from ...engines.vllm.entry import load_vllm
    from ...targets.loading import described

    release = load_vllm(described(spec))
    pool_class = release.pool_class
    request = release.api().request
    assert request is not None

    def make_pool(n: int, hbs: int) -> Any:
        return pool_class(
            num_gpu_blocks=n, enable_caching=True, hash_block_size=hbs, enable_kv_cache_events=False
        )

    # vLLM reads only the hashes while caching with events off; the tokens are left empty so
    # that long requests cost no memory.
    return Contender(f"vllm {release.version}", make_pool, lambda hashes: request(hashes, []))


def _as_new_request_brings(block_hash: bytes) -> bytes:
    """An equal hash in an object of its own, its hash value not yet computed: what a new
    request with the same prefix looks up with (its hashes are computed afresh), rather
    than the very object the cache was filled with."""
    return bytes(bytearray(block_hash))


def compile_calls(pool: Any, calls: Sequence[Call], requests: Sequence[Any]) -> list[Compiled]:
    """``calls`` as bound methods of ``pool`` with its own blocks as arguments."""
    blocks = pool.blocks
    out: list[Compiled] = []
    append = out.append
    for call in calls:
        op = call[0]
        if op == "get_new_blocks":
            append((pool.get_new_blocks, (call[1],)))
        elif op == "free_blocks":
            append((pool.free_blocks, ([blocks[i] for i in call[1]],)))
        elif op == "touch":
            append((pool.touch, ([blocks[i] for i in call[1]],)))
        elif op == "get_cached_block":
            append((pool.get_cached_block, (_as_new_request_brings(call[1]), list(call[2]))))
        elif op == "cache_full_blocks":
            _, req, ids, cached, full, bs, group = call
            table = [blocks[i] for i in ids]
            append((pool.cache_full_blocks, (requests[req], table, cached, full, bs, group)))
        elif op == "cache_partial_block":
            _, req, bid, num_tokens, group, bs = call
            append((pool.cache_partial_block, (requests[req], blocks[bid], num_tokens, group, bs)))
        elif op == "move_block_hashes":
            append((pool.move_block_hashes, (blocks[call[1]], blocks[call[2]])))
        elif op == "is_block_writable":
            append((pool.is_block_writable, (blocks[call[1]],)))
        elif op == "get_num_free_blocks":
            append((pool.get_num_free_blocks, ()))
        else:
            raise ValueError(f"unknown pool call {op!r}")
    return out


def normalise(result: Any) -> Any:
    """A call's result in pool-independent terms: blocks as ids."""
    if result is None or isinstance(result, bool | int | float):
        return result
    if isinstance(result, bytes | bytearray):
        return bytes(result)
    if isinstance(result, list | tuple):
        return tuple(b.block_id for b in result)
    raise TypeError(f"unexpected result {result!r}")


@dataclass(frozen=True)
class Disagreement:
    workload: str
    num_gpu_blocks: int
    phase: str
    index: int
    call: str
    results: dict[str, Any]

    def describe(self) -> str:
        shown = ", ".join(f"{name} -> {value!r}" for name, value in self.results.items())
        return (
            f"{self.workload} @ {self.num_gpu_blocks} blocks, {self.phase} call "
            f"#{self.index} {self.call}: {shown}"
        )


def _short(call: Call) -> str:
    parts = []
    for arg in call[1:]:
        text = arg.hex()[:12] if isinstance(arg, bytes) else repr(arg)
        parts.append(text if len(text) <= 60 else text[:57] + "...")
    return f"{call[0]}({', '.join(parts)})"


def verify(prog: Program, contenders: Sequence[Contender]) -> Disagreement | None:
    """Replay ``prog`` on a fresh pool of each contender, call by call, side by side; the
    first call whose results differ (blocks compared by id), or ``None``. The free count
    and the free queue's length are compared at the end as well."""
    pools = [c.make_pool(prog.num_gpu_blocks, prog.hash_block_size) for c in contenders]
    compiled = []
    for c, pool in zip(contenders, pools, strict=True):
        requests = [c.make_request(list(h)) for h in prog.requests]
        compiled.append(
            (
                compile_calls(pool, prog.setup, requests),
                compile_calls(pool, prog.timed, requests),
            )
        )
    for phase_index, phase in enumerate(("setup", "timed")):
        calls = prog.setup if phase == "setup" else prog.timed
        for i, call in enumerate(calls):
            results: dict[str, Any] = {}
            for c, pool_calls in zip(contenders, compiled, strict=True):
                fn, args = pool_calls[phase_index][i]
                try:
                    results[c.name] = normalise(fn(*args))
                except Exception as exc:  # a pool refusing a call the other accepts
                    results[c.name] = f"raised {type(exc).__name__}: {exc}"
            if len(set(map(repr, results.values()))) > 1:
                return Disagreement(
                    prog.workload, prog.num_gpu_blocks, phase, i, _short(call), results
                )
    free = {c.name: int(p.get_num_free_blocks()) for c, p in zip(contenders, pools, strict=True)}
    if len(set(free.values())) > 1:
        return Disagreement(
            prog.workload, prog.num_gpu_blocks, "end", len(prog.timed), "free count", free
        )
    return None


@contextmanager
def collector_off() -> Iterator[None]:
    """A collection first, then none until the block ends (as ``timeit`` does)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def time_once(prog: Program, contender: Contender, requests: Sequence[Any]) -> float:
    """Seconds for ``prog``'s timed calls on a fresh pool (built and set up untimed)."""
    with collector_off():
        pool = contender.make_pool(prog.num_gpu_blocks, prog.hash_block_size)
        for fn, args in compile_calls(pool, prog.setup, requests):
            fn(*args)
        calls = compile_calls(pool, prog.timed, requests)
        clock = time.process_time
        start = clock()
        for fn, args in calls:
            fn(*args)
        elapsed = clock() - start
        del pool, calls
    return elapsed


def floor_lookups(prog: Program) -> tuple[dict[bytes, int], list[bytes]]:
    """The lookup floor's dict (every hash ``prog`` caches) and the keys it looks up (one
    per timed ``get_cached_block``, each a hash object of its own)."""
    cached = {h: i for i, hashes in enumerate(prog.requests) for h in hashes}
    keys = [_as_new_request_brings(c[1]) for c in prog.timed if c[0] == "get_cached_block"]
    return cached, keys


def lookup_floor_once(prog: Program) -> float:
    """Seconds for the least work any prefix cache must do for ``prog``'s timed calls: one
    lookup of a plain dict per ``get_cached_block`` (the dict holds every hash the program
    ever caches, each lookup brings a hash object of its own), nothing for the other calls.
    Timed as :func:`time_once` times a pool; the growth of this floor with the pool's size
    is what memory alone adds to a pool's calls."""
    with collector_off():
        cached, keys = floor_lookups(prog)
        get = cached.get
        clock = time.process_time
        start = clock()
        for key in keys:
            get(key)
        elapsed = clock() - start
        del cached, keys
    return elapsed


def peak_bytes(prog: Program, contender: Contender) -> int:
    """Peak bytes the pool holds: what construction leaves allocated (tracemalloc) plus the
    peak of what the workload (setup and timed calls) allocates on top of it. The calls
    are compiled untraced, so only the pool's own allocations count."""
    requests = [contender.make_request(list(h)) for h in prog.requests]
    gc.collect()
    tracemalloc.start()
    try:
        pool = contender.make_pool(prog.num_gpu_blocks, prog.hash_block_size)
        built, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        calls = compile_calls(pool, prog.setup, requests) + compile_calls(
            pool, prog.timed, requests
        )
        tracemalloc.start()
        for fn, args in calls:
            fn(*args)
        _, extra = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del pool, calls
    gc.collect()
    return built + extra
