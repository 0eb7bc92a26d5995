"""A KV cache manager the suite has never seen, and its manager target, written against
``kvpool.conformance.api`` and docs/guide/extension-api.md alone.

The "ledger" engine: a request's blocks are a list of ids; full blocks are keyed once their
tokens are written (at ``commit``), in a dict from key to the blocks holding that prefix (a
hit takes the first); a freed block goes to the
back of a free list and keeps its key until it is handed out again (LRU reuse). A hit is the
longest run of cached full blocks from the start of the prompt, cut so that at least one
token is left to compute. It has one group, caching always on, no salts.

``make`` builds the sound one; ``make_stale`` plants a fault: a cached block handed out
again keeps its entry in the key dict, so a later prompt can hit a block that now holds
other tokens. The faulty one reports no structure problems of its own, so what catches it
is the suite's request-level properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvpool.conformance.api import (
    FULL_ATTENTION,
    Admit,
    ManagerConfig,
    PoolView,
    Profile,
    RequestSetup,
    Scheduled,
    expected_key,
    request_block_hashes,
)


@dataclass
class _Request:
    tokens: list[int]
    table: list[int] = field(default_factory=list)
    computed: int = 0
    running: bool = True


class LedgerEngine:
    """The engine itself: blocks 1..N-1 (0 is kept back as the null block)."""

    def __init__(self, num_blocks: int, block_size: int, hash_block_size: int) -> None:
        self.bs, self.hbs = block_size, hash_block_size
        self.ref = [0] * num_blocks
        self.key: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, list[int]] = {}
        self.free: list[int] = list(range(1, num_blocks))
        self.drops_keys_on_reuse = True

    def keys_of(self, tokens: list[int]) -> list[bytes]:
        hashes = request_block_hashes(tuple(tokens), self.hbs)
        return [
            expected_key(hashes, self.hbs, self.bs, i, 0) for i in range(len(tokens) // self.bs)
        ]

    def hit(self, tokens: list[int]) -> list[int]:
        found = []
        for key in self.keys_of(tokens):
            blocks = self.cached.get(key)
            if not blocks:
                break
            found.append(blocks[0])
        while found and len(found) * self.bs >= len(tokens):
            found.pop()  # leave a token to compute
        return found

    def take(self, count: int, keep: list[int]) -> list[int] | None:
        """``count`` fresh blocks, the held ``keep`` not counted as free; ``None`` if short."""
        free = [b for b in self.free if b not in keep]
        if len(free) < count:
            return None
        taken = free[:count]
        for block in taken:
            self.free.remove(block)
            if self.drops_keys_on_reuse:
                self.forget(block)
            self.key[block] = None
            self.ref[block] = 1
        return taken

    def hold(self, blocks: list[int]) -> None:
        for block in blocks:
            if self.ref[block] == 0:
                self.free.remove(block)
            self.ref[block] += 1

    def release(self, blocks: list[int]) -> None:
        for block in reversed(blocks):  # the tail of a request is evicted first
            self.ref[block] -= 1
            if self.ref[block] == 0:
                self.free.append(block)

    def forget(self, block: int) -> None:
        """Take ``block``'s key out of the dict (and off the block)."""
        key = self.key[block]
        if key is not None:
            self.cached[key].remove(block)
            if not self.cached[key]:
                del self.cached[key]
        self.key[block] = None

    def register(self, tokens: list[int], table: list[int]) -> None:
        for i, key in enumerate(self.keys_of(tokens)):
            block = table[i]
            if self.key[block] is None:
                self.cached.setdefault(key, []).append(block)
                self.key[block] = key


