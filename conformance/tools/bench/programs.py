"""The benchmark's workloads, as pool-call programs: seeded, id-level, pool-independent.

A :class:`Program` is a list of pool calls written with block *ids* and hash *bytes*, never
with a pool's objects, so the very same calls can be replayed on any pool with vLLM's
``BlockPool`` API. It has two parts: ``setup`` (replayed before the clock starts: filling
the prefix cache, say) and ``timed`` (the calls measured). Every program is a pure function
of its parameters and seed: building it twice gives equal programs.

The four workloads:

* ``churn`` — allocate 1-32 blocks or free a random live allocation (tail first), with the
  pool between empty and full: ``get_new_blocks`` / ``free_blocks`` of unkeyed blocks;
* ``prefix-hit`` — the whole pool is first cached (setup), then each step looks up a random
  cached prompt block by block (``get_cached_block``), touches the hits (free cached
  blocks leave the queue), allocates one fresh block (evicting the least recent cached
  block) and frees all of them;
* ``cache-full`` — each step allocates 1-16 blocks, registers them under fresh hashes with
  ``cache_full_blocks`` in one or two calls, and frees them (so later allocations evict);
* ``requests`` — the suite's serving workload (shared system prompts, multi-turn sessions,
  preemption) run once through :class:`kvpool.impl.KVCacheManager` with its pool calls
  recorded (lookups, touches, allocations, frees, full and partial registration, key moves,
  free counts, writability checks), then replayed.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvpool.conformance.machines.requests.workload import WorkloadParams

#: One pool call at the id level: ``(operation, *arguments)``. Arguments by operation:
#: ``get_new_blocks (n)``, ``free_blocks (ids)``, ``touch (ids)``,
#: ``get_cached_block (hash, groups)``,
#: ``cache_full_blocks (request, ids, num_cached, num_full, block_size, group)``,
#: ``cache_partial_block (request, id, num_tokens, group, block_size)``,
#: ``move_block_hashes (src, dst)``, ``is_block_writable (id)``, ``get_num_free_blocks ()``.
#: ``request`` is a :class:`RequestHashes` index into :attr:`Program.requests`.
Call = tuple[Any, ...]

WORKLOADS = ("churn", "prefix-hit", "cache-full", "requests")

WORKLOAD_HELP = {
    "churn": "allocate 1-32 blocks / free a live allocation, pool between empty and full",
    "prefix-hit": "look up a cached prompt, touch the hits, allocate one block, free all",
    "cache-full": "allocate 1-16 blocks, cache_full_blocks them (1-2 calls), free them",
    "requests": "the serving workload through KVCacheManager, its pool calls replayed",
}


@dataclass
class Program:
    """A workload as pool calls, replayable on any pool of ``num_gpu_blocks`` blocks."""

    workload: str
    num_gpu_blocks: int
    hash_block_size: int
    setup: list[Call] = field(default_factory=list)
    timed: list[Call] = field(default_factory=list)
    #: The hash lists requests carry, by index (a cache call names its request's index).
    requests: list[tuple[bytes, ...]] = field(default_factory=list)

    def fingerprint(self) -> str:
        """A digest of every call and request (equal programs have equal fingerprints)."""
        digest = hashlib.sha256()
        for part in (self.setup, self.timed, self.requests):
            for item in part:
                digest.update(repr(item).encode())
            digest.update(b"|")
        return digest.hexdigest()[:16]


def _hash(rng: random.Random) -> bytes:
    return rng.randbytes(32)


def churn(num_gpu_blocks: int, ops: int, seed: int = 0) -> Program:
    rng = random.Random(seed)
    prog = Program("churn", num_gpu_blocks, 16)
    free = num_gpu_blocks - 1
    live: list[tuple[int, ...]] = []
    # The ids the pool will hand out are only known by replaying; the program keeps a
    # model of the free queue to name them. Unkeyed frees go to the front (LIFO).
    queue = list(range(num_gpu_blocks - 1, 0, -1))  # a stack: the front is the end
    while len(prog.timed) < ops:
        want = rng.randint(1, 32)
        if live and (want > free or rng.random() < 0.5):
            i = rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            ids = live.pop()
            released = ids[::-1]  # tail first
            prog.timed.append(("free_blocks", released))
            # prepend_n: released[0] becomes the front.
            queue.extend(reversed(released))
            free += len(ids)
        else:
            n = min(want, free)
            got = tuple(queue.pop() for _ in range(n))
            prog.timed.append(("get_new_blocks", n))
            if got:
                live.append(got)
            free -= n
    return prog


def prefix_hit(num_gpu_blocks: int, ops: int, seed: int = 0) -> Program:
    rng = random.Random(seed)
    prog = Program("prefix-hit", num_gpu_blocks, 16)
    bs = 16
    prompt_blocks = 16
    usable = num_gpu_blocks - 1
    # Setup: cache (almost) the whole pool as prompts of 16 blocks, then free them all.
    # Keep a few blocks unkeyed at the front for the steps' fresh blocks to come from.
    next_id = 1
    prompts: list[int] = []
    while usable - (next_id - 1) > prompt_blocks + 8:
        ids = tuple(range(next_id, next_id + prompt_blocks))
        next_id += prompt_blocks
        req = len(prog.requests)
        prog.requests.append(tuple(_hash(rng) for _ in range(prompt_blocks)))
        prompts.append(req)
        prog.setup.append(("get_new_blocks", prompt_blocks))
        prog.setup.append(("cache_full_blocks", req, ids, 0, prompt_blocks, bs, 0))
        prog.setup.append(("free_blocks", ids[::-1]))
    # Timed: a request of a random cached prompt: look its blocks up until the first miss
    # (an evicted block), touch the hits, allocate one fresh block (which evicts the least
    # recently used cached block), free everything. The ids come from replaying on our
    # pool (the verification pass checks vLLM's returns the same).
    from kvpool.impl import BlockPool

    pool = BlockPool(num_gpu_blocks, True, hash_block_size=prog.hash_block_size)
    reqs = [_request(h) for h in prog.requests]
    for call in prog.setup:
        _apply_ids(pool, reqs, call)
    groups = (0,)
    while len(prog.timed) < ops:
        hashes = prog.requests[rng.choice(prompts)]
        hits: list[int] = []
        for h in hashes[: rng.randint(1, prompt_blocks)]:
            prog.timed.append(("get_cached_block", h, groups))
            found = pool.get_cached_block(h, groups)
            if found is None:
                break
            hits.append(found[0].block_id)
        calls: list[Call] = []
        if hits:
            calls.append(("touch", tuple(hits)))
            _apply_ids(pool, reqs, calls[-1])
        calls.append(("get_new_blocks", 1))
        (fresh,) = pool.get_new_blocks(1)
        calls.append(("free_blocks", (fresh.block_id, *hits[::-1])))
        _apply_ids(pool, reqs, calls[-1])
        prog.timed.extend(calls)
    return prog


def cache_full(num_gpu_blocks: int, ops: int, seed: int = 0) -> Program:
    rng = random.Random(seed)
    prog = Program("cache-full", num_gpu_blocks, 16)
    bs = 16
    from kvpool.impl import BlockPool

    # The ids come from replaying on our pool (verified against vLLM's later).
    pool = BlockPool(num_gpu_blocks, True, hash_block_size=prog.hash_block_size)
    requests: list[Any] = []
    while len(prog.timed) < ops:
        n = rng.randint(1, min(16, num_gpu_blocks - 1))
        req = len(prog.requests)
        hashes = tuple(_hash(rng) for _ in range(n))
        prog.requests.append(hashes)
        requests.append(_request(hashes))
        ids = tuple(b.block_id for b in pool.get_new_blocks(n))
        calls: list[Call] = [("get_new_blocks", n)]
        split = rng.randint(0, n - 1) if n > 1 and rng.random() < 0.5 else 0
        if split:
            calls.append(("cache_full_blocks", req, ids, 0, split, bs, 0))
        calls.append(("cache_full_blocks", req, ids, split, n, bs, 0))
        calls.append(("free_blocks", ids[::-1]))
        for call in calls[1:]:
            _apply_ids(pool, requests, call)
        prog.timed.extend(calls)
    return prog


# ------------------------------------------------------------------ the request workload


class RecordingPool:
    """Our pool behind a proxy that records every call at the id level."""

    def __init__(self, pool: Any, prog: Program) -> None:
        self._pool = pool
        self._prog = prog
        self._requests: dict[tuple[bytes, ...], int] = {}
        self.blocks = pool.blocks
        self.null_block = pool.null_block

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def _log(self, *call: Any) -> None:
        self._prog.timed.append(call)

    def _request(self, request: Any) -> int:
        hashes = tuple(request.block_hashes)
        index = self._requests.get(hashes)
        if index is None:
            index = self._requests[hashes] = len(self._prog.requests)
            self._prog.requests.append(hashes)
        return index

    def get_new_blocks(self, n: int) -> Any:
        self._log("get_new_blocks", n)
        return self._pool.get_new_blocks(n)

    def free_blocks(self, blocks: Sequence[Any]) -> None:
        blocks = list(blocks)
        self._log("free_blocks", tuple(b.block_id for b in blocks))
        self._pool.free_blocks(blocks)

    def touch(self, blocks: Sequence[Any]) -> None:
        blocks = list(blocks)
        self._log("touch", tuple(b.block_id for b in blocks))
        self._pool.touch(blocks)

    def get_cached_block(self, block_hash: bytes, groups: Sequence[int]) -> Any:
        self._log("get_cached_block", block_hash, tuple(groups))
        return self._pool.get_cached_block(block_hash, groups)

    def get_cached_prefix(self, block_hashes: Any, group: int) -> Any:
        """Our pool's prefix walk, recorded as the lookups it stands for: one
        ``get_cached_block`` per hit, then one for the miss that ended it."""
        hashes = list(block_hashes)
        found = self._pool.get_cached_prefix(hashes, group)
        for block_hash in hashes[: len(found) + 1]:
            self._log("get_cached_block", block_hash, (group,))
        return found

    def cache_full_blocks(
        self, request: Any, blocks: Sequence[Any], cached: int, full: int, bs: int, group: int
    ) -> None:
        ids = tuple(b.block_id for b in blocks)
        self._log("cache_full_blocks", self._request(request), ids, cached, full, bs, group)
        self._pool.cache_full_blocks(request, blocks, cached, full, bs, group)

    def cache_partial_block(
        self, request: Any, block: Any, num_tokens: int, group: int, bs: int
    ) -> Any:
        self._log(
            "cache_partial_block", self._request(request), block.block_id, num_tokens, group, bs
        )
        return self._pool.cache_partial_block(request, block, num_tokens, group, bs)

    def move_block_hashes(self, src: Any, dst: Any) -> None:
        self._log("move_block_hashes", src.block_id, dst.block_id)
        self._pool.move_block_hashes(src, dst)

    def is_block_writable(self, block: Any) -> bool:
        self._log("is_block_writable", block.block_id)
        return bool(self._pool.is_block_writable(block))

    def get_num_free_blocks(self) -> int:
        self._log("get_num_free_blocks")
        return int(self._pool.get_num_free_blocks())


#: The manager the request workload runs through: block size 16, hashes every 4 tokens
#: (so partial prefix entries exist), one full-attention group.
BLOCK_SIZE = 16
HASH_BLOCK_SIZE = 4


def requests(
    num_gpu_blocks: int,
    ops: int,
    seed: int = 0,
    on_step: Callable[[int], None] | None = None,
) -> Program:
    """The serving workload, recorded from our manager until ``ops`` pool calls."""
    from kvpool.conformance.engines.builtin.impl_manager import scheduled
    from kvpool.conformance.machines.requests.workload import Workload
    from kvpool.impl import KVCacheManager
    from kvpool.spec.manager import Admit, Append, Compute, Finish, Preempt, Resume

    prog = Program("requests", num_gpu_blocks, HASH_BLOCK_SIZE)
    manager = KVCacheManager(
        num_gpu_blocks,
        BLOCK_SIZE,
        enable_caching=True,
        hash_block_size=HASH_BLOCK_SIZE,
        enable_kv_cache_events=False,
    )
    manager.block_pool = RecordingPool(manager.block_pool, prog)  # type: ignore[assignment]
    # Enough concurrent requests to keep a small pool busy (preemptions included) and
    # enough requests for ``ops`` pool calls; larger pools simply hold more of the cache.
    params = request_workload(seed)

    class Done(Exception):
        pass

    def apply(action: Any) -> Any:
        rid = action.request_id
        match action:
            case Admit(tokens=tokens, salt=salt):
                result = manager.admit(rid, tokens, salt)
                if result is not None:
                    manager.copies_done(rid)
            case Resume():
                result = manager.resume(rid)
                if result is not None:
                    manager.copies_done(rid)
            case Append(tokens=tokens):
                result = manager.append(rid, tokens)
            case Compute(cache_partial=partial):
                result = manager.prepare_write(rid)
                if result is not None:
                    manager.copies_done(rid)
                    result = manager.commit(rid, partial)
            case Preempt():
                manager.preempt(rid)
                result = None
            case Finish():
                manager.finish(rid)
                result = None
            case _:
                raise TypeError(action)
        if on_step is not None:
            on_step(len(prog.timed))
        if len(prog.timed) >= ops:
            raise Done
        return scheduled(result)

    with contextlib.suppress(Done):
        Workload(params).run(apply)
    return prog


BUILDERS: dict[str, Callable[[int, int, int], Program]] = {
    "churn": churn,
    "prefix-hit": prefix_hit,
    "cache-full": cache_full,
    "requests": requests,
}


def request_workload(seed: int, partial_entries: bool = True) -> WorkloadParams:
    """The request bench's workload: shared prefixes, multi-turn requests and enough of
    them at once to keep a small pool busy (preemptions included)."""
    from kvpool.conformance.machines.requests.workload import WorkloadParams

    return WorkloadParams(
        requests=1_000_000,
        prefixes=32,
        prefix_tokens=256,
        prompt_tokens=(16, 512),
        output_tokens=(1, 64),
        turns=3,
        concurrency=32,
        decode_chunk=16,
        partial_entries=partial_entries,
        seed=seed,
    )


#: The long-prompt workload: prompts of 8k to 128k tokens, each after one of 4 shared
#: 8k-token prefixes, over a 32,000-token vocabulary; one turn each (so no prompt grows
#: past 128k), 4 at a time.
LONG_PREFIX_TOKENS = 8_192
LONG_PROMPT_TOKENS = 131_072


def long_prompt_workload(seed: int) -> WorkloadParams:
    """Long prompts with shared prefixes, where hashing the tokens is most of the work."""
    from kvpool.conformance.machines.requests.workload import WorkloadParams

    return WorkloadParams(
        requests=1_000_000,
        prefixes=4,
        prefix_tokens=LONG_PREFIX_TOKENS,
        prompt_tokens=(0, LONG_PROMPT_TOKENS - LONG_PREFIX_TOKENS),
        output_tokens=(1, 64),
        turns=1,
        concurrency=4,
        decode_chunk=16,
        partial_entries=False,
        vocabulary=32_000,
        seed=seed,
    )


def build(workload: str, num_gpu_blocks: int, ops: int, seed: int = 0) -> Program:
    """The program of ``workload`` for a pool of ``num_gpu_blocks`` blocks."""
    return BUILDERS[workload](num_gpu_blocks, ops, seed)


# ------------------------------------------------------------------ replay helpers


def _request(hashes: Sequence[bytes], hash_block_size: int = 16) -> Any:
    from kvpool.conformance.engines.vllm_api.requests import FakeRequest

    return FakeRequest(block_hashes=list(hashes), all_token_ids=[])


def _apply_ids(pool: Any, requests: Sequence[Any], call: Call) -> Any:
    """Apply one id-level call to ``pool`` (slow path, for building programs)."""
    op = call[0]
    blocks = pool.blocks
    if op == "get_new_blocks":
        return pool.get_new_blocks(call[1])
    if op == "free_blocks":
        return pool.free_blocks([blocks[i] for i in call[1]])
    if op == "touch":
        return pool.touch([blocks[i] for i in call[1]])
    if op == "cache_full_blocks":
        _, req, ids, cached, full, bs, group = call
        return pool.cache_full_blocks(
            requests[req], [blocks[i] for i in ids], cached, full, bs, group
        )
    raise AssertionError(op)
