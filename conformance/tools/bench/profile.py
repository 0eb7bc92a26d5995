"""Where our manager's time goes on the bench's request workload: a cProfile of the steps.

    python -m kvpool.conformance.tools.bench.profile 1000 100000      # pool sizes in blocks
    python -m kvpool.conformance.tools.bench.profile --steps 2000 --workload "long prompts" 100000

The steps are those ``kvpool bench --manager vllm`` times (recorded on our manager, seed 0),
replayed on a fresh manager under cProfile with hashing included: hashing as vLLM 0.33.0
does (``sha256``, what the bench's like-for-like rows time), or with ``--spec-hashing``
the spec's canonical encoding. cProfile makes every
Python call dearer, so the absolute times are not the bench's: read the shares. Each
share is the cumulative time of the functions named beside it over the whole run; a share
may hold another (the prefix lookup hashes as far as it reads).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys

from kvpool.spec import get_profile

from . import managers

#: Each share's label and the functions (by name) whose cumulative time it is.
SHARES = (
    ("hashing the tokens", ("_extend_block_hashes",)),
    ("checking the tokens", ("_checked_tokens",)),
    ("the prefix lookup (with its hashing)", ("_find_cached_prefix",)),
    ("pool lookups", ("get_cached_prefix", "get_cached_block")),
    ("pool allocations and touches", ("get_new_blocks", "touch")),
    ("pool registrations", ("cache_full_blocks",)),
    ("pool frees", ("free_blocks",)),
)


#: The release whose hashing the profile's manager takes unless told the spec's.
HASHED_LIKE = "0.33.0"


def profile(
    num_gpu_blocks: int, steps: int, workload: str, spec_hashing: bool = False
) -> pstats.Stats:
    """The profile of ``steps`` recorded steps of ``workload`` on our manager."""
    from kvpool.impl.release_hashing import vllm_hashing

    prog = managers.record(num_gpu_blocks, steps, workload=workload)
    hashing = None if spec_hashing else vllm_hashing(HASHED_LIKE)
    target = managers.ours(get_profile("seed"), hashing).make(prog.setup, None)
    calls = [managers.compile_action(target, action) for action in prog.actions]
    profiler = cProfile.Profile()
    profiler.enable()
    for fn, args in calls:
        fn(*args)
    profiler.disable()
    return pstats.Stats(profiler)


def shares(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Each share of :data:`SHARES` as a fraction of the whole run."""
    total: float = stats.total_tt  # type: ignore[attr-defined]
    table = stats.stats  # type: ignore[attr-defined]
    out = []
    for label, names in SHARES:
        spent = sum(row[3] for key, row in table.items() if key[2] in names)
        out.append((label, spent / total if total else 0.0))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvpool.conformance.tools.bench.profile",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("sizes", nargs="+", type=int, help="pool sizes in blocks")
    parser.add_argument("--steps", type=int, default=5000, help="request steps (default 5000)")
    parser.add_argument("--workload", choices=sorted(managers.PROGRAMS), default=managers.WORKLOAD)
    parser.add_argument("--top", type=int, default=8, help="functions listed by own time")
    parser.add_argument(
        "--spec-hashing",
        action="store_true",
        help=f"hash with the spec's encoding (default: as vLLM {HASHED_LIKE} does)",
    )
    args = parser.parse_args(argv)
    if any(size < 64 for size in args.sizes) or args.steps < 1:
        parser.error("sizes of at least 64 blocks and at least one step, please")
    for size in args.sizes:
        stats = profile(size, args.steps, args.workload, args.spec_hashing)
        hashed = "the spec's" if args.spec_hashing else f"vLLM {HASHED_LIKE}'s"
        print(f"{args.workload} @ {size:,} blocks, {args.steps:,} steps, {hashed} hashing:")
        for label, share in shares(stats):
            print(f"  {share:6.1%}  {label}")
        stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
