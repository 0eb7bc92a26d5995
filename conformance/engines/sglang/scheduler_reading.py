"""What the SGLang engine drivers of both generations (:mod:`.driver` for 0.5,
:mod:`.driver_0_4` for 0.4) read off the scheduler they drive, and how they hand it the
model's tokens: the same in both, but for where a request's extend starts and ends and
which row of ``ReqToTokenPool`` is its own and which calls take the model's result
(:meth:`ReadsScheduler._extended`, :meth:`ReadsScheduler._row`, :meth:`ReadsScheduler._ran`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...machines.engine.driver import Batch, Sampled, ScheduledRequest

#: The model's end-of-sequence token: none of the suite's tokens (its vocabulary is 1-9).
EOS = 0


class NotWired(RuntimeError):
    """SGLang's scheduler read an attribute the driver does not give (a loading error)."""


def strict(name: str) -> Any:
    """:class:`NotWired` naming what SGLang read."""
    raise NotWired(
        f"SGLang's scheduler read {name!r}, which kvpool's driver does not give (the part "
        "of Scheduler.__init__ that sets it does not run on CPU)"
    )


def unwired(scheduler_class: type) -> Any:
    """A ``scheduler_class`` object made without its ``__init__``; an attribute nobody
    gave it is :class:`NotWired` when read."""

    def missing(self: Any, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return strict(name)

    wired_class = type("WiredScheduler", (scheduler_class,), {"__getattr__": missing})
    return object.__new__(wired_class)


class ReadsScheduler:
    """A driver's reading of SGLang's scheduler: ``scheduler`` (the ``Scheduler``
    object), ``page`` (tokens a page) and ``reqs`` (request id -> its ``Req`` while the
    client waits) are the driver's."""

    scheduler: Any
    page: int
    reqs: dict[str, Any]
    #: The batch planned last, until its result is reported.
    batch: Any

    def _ran(self, batch: Any, tokens: list[int]) -> None:
        """The model ran ``batch`` and sampled ``tokens`` (one a request): the release's
        calls that take the result."""
        raise NotImplementedError

    def report(self, results: Sequence[Sampled]) -> None:
        """The model's result for the batch planned last (:meth:`_ran`), then the loop's
        ``last_batch``; finished requests are forgotten."""
        batch, self.batch = self.batch, None
        if batch is None:
            return
        self._ran(batch, self._sampled_tokens(batch, results))
        self.scheduler.last_batch = batch
        for rid in [rid for rid, req in self.reqs.items() if req.finished()]:
            del self.reqs[rid]

    def _extended(self, req: Any) -> tuple[int, int]:
        """Where the extend of ``req`` in a planned prefill starts (its hit) and ends."""
        raise NotImplementedError

    def _row(self, req: Any) -> int:
        """``req``'s row of ``ReqToTokenPool``."""
        raise NotImplementedError

    def _admitted(self) -> list[str]:
        """Every request admitted so far (running, in the last batch, a chunk away)."""
        waiting = self.scheduler.waiting_queue
        return [rid for rid, req in self.reqs.items() if req not in waiting]

    def _planned(self, batch: Any, admitted: list[str]) -> Batch:
        """The batch SGLang planned (``None``: none), as the machine's :class:`Batch`."""
        if batch is None:
            return Batch(preempted=self._retracted(admitted))
        extend = batch.forward_mode.is_extend()
        scheduled = []
        for req in batch.reqs:
            if extend:
                start, end = self._extended(req)
            else:
                end = len(req.origin_input_ids) + len(req.output_ids)
                start = end - 1
            scheduled.append(
                ScheduledRequest(req.rid, start, end - start, (self._table(req, end),))
            )
        return Batch(tuple(scheduled), self._retracted(admitted))

    @staticmethod
    def _sampled_tokens(batch: Any, results: Sequence[Sampled]) -> list[int]:
        """The model's token for each request of ``batch``: the suite's sampled one, the
        end-of-sequence token (:data:`EOS`) for a stop before its last allowed token (the
        last stops it by its own ``max_new_tokens``), and for a middle prompt chunk, whose
        token SGLang ignores."""
        sampled = {r.request_id: r for r in results}
        tokens = []
        for req in batch.reqs:
            got = sampled.get(req.rid)
            if got is None:  # a middle prompt chunk: SGLang ignores its token
                tokens.append(EOS)
                continue
            last = len(req.output_ids) + 1 >= req.sampling_params.max_new_tokens
            tokens.append(EOS if got.stop and not last else got.token)
        return tokens

    def free_count(self) -> int:
        """Pages free for new requests: the allocator's free pages and the tree's
        evictable ones (the adder's budget counts both)."""
        s = self.scheduler
        tokens = int(s.token_to_kv_pool_allocator.available_size())
        tokens += int(s.tree_cache.evictable_size())
        return tokens // self.page

    def _table(self, req: Any, end: int) -> tuple[int, ...]:
        """The pages of ``req``'s row covering its first ``end`` tokens."""
        row = self.scheduler.req_to_token_pool.req_to_token[self._row(req)]
        return tuple(int(row[i]) // self.page for i in range(0, end, self.page))

    def _retracted(self, admitted: list[str]) -> tuple[str, ...]:
        """The requests admitted before this plan and waiting again (retracted)."""
        waiting = self.scheduler.waiting_queue
        return tuple(rid for rid in admitted if self.reqs[rid] in waiting)
