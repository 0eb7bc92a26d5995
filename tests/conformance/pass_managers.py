"""The ledger engine (``ledger_manager.py``) keying blocks when it schedules them, as
nano-vllm and LMDeploy do: every full block of a request's table is keyed at admission,
resumption and growth, before the forward pass writes it, so a request scheduled into the
same pass hits it at once.

``make`` keeps the one-pass window: when a request leaves before its forward pass wrote
the blocks it keyed, those keys are dropped (they name data never written). ``make_stale``
plants the fault: it keeps them, so a later request hits a block that holds nothing.
"""

from __future__ import annotations

from kvpool.conformance.api import Profile, RequestSetup, Scheduled
from ledger_manager import LedgerManagers, LedgerManagerTarget, _Request


class PassManagerTarget(LedgerManagerTarget):
    registers_when_scheduled = True

    def __init__(self, setup: RequestSetup, name: str, keeps_window: bool) -> None:
        super().__init__(setup, name, drops_keys_on_reuse=True)
        self.keeps_window = keeps_window
        #: Per request, the blocks keyed when it was scheduled that its pass has not written.
        self.unwritten: dict[str, set[int]] = {}

    def _key_at_scheduling(self, request_id: str, request: _Request) -> None:
        e = self.engine
        full = len(request.tokens) // e.bs
        fresh = {b for i, b in enumerate(request.table[:full]) if (i + 1) * e.bs > request.computed}
        unkeyed = {b for b in fresh if e.key[b] is None}
        e.register(request.tokens, request.table)
        self.unwritten.setdefault(request_id, set()).update(unkeyed)

    def admit(self, request_id: str, tokens: tuple[int, ...], salt: str | None) -> Scheduled | None:
        answer = super().admit(request_id, tokens, salt)
        if answer is not None:
            self._key_at_scheduling(request_id, self.requests[request_id])
        return answer

    def resume(self, request_id: str) -> Scheduled | None:
        answer = super().resume(request_id)
        if answer is not None:
            self._key_at_scheduling(request_id, self.requests[request_id])
        return answer

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        answer = super().append(request_id, tokens)
        if answer is not None:
            self._key_at_scheduling(request_id, self.requests[request_id])
        return answer

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        self.unwritten.pop(request_id, None)  # the pass wrote every block it keyed
        return super().commit(request_id, cache_partial)

    def _leave(self, request_id: str) -> None:
        for block in self.unwritten.pop(request_id, set()):
            if self.keeps_window:
                self.engine.forget(block)  # its pass never ran: the key names nothing

    def preempt(self, request_id: str) -> None:
        self._leave(request_id)
        super().preempt(request_id)

    def finish(self, request_id: str) -> None:
        self._leave(request_id)
        super().finish(request_id)

    def is_block_writable(self, block: int) -> bool:
        e = self.engine
        if not 0 < block < len(e.ref):
            return False
        being_written = any(block in blocks for blocks in self.unwritten.values())
        return being_written or (e.ref[block] == 1 and e.key[block] is None)


class PassManagers(LedgerManagers):
    def __init__(self, keeps_window: bool) -> None:
        super().__init__()
        self.keeps_window = keeps_window
        self.name = "keyed at scheduling" + ("" if keeps_window else " (stale keys)")

    def __call__(self, setup: RequestSetup, profile: Profile) -> PassManagerTarget:
        return PassManagerTarget(self.supported_setup(setup), self.name, self.keeps_window)


make = PassManagers(keeps_window=True)
make_stale = PassManagers(keeps_window=False)