class LedgerManagerTarget:
    """The ledger engine behind the manager-target protocol."""

    observes = frozenset({"free_queue", "ref_cnt", "keys", "index", "structure"})

    def __init__(self, setup: RequestSetup, name: str, drops_keys_on_reuse: bool) -> None:
        self.name = name
        pool = setup.pool
        self.engine = LedgerEngine(
            pool.num_gpu_blocks, setup.manager.block_size, pool.hash_block_size
        )
        self.engine.drops_keys_on_reuse = drops_keys_on_reuse
        self.requests: dict[str, _Request] = {}

    def allows(self, action: object) -> bool:
        return not (isinstance(action, Admit) and action.salt is not None)

    def _schedule(self, request: _Request) -> Scheduled | None:
        e = self.engine
        hits = e.hit(request.tokens)
        needed = -(-len(request.tokens) // e.bs) - len(hits)
        fresh = e.take(needed, hits)
        if fresh is None:
            return None
        e.hold(hits)
        request.table, request.computed, request.running = hits + fresh, len(hits) * e.bs, True
        return self._answer(request)

    def _answer(self, request: _Request) -> Scheduled:
        return Scheduled(request.computed, (tuple(request.table),))

    def admit(self, request_id: str, tokens: tuple[int, ...], salt: str | None) -> Scheduled | None:
        request = _Request(list(tokens))
        answer = self._schedule(request)
        if answer is not None:
            self.requests[request_id] = request
        return answer

    def resume(self, request_id: str) -> Scheduled | None:
        return self._schedule(self.requests[request_id])

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        request = self.requests[request_id]
        total = len(request.tokens) + len(tokens)
        fresh = self.engine.take(-(-total // self.engine.bs) - len(request.table), [])
        if fresh is None:
            return None
        request.tokens += tokens
        request.table += fresh
        return self._answer(request)

    def prepare_write(self, request_id: str) -> Scheduled | None:
        return self._answer(self.requests[request_id])  # it writes only blocks it owns

    def copies_done(self, request_id: str) -> None:
        return None

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        request = self.requests[request_id]
        request.computed = len(request.tokens)
        self.engine.register(request.tokens, request.table)
        return self._answer(request)

    def preempt(self, request_id: str) -> None:
        request = self.requests[request_id]
        self.engine.release(request.table)
        request.table, request.computed, request.running = [], 0, False

    def finish(self, request_id: str) -> None:
        request = self.requests.pop(request_id)
        if request.running:
            self.engine.release(request.table)

    def reset_prefix_cache(self) -> bool:
        e = self.engine
        if any(e.ref[1:]):
            return False
        e.cached.clear()
        e.key = [None] * len(e.key)
        return True

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        e = self.engine
        for block in block_ids:
            e.forget(block)

    def is_block_writable(self, block: int) -> bool:
        e = self.engine
        return 0 < block < len(e.ref) and e.ref[block] == 1 and e.key[block] is None

    def view(self) -> PoolView:
        e = self.engine
        return PoolView(
            free_count=len(e.free),
            free_queue=tuple(e.free),
            ref_cnt=(0, *e.ref[1:]),
            keys=tuple(frozenset([k]) if k is not None else frozenset() for k in e.key),
            primary=tuple(e.key),
            index=tuple(sorted((key, tuple(blocks)) for key, blocks in e.cached.items())),
        )

    def structure_problems(self) -> list[str]:
        e = self.engine
        if not e.drops_keys_on_reuse:
            return []  # the planted fault hides from its own check
        return [
            f"the key dict names block {block} for a key the block does not carry"
            for key, blocks in sorted(e.cached.items())
            for block in blocks
            if e.key[block] != key
        ]


class LedgerManagers:
    """The factory: one ledger manager per test case, judged by the properties alone."""

    checked_by_properties = True

    def __init__(self, drops_keys_on_reuse: bool = True) -> None:
        self.drops_keys_on_reuse = drops_keys_on_reuse
        self.name = "ledger" if drops_keys_on_reuse else "ledger (stale keys)"

    def supported_setup(self, setup: RequestSetup) -> RequestSetup:
        """One full-attention group, caching on: all the ledger engine has."""
        manager = ManagerConfig(setup.manager.block_size, (FULL_ATTENTION,))
        return RequestSetup(manager, replace(setup.pool, enable_caching=True))

    def __call__(self, setup: RequestSetup, profile: Profile) -> LedgerManagerTarget:
        return LedgerManagerTarget(self.supported_setup(setup), self.name, self.drops_keys_on_reuse)


make = LedgerManagers()
make_stale = LedgerManagers(drops_keys_on_reuse=False)
