"""Where a lockstep step's time goes: one pool-machine run under ``cProfile``, its time
split into the parts of a step.

``python -m kvpool.conformance.machines.pool.step_profile --target impl --level safety --seed 1``
runs what ``kvpool conform --machine pool --level safety`` runs at the default sizes and
prints, per part, the seconds, the microseconds per step and the share of the run. The
parts are read off the profile by who called whom (``cProfile`` records each caller of a
function with the time spent in it for that caller), so a spec function the drawers call
counts as drawing and the same function called by the comparison counts as the spec's:

- drawing: choosing the next action (``next_action``);
- the search around the steps (starting and bookkeeping its test cases);
- the spec: its transition, its ``violation`` check and its invariants, and the adoption
  of the target's choice of blocks at ``safety``;
- the target: its call, its view (the index probe inside it shown on its own), its
  free-list walk;
- the comparison of results and views, coverage bookkeeping, the events level, building a
  new run per test case, and the sweep at the end.

The profile clocks CPU time, so other work on the machine counts little. A profiler slows
small functions more than large ones: the shares are what to compare, the microseconds
are inflated; steps per second come from ``kvpool conform`` itself.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Iterable

#: A function as ``pstats`` names it: (file, line, name).
Func = tuple[str, int, str]


def _is(func: Func, file_end: str, name: str) -> bool:
    return func[0].endswith(file_end) and func[2] == name


class Profile:
    """Cumulative times of one run, by function and by (function, caller)."""

    def __init__(self, stats: pstats.Stats) -> None:
        self.raw: dict[Func, tuple[int, int, float, float, dict[Func, tuple[float, ...]]]] = (
            stats.stats  # type: ignore[attr-defined]
        )

    def cum(self, file_end: str, name: str) -> float:
        """Cumulative seconds in every function ``name`` of a file ending ``file_end``."""
        return sum(v[3] for f, v in self.raw.items() if _is(f, file_end, name))

    def called(
        self, file_end: str, name: str, callers: Iterable[tuple[str, str]], any_file: bool = False
    ) -> float:
        """Cumulative seconds in ``name`` when called by one of ``callers`` (file, name)."""
        wanted = list(callers)
        total = 0.0
        for func, (_, _, _, _, by) in self.raw.items():
            if func[2] != name or not (any_file or func[0].endswith(file_end)):
                continue
            for caller, numbers in by.items():
                if any(_is(caller, cf, cn) for cf, cn in wanted):
                    total += numbers[3]
        return total


LOCKSTEP = "machines/pool/lockstep.py"
JUDGE = (LOCKSTEP, "judge")
STEP_CALLERS = [(LOCKSTEP, "judge_step"), JUDGE, (LOCKSTEP, "refused")]


def breakdown(profile: Profile) -> list[tuple[str, float]]:
    """The parts of the run's time, in seconds, in the order the module docstring lists;
    the first row is the whole of the exploring."""
    p = profile
    exploring = p.cum("search/seeded_search.py", "seeded_search")
    steps = p.cum("machines/pool/machine.py", "step")
    starts = p.cum("machines/pool/machine.py", "start")
    viewers = [(LOCKSTEP, "check_view"), JUDGE, (LOCKSTEP, "refused")]
    view = p.called("", "view", viewers, any_file=True)
    probe = p.cum("targets/hash_index.py", "read_index")
    construction = p.cum(LOCKSTEP, "__init__") - p.called(
        LOCKSTEP, "check_view", [(LOCKSTEP, "__init__")]
    )
    compare = "machines/pool/compare.py"
    parts = [
        ("drawing: our drawers", p.cum("machines/pool/machine.py", "next_action")),
        ("the search around the steps", max(0.0, exploring - steps - starts)),
        ("spec: transition", p.called("machines/pool/contracts.py", "spec_step", STEP_CALLERS)),
        ("spec: contract check (violation)", p.called("spec/step.py", "violation", [JUDGE])),
        (
            "spec: invariants",
            p.called("machines/pool/invariant_check.py", "broken_since", STEP_CALLERS),
        ),
        ("spec: adopting the target's blocks", p.called(LOCKSTEP, "adopt", STEP_CALLERS)),
        ("target: its call", p.called("", "apply", [JUDGE], any_file=True)),
        ("target: its view, less the index probe", view - probe),
        ("target: the index probe", probe),
        (
            "target: free-list walk",
            p.called("", "structure_problems", [(LOCKSTEP, "check_structure")], any_file=True),
        ),
        (
            "comparison of results and views",
            p.called(compare, "compare_observation", STEP_CALLERS)
            + p.called(compare, "compare_views", [(LOCKSTEP, "check_view")])
            + p.called(compare, "view_changes", STEP_CALLERS),
        ),
        (
            "coverage bookkeeping",
            p.called("machines/pool/coverage.py", "situations", [JUDGE])
            + p.called("machines/pool/state_coverage.py", "cells", [JUDGE]),
        ),
        (
            "events level",
            p.called(LOCKSTEP, "judge_events", [JUDGE])
            + p.called(LOCKSTEP, "settle_events", [JUDGE]),
        ),
        ("a new run per test case", max(0.0, construction)),
    ]
    accounted = sum(t for _, t in parts)
    parts.append(("the rest (lockstep glue, counters)", max(0.0, exploring - accounted)))
    return [("exploring, in all", exploring), *parts]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--target", default="impl")
    parser.add_argument("--level", default="safety")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-examples", type=int, default=150)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--blocks", type=int, default=8)
    args = parser.parse_args(argv)
    # imported here: the profile measures the run, not the imports
    from kvpool.conformance.machines.pool.levels import LEVELS
    from kvpool.conformance.machines.pool.runner import run_level
    from kvpool.conformance.targets.loading import choose_profile, load_target
    from kvpool.conformance.targets.registry import describe_target
    from kvpool.spec import get_profile

    target = describe_target(args.target)
    factory, _ = load_target(target)
    chosen = get_profile(choose_profile(target).name)
    profiler = cProfile.Profile(time.process_time)  # CPU time: other work does not count
    profiler.enable()
    result = run_level(
        factory,
        chosen,
        LEVELS[args.level],
        max_examples=args.max_examples,
        steps=args.steps,
        seed=args.seed,
        max_blocks=args.blocks,
    )
    profiler.disable()
    steps = max(1, result.record.steps)
    parts = breakdown(Profile(pstats.Stats(profiler)))
    whole = parts[0][1] or 1.0
    print(f"{args.target} pool/{args.level} seed {args.seed}: {result.record.steps} steps")
    print("| part | seconds | µs per step | share |")
    print("|---|---:|---:|---:|")
    for name, seconds in parts:
        print(f"| {name} | {seconds:.2f} | {seconds / steps * 1e6:.0f} | {seconds / whole:.0%} |")


if __name__ == "__main__":
    main()
