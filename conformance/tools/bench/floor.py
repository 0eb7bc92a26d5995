"""The floor of a pure-Python pool: the least work the bench's workloads can be done with.

:class:`FloorPool` does nothing but the pointer moves and index updates each call must make
to hand out, take back and look up the same blocks as vLLM's pool and ours (the same
circular free list around a sentinel, the same dict index): no check of any argument, no
refusal, no null-block or foreign-block handling, no events, one KV cache group, no
duplicate keys, no partial entries. It is not a pool anyone should use; it answers one
question: how fast can *any* interpreted pool of this design run these calls? Its time is
a floor for ours (which checks every refusal the contract demands), and vLLM's time over
it is the most any such pool can be ahead of vLLM's.

It serves the three synthetic workloads (``churn``, ``prefix-hit``, ``cache-full``), whose
calls stay inside what it does; the request workload's partial entries, duplicates and
key moves are outside it. The verification pass checks it returns the same blocks as both
pools before it is timed.

    python -m kvpool.conformance.tools.bench.floor --sizes 1000,100000,1000000

prints, per workload and size, the median of 7 interleaved repetitions of ours, vLLM's,
the floor's and (when built) the compiled build's time, as ratios to vLLM's. With
``--lookups`` it splits the prefix-hit workload instead: its lookups alone (the timed
``get_cached_block`` calls, in their order, on the fully cached pool: they change nothing)
are timed as a program of their own beside the whole workload, and each pool's time is
given per lookup and per other call (touch, allocation, free: the whole time less the
lookups', over their number). The floor pool's lookup is nothing but a dict lookup and a
one-block list, so its time per lookup is the least any Python pool with a dict index can
take to hand back a cached block.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

import click

from .measure import Contender, ours, time_once, verify, vllm
from .programs import Program, build

#: The workloads the floor pool serves.
FLOOR_WORKLOADS = ("churn", "prefix-hit", "cache-full")


class FloorBlock:
    __slots__ = ("block_id", "key", "next_free_block", "prev_free_block", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.key: bytes | None = None
        self.prev_free_block: FloorBlock | None = None
        self.next_free_block: FloorBlock | None = None


class FloorPool:
    """The least a pool does for the synthetic workloads' calls (see the module)."""

    def __init__(self, num_gpu_blocks: int, hash_block_size: int) -> None:
        self.hash_block_size = hash_block_size
        self.blocks = [FloorBlock(i) for i in range(num_gpu_blocks)]
        self.index: dict[bytes, FloorBlock] = {}
        root = self.root = FloorBlock(-1)
        self.spare = FloorBlock(-1)
        prev = root
        for blk in self.blocks[1:]:  # block 0 is the null block: never free
            prev.next_free_block = blk
            blk.prev_free_block = prev
            prev = blk
        prev.next_free_block = root
        root.prev_free_block = prev
        self.num_free_blocks = num_gpu_blocks - 1

    def get_new_blocks(self, num_blocks: int) -> list[FloorBlock]:
        out = []
        index = self.index
        blk = self.root.next_free_block
        for _ in range(num_blocks):
            assert blk is not None
            nxt = blk.next_free_block
            blk.prev_free_block = blk.next_free_block = None
            key = blk.key
            if key is not None:
                del index[key]
                blk.key = None
            blk.ref_cnt = 1
            out.append(blk)
            blk = nxt
        assert blk is not None
        self.root.next_free_block = blk
        blk.prev_free_block = self.root
        self.num_free_blocks -= num_blocks
        return out

    def free_blocks(self, ordered_blocks: Sequence[FloorBlock]) -> None:
        root = self.root
        # Unkeyed blocks are chained after a spare sentinel, in order, and go to the front
        # at the end; keyed ones are linked at the back as they come.
        front = spare = self.spare
        last = root.prev_free_block
        assert last is not None
        freed = 0
        for blk in ordered_blocks:
            rc = blk.ref_cnt - 1
            blk.ref_cnt = rc
            if rc == 0:
                freed += 1
                if blk.key is None:
                    front.next_free_block = blk
                    blk.prev_free_block = front
                    front = blk
                else:
                    last.next_free_block = blk
                    blk.prev_free_block = last
                    last = blk
        last.next_free_block = root
        root.prev_free_block = last
        if front is not spare:
            head = spare.next_free_block
            first = root.next_free_block
            assert head is not None and first is not None
            front.next_free_block = first
            first.prev_free_block = front
            root.next_free_block = head
            head.prev_free_block = root
        self.num_free_blocks += freed

    def touch(self, blocks: Sequence[FloorBlock]) -> None:
        taken = 0
        for blk in blocks:
            rc = blk.ref_cnt
            if rc == 0:
                before = blk.prev_free_block
                after = blk.next_free_block
                assert before is not None and after is not None
                before.next_free_block = after
                after.prev_free_block = before
                blk.prev_free_block = blk.next_free_block = None
                taken += 1
            blk.ref_cnt = rc + 1
        self.num_free_blocks -= taken

    def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Any) -> Any:
        blk = self.index.get(block_hash)
        return None if blk is None else [blk]

    def cache_full_blocks(
        self,
        request: Any,
        blocks: Sequence[FloorBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
    ) -> None:
        hashes = request.block_hashes
        ratio = block_size // self.hash_block_size
        index = self.index
        for j in range(num_cached_blocks, num_full_blocks):
            blk = blocks[j]
            key = hashes[(j + 1) * ratio - 1]
            blk.key = key
            index[key] = blk

    def get_num_free_blocks(self) -> int:
        return self.num_free_blocks


def floor_contender() -> Contender:
    from ...engines.vllm_api.requests import FakeRequest

    return Contender(
        "floor",
        FloorPool,
        lambda hashes: FakeRequest(block_hashes=hashes, all_token_ids=[]),
    )


def timed_interleaved(
    contenders: Sequence[Contender], repeat: int, *progs: Program
) -> list[list[list[float]]]:
    """Verify each of ``progs`` (one set of requests: the first's) on ``contenders``, then
    time them all ``repeat`` times, the contenders interleaved (which goes first
    alternates): seconds per program, per contender, per repetition."""
    for prog in progs:
        found = verify(prog, contenders)
        if found is not None:
            raise click.ClickException(f"pools disagree: {found.describe()}")
    reqs = [[c.make_request(list(h)) for h in progs[0].requests] for c in contenders]
    seconds: list[list[list[float]]] = [[[] for _ in contenders] for _ in progs]
    for rep in range(repeat):
        order = list(range(len(contenders)))
        if rep % 2:
            order.reverse()
        for k in order:
            for p, prog in enumerate(progs):
                seconds[p][k].append(time_once(prog, contenders[k], reqs[k]))
    return seconds


def compare(
    contenders: Sequence[Contender], workload: str, size: int, ops: int, repeat: int, seed: int
) -> dict[str, Any]:
    """Verify, then time ``contenders`` (vLLM's second) interleaved on one program; each
    one's median time and its ratio to vLLM's (the median of the per-repetition ratios)."""
    prog = build(workload, size, ops, seed)
    (seconds,) = timed_interleaved(contenders, repeat, prog)
    other = seconds[1]
    return {
        "workload": workload,
        "num_gpu_blocks": size,
        "calls": len(prog.timed),
        "us_per_call": {
            c.name: round(statistics.median(s) / len(prog.timed) * 1e6, 4)
            for c, s in zip(contenders, seconds, strict=True)
        },
        "vs_vllm": {
            c.name: round(statistics.median(v / o for o, v in zip(s, other, strict=True)), 3)
            for c, s in zip(contenders, seconds, strict=True)
        },
    }


def split_lookups(
    contenders: Sequence[Contender], size: int, ops: int, repeat: int, seed: int
) -> dict[str, Any]:
    """Time prefix-hit whole and its lookups alone on ``contenders`` (vLLM's second),
    interleaved; each one's median µs per lookup and per other call, and vLLM's over it."""
    prog = build("prefix-hit", size, ops, seed)
    lookups = dataclasses.replace(prog, timed=[c for c in prog.timed if c[0] == "get_cached_block"])
    whole, alone = timed_interleaved(contenders, repeat, prog, lookups)
    num_lookups = len(lookups.timed)
    num_other = len(prog.timed) - num_lookups
    per_lookup = [[t / num_lookups * 1e6 for t in s] for s in alone]
    per_other = [
        [(w - a) / num_other * 1e6 for w, a in zip(ws, as_, strict=True)]
        for ws, as_ in zip(whole, alone, strict=True)
    ]

    def versus(values: list[list[float]]) -> dict[str, float]:
        return {
            c.name: round(statistics.median(o / v for v, o in zip(s, values[1], strict=True)), 3)
            for c, s in zip(contenders, values, strict=True)
        }

    return {
        "num_gpu_blocks": size,
        "lookups": num_lookups,
        "other_calls": num_other,
        "us_per_lookup": {
            c.name: round(statistics.median(s), 4)
            for c, s in zip(contenders, per_lookup, strict=True)
        },
        "us_per_other_call": {
            c.name: round(statistics.median(s), 4)
            for c, s in zip(contenders, per_other, strict=True)
        },
        "lookups_vs_vllm": versus(per_lookup),
        "others_vs_vllm": versus(per_other),
    }


@click.command()
@click.option("--sizes", default="1000,100000,1000000", show_default=True)
@click.option("--target", "spec", default="vllm==0.33.0", show_default=True)
@click.option("--ops", default=20_000, show_default=True, type=click.IntRange(100))
@click.option("--repeat", default=7, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--compiled/--no-compiled", default=True, show_default=True)
@click.option(
    "--lookups",
    is_flag=True,
    help="Split prefix-hit: its lookups alone against the rest of its calls.",
)
def main(
    sizes: str, spec: str, ops: int, repeat: int, seed: int, compiled: bool, lookups: bool
) -> None:
    """Time ours, vLLM's, the floor pool and the compiled build side by side; print each
    one's time per call and vLLM's time over it (above 1: faster than vLLM's)."""
    from .compiled import CompiledBuildUnavailable
    from .measure import compiled_contender

    contenders = [ours(), vllm(spec), floor_contender()]
    if compiled:
        try:
            contenders.append(compiled_contender())
        except CompiledBuildUnavailable as exc:
            click.echo(f"(no compiled build: {exc})", err=True)
    names = [c.name for c in contenders]
    if lookups:
        _print_split(contenders, [int(s) for s in sizes.split(",")], ops, repeat, seed)
        return
    header = "| workload | blocks | " + " | ".join(f"{n} µs/call" for n in names)
    header += " | " + " | ".join(f"vLLM / {n}" for n in names if n != names[1]) + " |"
    click.echo(header)
    click.echo("|" + "---|" * (header.count("|") - 1))
    for size in (int(s) for s in sizes.split(",")):
        for workload in FLOOR_WORKLOADS:
            row = compare(contenders, workload, size, ops, repeat, seed)
            us = " | ".join(f"{row['us_per_call'][n]:.3f}" for n in names)
            ratios = " | ".join(f"{row['vs_vllm'][n]:.2f}" for n in names if n != names[1])
            click.echo(f"| {workload} | {size:,} | {us} | {ratios} |")


def _print_split(
    contenders: Sequence[Contender], sizes: Sequence[int], ops: int, repeat: int, seed: int
) -> None:
    names = [c.name for c in contenders]
    others = [n for n in names if n != names[1]]
    header = "| blocks | calls | " + " | ".join(f"{n} µs/lookup, /other" for n in names)
    header += " | " + " | ".join(f"vLLM / {n}: lookups, others" for n in others) + " |"
    click.echo(header)
    click.echo("|" + "---|" * (header.count("|") - 1))
    for size in sizes:
        row = split_lookups(contenders, size, ops, repeat, seed)
        us = " | ".join(
            f"{row['us_per_lookup'][n]:.3f}, {row['us_per_other_call'][n]:.3f}" for n in names
        )
        ratios = " | ".join(
            f"{row['lookups_vs_vllm'][n]:.2f}, {row['others_vs_vllm'][n]:.2f}" for n in others
        )
        calls = f"{row['lookups']:,} + {row['other_calls']:,}"
        click.echo(f"| {size:,} | {calls} | {us} | {ratios} |")


if __name__ == "__main__":
    main()
