"""One workload's timed pool calls on one pool, made inside ``functools.reduce`` so that
callgrind can count the instructions of those calls alone (``--toggle-collect`` on the C
function that runs the loop; everything before it, imports and setup, is not counted):

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=functools_reduce \\
        python -m kvpool.conformance.tools.bench.instructions prefix-hit 1000 ours

prints the number of calls; ``callgrind_annotate`` on the output file gives the total,
and the total over the calls is the instructions per call. An instruction count does not
depend on what else the machine runs, so it can tell two versions of a pool apart where
timings on a shared machine cannot. The pools: ``ours``, ``vllm`` (0.33.0), ``floor``
(:mod:`.floor`) and ``compiled`` (:mod:`.compiled`).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any

import click

from .floor import floor_contender
from .measure import Compiled, Contender, compile_calls, compiled_contender, ours, vllm
from .programs import WORKLOADS, build

POOLS: dict[str, Callable[[], Contender]] = {
    "ours": ours,
    "vllm": lambda: vllm("vllm==0.33.0"),
    "floor": floor_contender,
    "compiled": compiled_contender,
}


def _step(_: Any, call: Compiled) -> None:
    call[0](*call[1])


def run_timed_calls(workload: str, size: int, pool: str, ops: int, seed: int) -> int:
    """Build the pool, replay the setup, then make the timed calls in ``reduce``; their
    number."""
    prog = build(workload, size, ops, seed)
    contender = POOLS[pool]()
    requests = [contender.make_request(list(h)) for h in prog.requests]
    gc.disable()
    made = contender.make_pool(prog.num_gpu_blocks, prog.hash_block_size)
    for fn, args in compile_calls(made, prog.setup, requests):
        fn(*args)
    calls = compile_calls(made, prog.timed, requests)
    functools.reduce(_step, calls, None)
    return len(calls)


@click.command()
@click.argument("workload", type=click.Choice(WORKLOADS))
@click.argument("size", type=click.IntRange(64))
@click.argument("pool", type=click.Choice(sorted(POOLS)))
@click.option("--ops", default=5000, show_default=True, type=click.IntRange(100))
@click.option("--seed", default=0, show_default=True, type=int)
def main(workload: str, size: int, pool: str, ops: int, seed: int) -> None:
    """Make WORKLOAD's timed calls on POOL (of SIZE blocks) for callgrind to count."""
    click.echo(run_timed_calls(workload, size, pool, ops, seed))


if __name__ == "__main__":
    main()
