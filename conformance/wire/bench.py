"""``kvpool bench --wire``: what the wire protocol costs, on the same pool.

The same lockstep runs (the pool machine at each level, the same seed, so the same test
cases) are timed on a target in process and on the same target served over the protocol
by :mod:`.serve` in a child process, alternating which goes first. Each side's rate is
its steps per second, on two clocks: the suite's own CPU time (``time.process_time``, the
rate ``kvpool conform`` reports: the program's work is not in it, its waiting neither)
and the wall clock (everything a user waits for: the program's work, the pipe, and
whatever else the machine runs). The ratio (protocol / in process) is the median of the
per-repetition ratios, with their spread.

The live search's next action depends on the last answer; over the protocol its steps are
drawn ahead from the states the spec predicts (:mod:`..machines.pool.lookahead`) and sent
in batches, the next computed by the program while the suite judges the one before.
Beside it, the same repetitions replay the seed profile's test vectors on both sides:
action sequences known in advance, which protocol 2 sends in batches too (as it sends a
replayed trace or a shrinking attempt), the first with the ``init`` of its pool.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from kvpool.spec import Action, PoolConfig, get_profile
from rich.console import Console
from rich.table import Table

from ..machines.pool.levels import level_for
from ..machines.pool.lockstep import Replay, replay_each
from ..machines.pool.runner import run_level
from ..machines.pool.target import TargetFactory
from ..targets.loading import load_target
from ..trace.model import Trace
from .entry import WireFactory
from .session import Session

#: The levels timed, each a lockstep run of the pool machine.
LEVELS = ("safety", "order", "robustness", "events")
#: How long the bench waits for a reply (a loaded machine may take seconds to start Python).
REPLY_TIMEOUT = 60.0
#: The goal: over the protocol at least half the in-process rate.
AIM_RATIO = 0.5


@dataclass
class Side:
    """One side's timed runs: steps, CPU seconds and wall seconds per repetition."""

    steps: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def time_side(factory: TargetFactory, examples: int, seed: int) -> tuple[int, float, float]:
    """Steps, suite CPU seconds and wall seconds of one run of every level of :data:`LEVELS`."""
    profile = get_profile("seed")
    steps = 0
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    for name in LEVELS:
        result = run_level(
            factory,
            profile,
            level_for(name, "count" if name == "events" else None),
            max_examples=examples,
            steps=40,
            seed=seed,
            max_blocks=8,
        )
        if result.failures:
            raise RuntimeError(f"{name}: {result.failures[0].message}")
        steps += result.record.steps
    return steps, time.process_time() - cpu_started, time.perf_counter() - wall_started


def seed_vectors() -> list[Trace]:
    """The seed profile's test vectors, generated (as ``kvpool vectors`` writes them)."""
    from ..tools.vectors.generate import corpus

    return [trace for name, trace in corpus() if name.startswith("seed/")]


def time_replays(factory: TargetFactory, traces: list[Trace]) -> tuple[int, float, float]:
    """Steps, suite CPU seconds and wall seconds of replaying ``traces`` in lockstep."""
    steps = 0
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    replays = []
    for trace in traces:
        level = level_for(trace.meta.level, trace.meta.consumer)
        config = trace.meta.config
        assert isinstance(config, PoolConfig)  # a vector is a pool-machine trace
        actions = [a for a in trace.actions if isinstance(a, Action)]
        replays.append(Replay(get_profile(trace.meta.profile), level, config, actions))
    for found, ran in replay_each(factory, replays):
        if found is not None:
            raise RuntimeError(f"a vector failed on replay: {found}")
        steps += len(ran)
    return steps, time.process_time() - cpu_started, time.perf_counter() - wall_started


def run_wire_bench(target: str, examples: int, repeat: int, seed: int) -> dict[str, Any]:
    """Time ``target`` in process and served over the protocol, ``repeat`` times each: the
    live search, and the replay of known sequences."""
    in_process, _ = load_target(target)
    command = (sys.executable, "-m", "kvpool.conformance.wire.serve", target)
    session = Session(command, REPLY_TIMEOUT)
    traces = seed_vectors()
    sides = {"in process": Side(), "wire": Side()}
    replays = {"in process": Side(), "wire": Side()}
    factories: dict[str, TargetFactory] = {"in process": in_process, "wire": WireFactory(session)}
    try:
        for rep in range(repeat):
            order = list(sides) if rep % 2 == 0 else list(reversed(sides))
            for name in order:
                _add(sides[name], time_side(factories[name], examples, seed))
                _add(replays[name], time_replays(factories[name], traces))
    finally:
        session.close()
    report = _ratios(sides)
    report.update(target=target, levels=list(LEVELS), examples=examples, repeat=repeat)
    report.update(seed=seed, replay={**_ratios(replays), "traces": len(traces)})
    return report


def _add(side: Side, timed: tuple[int, float, float]) -> None:
    side.steps.append(timed[0])
    side.cpu.append(timed[1])
    side.wall.append(timed[2])


def _ratios(sides: dict[str, Side]) -> dict[str, Any]:
    """Each clock's rates and ratios (wire / in process) over the repetitions."""
    same = sides["in process"].steps == sides["wire"].steps
    report: dict[str, Any] = {
        "same_steps": same,
        "steps": sides["in process"].steps[0],
    }
    for clock in ("cpu", "wall"):
        ratios = [
            (s / w) / (s / i)
            for s, w, i in zip(
                sides["in process"].steps,
                getattr(sides["wire"], clock),
                getattr(sides["in process"], clock),
                strict=True,
            )
        ]
        report[clock] = {
            "in_process_steps_per_s": _rate(sides["in process"], clock),
            "wire_steps_per_s": _rate(sides["wire"], clock),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return report


def _rate(side: Side, clock: str) -> float:
    seconds: list[float] = getattr(side, clock)
    return statistics.median(s / t for s, t in zip(side.steps, seconds, strict=True))


def render_wire(console: Console, report: dict[str, Any]) -> None:
    table = Table(
        title=f"the wire protocol against in process: {report['target']}, levels "
        f"{', '.join(report['levels'])}, {report['examples']} test cases each, seed "
        f"{report['seed']}, {report['repeat']} repetitions"
    )
    for column in ("clock", "in process steps/s", "wire steps/s", "wire / in process", "spread"):
        table.add_column(column, justify="right" if column != "clock" else "left")
    names = {"cpu": "CPU", "wall": "wall"}
    for part, prefix in ((report, "search "), (report["replay"], "replay ")):
        for clock in ("cpu", "wall"):
            row = part[clock]
            table.add_row(
                prefix + names[clock],
                f"{row['in_process_steps_per_s']:,.0f}",
                f"{row['wire_steps_per_s']:,.0f}",
                f"{row['ratio_median']:.2f}",
                f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}",
            )
    console.print(table)
    if not (report["same_steps"] and report["replay"]["same_steps"]):
        console.print("[red]the two sides ran different numbers of steps[/red]")
    replayed = report["replay"]
    console.print(
        f"search: {report['steps']:,} steps per run, drawn ahead, in batches; replay: the "
        f"seed profile's {replayed['traces']} test vectors, {replayed['steps']:,} steps, in "
        "batches",
        highlight=False,
    )
    console.print(
        f"CPU: the suite's own; aim: wire / in process >= {AIM_RATIO} (ratios: median of the "
        "per-repetition ratios, spread min-max)",
        highlight=False,
    )
