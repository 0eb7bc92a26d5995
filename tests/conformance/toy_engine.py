"""A toy continuous-batching scheduler with a prefix cache, written for the engine machine's
tests (not taken from any engine): first come, first served, running requests first;
a request that finds no free block preempts the latest running one (its blocks freed, its
tokens recomputed later); full computed blocks are cached under a key chaining the
prefix and the salt; a free block keeps its key until it is handed out again (least
recently freed first), so a later request can hit it.

``fault`` plants one bug: ``"salt-blind"`` (keys leave the salt out, so a request hits a
block another salt wrote) or ``"leak-on-preempt"`` (a preempted request's blocks are
never given back).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

Key = tuple[object, ...]


@dataclass
class ToyRequest:
    request_id: str
    tokens: list[int]
    salt: str | None
    computed: int = 0
    table: list[int] = field(default_factory=list)
    #: Tokens this step computes (set by schedule, used by finish_step).
    scheduled: int = 0


@dataclass
class ToyPlan:
    #: (request id, first token computed, tokens computed, block table) per request.
    runs: list[tuple[str, int, int, tuple[int, ...]]]
    preempted: list[str]


class ToyScheduler:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_batch_tokens: int,
        max_batch_size: int,
        fault: str | None = None,
    ) -> None:
        self.block_size = block_size
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        self.fault = fault
        self.ref = [0] * num_blocks  # block 0 is the null block, never handed out
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.cached: dict[Key, int] = {}
        self.key_of: dict[int, Key] = {}
        self.waiting: list[ToyRequest] = []
        self.running: list[ToyRequest] = []

    # --- the client side ---------------------------------------------------------------

    def add(self, request_id: str, prompt: tuple[int, ...], salt: str | None) -> None:
        self.waiting.append(ToyRequest(request_id, list(prompt), salt))

    def abort(self, request_id: str) -> None:
        for request in self.running:
            if request.request_id == request_id:
                self._release(request)
                self.running.remove(request)
                return
        self.waiting = [r for r in self.waiting if r.request_id != request_id]

    def num_free(self) -> int:
        return len(self.free)

    def reset_cache(self) -> bool:
        if self.running:
            return False
        self.cached.clear()
        self.key_of.clear()
        return True

    # --- one step ------------------------------------------------------------------------

    def schedule(self) -> ToyPlan:
        budget, runs, preempted = self.max_batch_tokens, [], []
        for request in list(self.running):
            if request not in self.running or budget == 0:
                continue  # preempted by a request before it this step
            n = min(len(request.tokens) - request.computed, budget)
            while not self._grow(request, request.computed + n):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is request:
                    break
            else:
                budget -= n
                request.scheduled = n
                runs.append(request)
        while self.waiting and budget and len(self.running) < self.max_batch_size:
            request = self.waiting[0]
            hits = self._lookup(request)
            request.computed = len(hits) * self.block_size
            n = min(len(request.tokens) - request.computed, budget)
            if not self._grow(request, request.computed + n):
                self._release(request)
                request.computed = 0
                break
            self.waiting.pop(0)
            self.running.append(request)
            budget -= n
            request.scheduled = n
            runs.append(request)
        return ToyPlan(
            [(r.request_id, r.computed, r.scheduled, tuple(r.table)) for r in runs], preempted
        )

    def finish_step(self, sampled: dict[str, tuple[int, bool]]) -> None:
        for request in list(self.running):
            request.computed += request.scheduled
            request.scheduled = 0
            self._register(request)
            if request.request_id in sampled:
                token, stop = sampled[request.request_id]
                if stop:
                    self._release(request)
                    self.running.remove(request)
                else:
                    request.tokens.append(token)

    # --- blocks ----------------------------------------------------------------------------

    def _key(self, parent: Key | None, request: ToyRequest, index: int) -> Key:
        bs = self.block_size
        chunk = tuple(request.tokens[index * bs : (index + 1) * bs])
        salt = None if self.fault == "salt-blind" else request.salt
        return (parent, chunk, salt)

    def _lookup(self, request: ToyRequest) -> list[int]:
        """Take the cached leading blocks of ``request`` (all but its last token)."""
        parent: Key | None = None
        for index in range((len(request.tokens) - 1) // self.block_size):
            parent = self._key(parent, request, index)
            block = self.cached.get(parent)
            if block is None:
                break
            self._take(block)
            request.table.append(block)
        return list(request.table)

    def _register(self, request: ToyRequest) -> None:
        parent: Key | None = None
        for index in range(request.computed // self.block_size):
            parent = self._key(parent, request, index)
            block = request.table[index]
            if parent not in self.cached and block not in self.key_of:
                self.cached[parent] = block
                self.key_of[block] = parent

    def _take(self, block: int) -> None:
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def _grow(self, request: ToyRequest, tokens: int) -> bool:
        """Give ``request`` blocks for ``tokens`` tokens; False (nothing taken) if too few."""
        need = -(-tokens // self.block_size) - len(request.table)
        if need > len(self.free):
            return False
        for _ in range(max(0, need)):
            block, _ = self.free.popitem(last=False)
            key = self.key_of.pop(block, None)
            if key is not None:
                del self.cached[key]
            self.ref[block] = 1
            request.table.append(block)
        return True

    def _release(self, request: ToyRequest) -> None:
        for block in reversed(request.table):  # tail first: evicted before the prefix
            self.ref[block] -= 1
            if self.ref[block] == 0:
                self.free[block] = None
        request.table = []

    def _preempt(self, request: ToyRequest) -> None:
        if self.fault != "leak-on-preempt":
            self._release(request)
        request.table, request.computed, request.scheduled = [], 0, 0
        self.running.remove(request)
        self.waiting.insert(0, request)
