"""A seeded serving workload: shared system prompts of Zipf popularity, multi-turn
sessions, mixed prompt and output lengths, and preemption when the pool runs short.

The generator plays a simple scheduler. It admits the next turn while fewer than
``concurrency`` requests run (a turn that finds no room waits for running ones to finish);
when a running request finds no room to grow, the youngest running request is preempted
and resumed later, from its cached prefix; each running request decodes a few tokens at a
time (append, then compute) until its output is complete, then finishes, and its session's
next turn (the whole conversation so far plus a new user message) joins the queue. Every
decision depends only on the seed and on what the spec's manager answers, so a workload is
the same sequence of request actions on every run.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    Finish,
    ManagerResult,
    Preempt,
    RequestAction,
    Resume,
    Scheduled,
)


@dataclass(frozen=True)
class WorkloadParams:
    """What a workload looks like; every field is a ``kvpool workload`` option."""

    requests: int = 200
    prefixes: int = 6
    zipf: float = 1.2
    prefix_tokens: int = 48
    prompt_tokens: tuple[int, int] = (4, 40)
    output_tokens: tuple[int, int] = (1, 24)
    turns: int = 3
    concurrency: int = 6
    decode_chunk: int = 4
    salted: float = 0.1
    #: Register partial entries (cache_partial) on some forward passes; needs every group
    #: to use full attention.
    partial_entries: bool = True
    vocabulary: int = 50
    seed: int = 0


@dataclass
class Turn:
    request_id: str
    session: int
    prompt: tuple[int, ...]
    output: int
    salt: str | None
    turn: int


@dataclass
class WorkloadStats:
    """What a workload did, counted as it ran."""

    counts: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    hit_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (rank**s) for rank in range(1, n + 1)]


class Workload:
    """Generates and applies one workload through ``apply`` (a request run's step)."""

    def __init__(self, params: WorkloadParams) -> None:
        self.params = params
        self.rng = random.Random(params.seed)
        rng = self.rng
        self.prefixes = [
            tuple(rng.randrange(params.vocabulary) for _ in range(params.prefix_tokens))
            for _ in range(params.prefixes)
        ]
        self.weights = zipf_weights(params.prefixes, params.zipf)
        self.stats = WorkloadStats()
        self.next_session = 0
        self.started = 0

    def _tokens(self, bounds: tuple[int, int]) -> tuple[int, ...]:
        n = self.rng.randint(*bounds)
        return tuple(self.rng.randrange(self.params.vocabulary) for _ in range(n))

    def first_turn(self) -> Turn:
        p = self.params
        prefix = self.rng.choices(self.prefixes, self.weights)[0]
        salt = "tenant-b" if self.rng.random() < p.salted else None
        session = self.next_session
        self.next_session += 1
        return self._turn(session, prefix + self._tokens(p.prompt_tokens), salt, 0)

    def _turn(self, session: int, prompt: tuple[int, ...], salt: str | None, turn: int) -> Turn:
        self.started += 1
        output = self.rng.randint(*self.params.output_tokens)
        return Turn(f"s{session}t{turn}", session, prompt, output, salt, turn)

    def run(
        self,
        apply: Callable[[RequestAction], ManagerResult],
        on_step: Callable[[WorkloadStats], None] | None = None,
    ) -> WorkloadStats:
        """Drive the whole workload; ``apply`` runs one request action on a manager (the
        spec's, one under test, or a benchmark's) and returns its result."""
        p, rng, stats = self.params, self.rng, self.stats
        waiting: deque[Turn] = deque()
        turns: dict[str, Turn] = {}
        tokens: dict[str, tuple[int, ...]] = {}
        generated: dict[str, int] = {}
        running: list[str] = []  # oldest first
        preempted: deque[str] = deque()

        def act(action: RequestAction) -> ManagerResult:
            stats.counts[action.operation] += 1
            result = apply(action)
            if on_step is not None:
                on_step(stats)
            return result

        def make_room(for_what: str) -> None:
            """Preempt the youngest running request; with none, the pool is too small."""
            if not running:
                raise RuntimeError(
                    f"{for_what} cannot fit in an empty pool: use more blocks or shorter prompts"
                )
            victim = running.pop()
            act(Preempt(victim))
            preempted.append(victim)

        def admit(turn: Turn) -> bool:
            result = act(Admit(turn.request_id, turn.prompt, turn.salt))
            if result is None:
                # no room: wait for running requests to finish (or fail in an empty pool)
                stats.counts["admission refused"] += 1
                if not running:
                    make_room(f"request {turn.request_id} ({len(turn.prompt)} tokens)")
                return False
            assert isinstance(result, Scheduled)
            stats.prompt_tokens += len(turn.prompt)
            stats.hit_tokens += result.num_computed_tokens
            turns[turn.request_id] = turn
            tokens[turn.request_id] = turn.prompt
            generated[turn.request_id] = 0
            running.append(turn.request_id)
            partial = rng.random() < 0.3 and p.partial_entries
            act(Compute(turn.request_id, cache_partial=partial))
            return True

        while self.started < p.requests or waiting or turns:
            if self.started < p.requests and len(waiting) < 2:
                waiting.append(self.first_turn())
            if preempted and len(running) < p.concurrency:
                rid = preempted.popleft()
                if act(Resume(rid)) is None:
                    preempted.appendleft(rid)
                    make_room(f"request {rid}")
                else:
                    running.append(rid)
                    act(Compute(rid))
                continue
            if waiting and len(running) < p.concurrency and (not running or rng.random() < 0.5):
                if admit(waiting[0]):
                    waiting.popleft()
                continue
            rid = rng.choice(running)
            turn = turns[rid]
            left = turn.output - generated[rid]
            if left <= 0:
                act(Finish(rid))
                running.remove(rid)
                conversation = tokens.pop(rid)
                del turns[rid], generated[rid]
                if turn.turn + 1 < p.turns:
                    history = conversation + self._tokens(p.prompt_tokens)
                    waiting.append(self._turn(turn.session, history, turn.salt, turn.turn + 1))
                continue
            chunk = tuple(rng.randrange(p.vocabulary) for _ in range(min(left, p.decode_chunk)))
            if act(Append(rid, chunk)) is None:
                make_room(f"request {rid}")
                continue
            tokens[rid] += chunk
            generated[rid] += len(chunk)
            if act(Compute(rid)) is None:
                make_room(f"request {rid}")
        return stats
