"""The toy scheduler's engine driver (--machine engine): only calls into the scheduler."""

from collections.abc import Sequence

from kvpool.conformance import api
from toy_engine import ToyScheduler  # pytest puts this folder on sys.path


class ToyDriver:
    name = "toy"
    capabilities = frozenset({"tables", "abort", "free_count", "ref_counts", "flush", "salts"})
    fault: str | None = None

    def __init__(self, setup: api.EngineSetup) -> None:
        size, tokens, batch = setup.block_size, setup.max_batch_tokens, setup.max_batch_size
        self.engine = ToyScheduler(setup.num_blocks, size, tokens, batch, self.fault)

    def submit(self, request: api.Submission) -> None:
        self.engine.add(request.request_id, request.prompt, request.salt)

    def step(self) -> api.Batch:
        plan = self.engine.schedule()
        runs = (api.ScheduledRequest(r, s, n, (t,)) for r, s, n, t in plan.runs)
        return api.Batch(tuple(runs), tuple(plan.preempted))

    def report(self, results: Sequence[api.Sampled]) -> None:
        self.engine.finish_step({r.request_id: (r.token, r.stop) for r in results})

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def free_count(self) -> int:
        return self.engine.num_free()

    def ref_counts(self) -> tuple[int, ...]:
        return tuple(self.engine.ref)

    def flush(self) -> bool:
        return self.engine.reset_cache()
