"""``kvpool bench``: our pool against a released vLLM's, same calls, same order."""

from __future__ import annotations

import json
import platform
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ...install import extra_hint
from ...run_options import seed_option
from ...targets.description import TargetDescription
from ...targets.options import TARGET
from ...usage import EXIT_FINDING
from . import managers
from . import monitor as monitor_bench
from .compiled import CompiledBuildUnavailable
from .measure import (
    Contender,
    Disagreement,
    compiled_contender,
    lookup_floor_once,
    ours,
    peak_bytes,
    time_once,
    verify,
    vllm,
)
from .programs import WORKLOAD_HELP, WORKLOADS, Program, build

SCHEMA = "kvpool-bench/1"
DEFAULT_SIZES = "1000,100000,1000000"
#: Aims for our pool: ours/vLLM throughput (issue 28: 2x on every workload and size), per-op
#: cost growth smallest->largest (issue 7), memory per block.
AIM_RATIO = 2.0
AIM_GROWTH = 1.25
#: The workload whose calls are mostly cache lookups: its lookup floor is timed too.
FLOOR_WORKLOAD = "prefix-hit"


def _sizes(value: str) -> list[int]:
    try:
        sizes = sorted({int(v.replace("_", "")) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"--sizes takes a comma list of ints, not {value!r}") from None
    if not sizes or sizes[0] < 64:
        raise click.BadParameter("--sizes needs pool sizes of at least 64 blocks")
    return sizes


@dataclass
class Cell:
    workload: str
    num_gpu_blocks: int
    calls: int
    ours_seconds: list[float] = field(default_factory=list)
    vllm_seconds: list[float] = field(default_factory=list)
    #: The lookup floor's seconds (:func:`lookup_floor_once`), for FLOOR_WORKLOAD only.
    floor_seconds: list[float] = field(default_factory=list)
    #: The compiled build's seconds (``--compiled``), timed in the same repetitions.
    compiled_seconds: list[float] = field(default_factory=list)

    @property
    def ours_ops(self) -> float:
        return self.calls / statistics.median(self.ours_seconds)

    @property
    def vllm_ops(self) -> float:
        return self.calls / statistics.median(self.vllm_seconds)

    def per_call_us(self, seconds: list[float]) -> float:
        return statistics.median(seconds) / self.calls * 1e6

    @property
    def ratio(self) -> float:
        """The median of the per-repetition ratios (each pair ran back to back)."""
        return statistics.median(
            v / o for o, v in zip(self.ours_seconds, self.vllm_seconds, strict=True)
        )

    @property
    def compiled_ratio(self) -> float:
        """vLLM's time over the compiled build's, median of the repetitions."""
        return statistics.median(
            v / c for c, v in zip(self.compiled_seconds, self.vllm_seconds, strict=True)
        )


def run_bench(
    contenders: tuple[Contender, Contender],
    workloads: list[str],
    sizes: list[int],
    ops: int,
    large_ops: int,
    repeat: int,
    memory: bool,
    seed: int,
    progress: Progress | None = None,
    compiled: Contender | None = None,
) -> dict[str, Any]:
    """Verify, time and weigh every (workload, size); the JSON-ready report. With
    ``compiled`` (our compiled build), it is verified and timed in the same repetitions."""
    cells: list[Cell] = []
    disagreements: list[Disagreement] = []
    mem: list[dict[str, Any]] = []
    steps = len(workloads) * len(sizes) * (repeat + 1) + (len(sizes) if memory else 0)
    task = progress.add_task("bench", total=steps) if progress else None

    def tick(what: str) -> None:
        if progress is not None and task is not None:
            progress.update(task, advance=1, description=what)

    ours_c, other_c = contenders
    timed: list[Contender] = [*contenders, *([compiled] if compiled is not None else [])]
    for size in sizes:
        n_ops = large_ops if size >= 1_000_000 else ops
        for workload in workloads:
            label = f"{workload} @ {size:,}"
            prog = build(workload, size, n_ops, seed)
            found = verify(prog, timed)
            tick(f"verified {label}")
            if found is not None:
                disagreements.append(found)
                if progress is not None:
                    progress.update(task, advance=repeat) if task is not None else None
                continue
            cell = Cell(workload, size, len(prog.timed))
            reqs = [[c.make_request(list(h)) for h in prog.requests] for c in timed]
            for rep in range(repeat):
                # Interleaved, alternating which pool goes first.
                order = list(range(len(timed)))
                if rep % 2:
                    order.reverse()
                times = [0.0] * len(timed)
                for k in order:
                    times[k] = time_once(prog, timed[k], reqs[k])
                cell.ours_seconds.append(times[0])
                cell.vllm_seconds.append(times[1])
                if compiled is not None:
                    cell.compiled_seconds.append(times[2])
                if workload == FLOOR_WORKLOAD:
                    cell.floor_seconds.append(lookup_floor_once(prog))
                tick(f"timing {label} ({rep + 1}/{repeat})")
            cells.append(cell)
        if memory:
            prog = build("prefix-hit", size, min(n_ops, 5000), seed)
            o, v = peak_bytes(prog, ours_c), peak_bytes(prog, other_c)
            weighed = {
                "num_gpu_blocks": size,
                "ours_bytes_per_block": round(o / size, 1),
                "vllm_bytes_per_block": round(v / size, 1),
            }
            if compiled is not None:
                weighed["compiled_bytes_per_block"] = round(peak_bytes(prog, compiled) / size, 1)
            mem.append(weighed)
            tick(f"memory @ {size:,}")
    report = _report(
        (contenders[0].name, contenders[1].name),
        cells,
        [d.describe() for d in disagreements],
        mem,
        workloads,
        sizes,
        ops,
        large_ops,
        repeat,
        seed,
    )
    if compiled is not None:
        _add_compiled(report, compiled.name, cells)
    return report


def _add_compiled(report: dict[str, Any], name: str, cells: list[Cell]) -> None:
    """The compiled build's figures beside ours in each row, and its throughput aim."""
    report["pools"]["compiled"] = name
    for row, cell in zip(report["results"], cells, strict=True):
        row["compiled_ops_per_s"] = round(cell.calls / statistics.median(cell.compiled_seconds))
        row["compiled_ratio"] = round(cell.compiled_ratio, 3)
        row["compiled_seconds"] = [round(s, 6) for s in cell.compiled_seconds]
    report["aims"]["compiled_throughput_ratio_at_least_2"] = bool(cells) and all(
        c.compiled_ratio >= AIM_RATIO for c in cells
    )


def run_manager_bench(
    contenders: tuple[managers.ManagerContender, managers.ManagerContender],
    sizes: list[int],
    ops: int,
    large_ops: int,
    repeat: int,
    seed: int,
    progress: Progress | None = None,
    spec_hashed: managers.ManagerContender | None = None,
) -> dict[str, Any]:
    """The request workload through two KV cache managers: per size, the steps are
    recorded, verified on both side by side (tables, free counts and block hashes after
    every step), then timed twice per repetition, interleaved: hashing included, and with
    each manager's digests precomputed (its own work alone). With ``spec_hashed`` (ours on
    the spec's hashing) that one is verified and timed beside them too. The JSON-ready
    report."""
    cells: list[Cell] = []
    disagreements: list[managers.StepDisagreement] = []
    skipped: list[str] = []
    runs = [
        (workload, size)
        for size in sizes
        for workload in managers.PROGRAMS
        if workload != managers.LONG or size >= managers.LONG_MIN_BLOCKS
    ]
    for size in sizes:
        if size < managers.LONG_MIN_BLOCKS:
            skipped.append(
                f"{managers.LONG} @ {size:,} blocks: its longest prompt needs "
                f"{managers.LONG_MIN_BLOCKS:,}"
            )
    task = progress.add_task("bench", total=len(runs) * (repeat + 1)) if progress else None

    def tick(what: str, steps: int = 1) -> None:
        if progress is not None and task is not None:
            progress.update(task, advance=steps, description=what)

    for workload, size in runs:
        n_ops = large_ops if size >= 1_000_000 else ops
        if workload == managers.LONG:
            n_ops = max(1, n_ops // managers.LONG_STEPS_DIVISOR)
        label = f"{workload} @ {size:,}"
        prog = managers.record(size, n_ops, seed, workload=workload)
        digests = [managers.Digests(c.hash_function) for c in contenders]
        extra = [spec_hashed] if spec_hashed is not None else []
        found = managers.verify(prog, [*contenders, *extra], [*digests, *[None for _ in extra]])
        tick(f"verified {label}")
        if found is not None:
            disagreements.append(found)
            tick(f"skipped {label}", repeat)
            continue
        with_hashing, prehashed, on_spec = managers.PROGRAMS[workload]
        hashing = Cell(with_hashing, size, len(prog.actions))
        alone = Cell(prehashed, size, len(prog.actions))
        spec_cell = Cell(on_spec, size, len(prog.actions))
        for rep in range(repeat):
            # Interleaved, alternating which manager goes first.
            order = (0, 1) if rep % 2 == 0 else (1, 0)
            for cell, hash_functions in (
                (hashing, (None, None)),
                (alone, [d.lookup for d in digests]),
            ):
                times = [0.0, 0.0]
                for k in order:
                    times[k] = managers.time_once(prog, contenders[k], hash_functions[k])
                cell.ours_seconds.append(times[0])
                cell.vllm_seconds.append(times[1])
                if spec_hashed is not None and cell is hashing:
                    # beside the same run of vLLM's, hashing its own way
                    spec_cell.ours_seconds.append(managers.time_once(prog, spec_hashed))
                    spec_cell.vllm_seconds.append(times[1])
            tick(f"timing {label} ({rep + 1}/{repeat})")
        cells += [hashing, alone, *([spec_cell] if spec_hashed is not None else [])]
        del digests, prog  # a long program's digests are large: not kept past its size
    report = _report(
        (contenders[0].name, contenders[1].name),
        cells,
        [d.describe() for d in disagreements],
        [],
        list(managers.WORKLOADS),
        sizes,
        ops,
        large_ops,
        repeat,
        seed,
        level="manager",
    )
    report["skipped"] = skipped
    report["long_prompt_steps_divisor"] = managers.LONG_STEPS_DIVISOR
    return report


def _report(
    names: tuple[str, str],
    cells: list[Cell],
    disagreements: list[str],
    mem: list[dict[str, Any]],
    workloads: list[str],
    sizes: list[int],
    ops: int,
    large_ops: int,
    repeat: int,
    seed: int,
    level: str = "pool",
) -> dict[str, Any]:
    results = [
        {
            "workload": c.workload,
            "num_gpu_blocks": c.num_gpu_blocks,
            "calls": c.calls,
            "ours_ops_per_s": round(c.ours_ops),
            "vllm_ops_per_s": round(c.vllm_ops),
            "ratio": round(c.ratio, 3),
            "ours_seconds": [round(s, 6) for s in c.ours_seconds],
            "vllm_seconds": [round(s, 6) for s in c.vllm_seconds],
            "floor_seconds": [round(s, 6) for s in c.floor_seconds],
        }
        for c in cells
    ]
    growth: dict[str, dict[str, float]] = {}
    # The managers' workload changes with the pool's size (a small pool refuses and
    # preempts), so only the pools' per-call cost growth is reported.
    for w in workloads if level == "pool" else ():
        row = sorted((c for c in cells if c.workload == w), key=lambda c: c.num_gpu_blocks)
        if len(row) >= 2:
            first, last = row[0], row[-1]
            growth[w] = {
                "from": first.num_gpu_blocks,
                "to": last.num_gpu_blocks,
                "ours": round(first.ours_ops / last.ours_ops, 3),
                "vllm": round(first.vllm_ops / last.vllm_ops, 3),
                # What the larger pool adds to each call, in microseconds.
                "ours_added_us": round(
                    last.per_call_us(last.ours_seconds) - first.per_call_us(first.ours_seconds), 3
                ),
                "vllm_added_us": round(
                    last.per_call_us(last.vllm_seconds) - first.per_call_us(first.vllm_seconds), 3
                ),
            }
            if first.floor_seconds and last.floor_seconds:
                floor_added = last.per_call_us(last.floor_seconds) - first.per_call_us(
                    first.floor_seconds
                )
                ours_small = first.per_call_us(first.ours_seconds)
                growth[w]["floor_added_us"] = round(floor_added, 3)
                # The least growth a pool as fast as ours at the smallest size could show:
                # it pays at least the floor's added time on each call.
                growth[w]["least_growth_at_ours_speed"] = round(
                    (ours_small + max(floor_added, 0.0)) / ours_small, 3
                )
    # Issue 7's aims are the pool's; the managers' comparison has none.
    aims = {} if level != "pool" else _aims(cells, growth, mem)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "level": level,
        "pools": {"ours": names[0], "vllm": names[1]},
        "python": platform.python_version(),
        "workloads": workloads,
        "sizes": sizes,
        "calls_per_run": ops,
        "calls_per_run_at_1m": large_ops,
        "repeat": repeat,
        "seed": seed,
        "verified": not disagreements,
        "disagreements": disagreements,
        "results": results,
        "growth": growth,
        "memory": mem,
        "memory_method": (
            "tracemalloc: bytes allocated by pool construction plus the peak allocated "
            "during the prefix-hit workload (whole pool cached), divided by num_gpu_blocks"
        ),
        "aims": aims,
    }
    if level == "manager":
        report["memory_method"] = "not measured for managers"
        report["block_size"] = report["hash_block_size"] = managers.BLOCK_SIZE
        report["timing"] = managers.TIMING
    return report


def _aims(
    cells: list[Cell], growth: dict[str, dict[str, float]], mem: list[dict[str, Any]]
) -> dict[str, bool | None]:
    """The aims for our pool: throughput (issue 28), per-call cost growth (issue 7), memory
    per block."""
    return {
        "throughput_ratio_at_least_2": bool(cells) and all(c.ratio >= AIM_RATIO for c in cells),
        "ours_growth_at_most_1_25": all(g["ours"] <= AIM_GROWTH for g in growth.values())
        if growth
        else None,
        "memory_per_block_not_worse": all(
            m["ours_bytes_per_block"] <= m["vllm_bytes_per_block"] for m in mem
        )
        if mem
        else None,
    }


def _short_size(blocks: int) -> str:
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if blocks >= unit and blocks % unit == 0:
            return f"{blocks // unit}{name}"
    return f"{blocks:,}"


def render(console: Console, report: dict[str, Any]) -> None:
    other = report["pools"]["vllm"]
    pools = report.get("level", "pool") == "pool"
    calls, ops = ("calls", "ops/s") if pools else ("steps", "steps/s")
    table = Table(
        title=f"kvpool bench — ours vs {other} (median of {report['repeat']}, interleaved)"
    )
    shown = other if pools else "vLLM"  # the managers' name is in the title
    with_compiled = "compiled" in report["pools"]
    headers = ["workload", "blocks", calls, f"ours {ops}", f"{shown} {ops}", "ours/vLLM"]
    if with_compiled:
        headers += [f"compiled {ops}", "compiled/vLLM"]
    for col in headers:
        table.add_column(col, justify="left" if col == "workload" else "right")

    def shown_ratio(ratio: float) -> str:
        style = "green" if ratio >= AIM_RATIO else ("yellow" if ratio >= 1 else "red")
        return f"[{style}]{ratio:.2f}x[/{style}]"

    for r in report["results"]:
        cells = [
            r["workload"],
            f"{r['num_gpu_blocks']:,}",
            f"{r['calls']:,}",
            f"{r['ours_ops_per_s']:,}",
            f"{r['vllm_ops_per_s']:,}",
            shown_ratio(r["ratio"]),
        ]
        if with_compiled:
            cells += [f"{r['compiled_ops_per_s']:,}", shown_ratio(r["compiled_ratio"])]
        table.add_row(*cells)
    console.print(table)
    if with_compiled:
        console.print(f"compiled: {report['pools']['compiled']}")
    if report["growth"]:
        g = Table(title="per-call cost growth (cost at largest / cost at smallest size)")
        columns = (
            "workload",
            "sizes",
            "ours",
            "vLLM",
            "ours +µs",
            "vLLM +µs",
            "floor +µs",
            "least",
        )
        for col in columns:
            g.add_column(col, justify="left" if col == "workload" else "right", no_wrap=True)
        for w, row in report["growth"].items():
            floor = "floor_added_us" in row
            g.add_row(
                w,
                f"{_short_size(row['from'])}->{_short_size(row['to'])}",
                f"{row['ours']:.2f}x",
                f"{row['vllm']:.2f}x",
                f"{row['ours_added_us']:+.3f}",
                f"{row['vllm_added_us']:+.3f}",
                f"{row['floor_added_us']:+.3f}" if floor else "",
                f"{row['least_growth_at_ours_speed']:.2f}x" if floor else "",
            )
        console.print(g)
        if any("floor_added_us" in row for row in report["growth"].values()):
            console.print(
                "+µs: the time the largest pool adds to each call. floor: a plain dict doing "
                "only the workload's lookups, the least work any prefix cache does. least: "
                "the growth of a pool as fast as ours at the smallest size whose larger pool "
                "added only the floor's time to each call."
            )
    if report["memory"]:
        m = Table(title="peak memory per block (tracemalloc; construction + prefix-hit run)")
        weighed = ["blocks", "ours B/block", f"{other} B/block"]
        if with_compiled:
            weighed.append("compiled B/block")
        for col in weighed:
            m.add_column(col, justify="right")
        for row in report["memory"]:
            m.add_row(
                f"{row['num_gpu_blocks']:,}",
                f"{row['ours_bytes_per_block']:.1f}",
                f"{row['vllm_bytes_per_block']:.1f}",
                *([f"{row['compiled_bytes_per_block']:.1f}"] if with_compiled else []),
            )
        console.print(m)
    aims = report["aims"]

    def mark(value: bool | None) -> str:
        return "n/a" if value is None else ("[green]met[/green]" if value else "[red]missed[/red]")

    if aims:
        console.print(
            f"aims: ours >= {AIM_RATIO}x vLLM everywhere: "
            f"{mark(aims['throughput_ratio_at_least_2'])}"
            f"; growth <= {AIM_GROWTH}x: {mark(aims['ours_growth_at_most_1_25'])}"
            f"; memory/block <= vLLM's: {mark(aims['memory_per_block_not_worse'])}"
            + (
                f"; compiled >= {AIM_RATIO}x vLLM everywhere: "
                f"{mark(aims['compiled_throughput_ratio_at_least_2'])}"
                if with_compiled
                else ""
            )
        )
    for skipped in report.get("skipped", []):
        console.print(f"not run: {skipped}")
    for d in report["disagreements"]:
        console.print(f"[red]{'pools' if pools else 'managers'} disagree:[/red] {d}")
    if not pools and report["disagreements"]:
        console.print("no ratio is reported for a size whose managers disagree")


def _bench_monitor(sizes: list[int], ops: int, repeat: int, seed: int, as_json: bool) -> None:
    """``--monitor``: see :mod:`.monitor`."""
    contenders = list(monitor_bench.CONTENDERS)
    missing = monitor_bench.dynamo_missing()
    if missing:
        contenders.remove("dynamo RadixTree")
        Console(stderr=True).print(f"not timed beside Dynamo: {missing}")
    report = monitor_bench.run(contenders, sizes, ops, repeat, seed)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    table = Table(title=f"kvpool monitor: events per second (CPU time), {ops} events a run")
    for column in ("contender", "keys held", "events/s (median)", "slowest", "bytes/key", "runs"):
        table.add_column(column, justify="left" if column == "contender" else "right")
    for row in monitor_bench.summary(report):
        table.add_row(
            row["contender"],
            f"{row['keys_held']:,}",
            f"{row['events_per_second']:,.0f}",
            f"{row['slowest']:,.0f}",
            f"{row['bytes_per_key']:,.0f}",
            str(row["runs"]),
        )
    Console().print(table)


def write_chart(report: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException(
            f"--chart needs matplotlib: {extra_hint('bench')} (or pip install 'matplotlib>=3.7')"
        ) from None
    workloads = report["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.6), squeeze=False)
    for ax, w in zip(axes[0], workloads, strict=True):
        rows = sorted(
            (r for r in report["results"] if r["workload"] == w), key=lambda r: r["num_gpu_blocks"]
        )
        xs = [r["num_gpu_blocks"] for r in rows]
        ax.plot(xs, [r["ours_ops_per_s"] for r in rows], "o-", label=report["pools"]["ours"])
        ax.plot(xs, [r["vllm_ops_per_s"] for r in rows], "s--", label=report["pools"]["vllm"])
        ax.set_xscale("log")
        ax.set_title(w)
        ax.set_xlabel("pool size (blocks)")
        ax.set_ylabel("pool calls / s" if report.get("level", "pool") == "pool" else "steps / s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


_WORKLOAD_LINES = "\n".join(f"  {w:<11} {WORKLOAD_HELP[w]}" for w in WORKLOADS)


@click.command(
    help=f"""Benchmark our BlockPool (or, with --manager vllm, our KVCacheManager) against a
released vLLM's, side by side.

Each workload is first written down as pool calls (block ids, hashes), then replayed on
a fresh pool of each kind: the same calls in the same order. A verification pass runs
them on both pools call by call and compares every result (blocks by id); if the pools
ever disagree the command says where and exits 1. The timed runs then alternate between
the pools (which goes first alternates too), with the garbage collector off and the
process's CPU time as the clock (other processes on the machine do not count), and report
medians: pool calls per second, and ours/vLLM as the median of the per-run ratios. Each
lookup brings a hash object of its own, equal to the cached one, as a new request does.
Per-call cost growth compares the smallest and largest --sizes. For prefix-hit the same
runs also time a floor: a plain dict doing nothing but the workload's lookups, the least
work any prefix cache does; the time a larger pool adds to the floor's calls is what memory
alone adds, so the table shows the least growth a pool as fast as ours could reach. Memory
per block is measured with tracemalloc (construction plus a prefix-hit run over a fully
cached pool).

\b
Workloads (--workload, repeatable; default all):
{_WORKLOAD_LINES}

--manager vllm compares the managers instead: the request workload is written down as
request steps (admit, resume, append, compute, preempt, finish; --ops of them), decided
by running it on our KVCacheManager, then replayed on ours and on the release's own
KVCacheManager (its coordinator and single-type manager over its BlockPool, driven with the
calls vLLM's scheduler makes; one full-attention group, block size 16, hashed every 16
tokens). The verification pass compares every step's answer (block tables, computed
tokens, copies), the free block count and the step's request's block hashes (ours hashes
as the release does, byte for byte); at the first difference it names the step and the
request, reports no ratio for that size and exits 1. The same steps are timed three ways
per repetition: 'requests', as they are (both sides hash the tokens with the release's
default hash function: ours in admit and append, vLLM's in its request), 'requests,
prehashed', where each manager's block digests, computed beforehand, come from a dict (the
manager's own work alone), and 'requests, ours on the spec's hashing' (ours with its
default, the spec's canonical encoding). A second program, 'long prompts' (8k to 128k
tokens after one of 4 shared 8k-token prefixes, a 32,000-token vocabulary, --ops/20
steps), is timed the same three ways on every size of 8,200 blocks or more (smaller ones
are listed as not run): there hashing is most of the work. No memory or growth figures for
managers.

\b
Examples:
  kvpool bench                       # 1k, 100k, 1M blocks, all workloads
  kvpool bench --quick               # a smoke run in a few seconds
  kvpool bench --sizes 1000,100000 --json > bench.json
  kvpool bench --chart bench.png     # needs the bench extra (matplotlib)
  kvpool bench --compiled            # also our pool compiled by mypyc (built once)
  kvpool bench --manager vllm --target vllm==0.33.0   # the managers, side by side
  kvpool bench --monitor --sizes 1000,1000000 --ops 200000   # kvpool monitor's speed

--monitor times kvpool monitor instead: a recording of vLLM 0.33's wire frames holding
--sizes keys, then --ops events of steady churn, judged by the count and the set consumer
and applied to NVIDIA Dynamo's RadixTree (when ai-dynamo-runtime is installed), each in a
fresh process: events per second (CPU time) and memory per held key (resident memory).
""",
)
@click.option(
    "--vllm",
    "--target",
    "vllm_spec",
    default="vllm==0.33.0",
    show_default=True,
    type=TARGET,
    help="The vLLM release to compare against (vllm==X.Y.Z, vllm@PATH or the installed "
    "vllm, as kvpool conform --target).",
)
@click.option(
    "--manager",
    type=click.Choice(["none", "vllm"]),
    default="none",
    show_default=True,
    help="'vllm': compare the release's own KVCacheManager with ours on the request "
    "workload, instead of the pools on pool calls.",
)
@click.option(
    "--sizes",
    default=DEFAULT_SIZES,
    show_default=True,
    help="Pool sizes in blocks, comma separated.",
)
@click.option(
    "--workload",
    "-w",
    "workloads",
    multiple=True,
    type=click.Choice(WORKLOADS),
    help="Run only these workloads (pools only; --manager vllm runs the request workload).",
)
@click.option(
    "--ops",
    default=20_000,
    show_default=True,
    type=click.IntRange(100),
    help="Timed pool calls per run (request steps with --manager vllm).",
)
@click.option(
    "--ops-1m",
    "large_ops",
    default=20_000,
    show_default=True,
    type=click.IntRange(100),
    help="Timed pool calls (request steps) per run at 1M blocks or more.",
)
@click.option(
    "--repeat",
    "-n",
    default=7,
    show_default=True,
    type=click.IntRange(1),
    help="Timed runs per pool per (workload, size).",
)
@click.option(
    "--memory/--no-memory",
    default=True,
    show_default=True,
    help="Measure memory per block (tracemalloc, one extra run per size; pools only).",
)
@click.option(
    "--quick", is_flag=True, help="Smoke run: sizes 1000,10000, 2000 calls, 3 repetitions."
)
@click.option(
    "--compiled",
    is_flag=True,
    help="Also time our pool's compiled build (mypyc; built once into ~/.cache/kvpool, "
    "needs mypy and a C compiler) in the same repetitions: pools only.",
)
@click.option(
    "--monitor",
    "on_monitor",
    is_flag=True,
    help="Time kvpool monitor's judging (count and set consumers) with --sizes keys held, "
    "beside Dynamo's RadixTree on the same recording: events per second, bytes per key.",
)
@click.option(
    "--wire",
    is_flag=True,
    help="Time the wire protocol instead: the pool machine's lockstep runs (every level, "
    "the same seed) on our pool in process and served over the protocol by a child process "
    "(python -m kvpool.conformance.wire.serve impl), and the replay of the seed profile's "
    "test vectors (sequences known in advance: batches); --repeat repetitions, 50 test "
    "cases per level (20 with --quick).",
)
@seed_option(0)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "--chart",
    type=click.Path(dir_okay=False),
    help="Write a PNG of throughput against pool size (log x), per workload.",
)
@click.pass_context
def bench(
    context: click.Context,
    vllm_spec: TargetDescription,
    manager: str,
    sizes: str,
    workloads: tuple[str, ...],
    ops: int,
    large_ops: int,
    repeat: int,
    memory: bool,
    quick: bool,
    compiled: bool,
    on_monitor: bool,
    wire: bool,
    seed: int,
    as_json: bool,
    chart: str | None,
) -> None:
    size_list = _sizes("1000,10000" if quick else sizes)
    if quick:
        ops, large_ops, repeat = 2000, 2000, 3
    if on_monitor:
        _bench_monitor(size_list, ops, repeat, seed, as_json)
        return
    if wire:
        from ...wire.bench import render_wire, run_wire_bench

        wire_report = run_wire_bench("impl", 20 if quick else 50, repeat, seed)
        if as_json:
            click.echo(json.dumps(wire_report, indent=2, sort_keys=True))
        else:
            render_wire(Console(), wire_report)
        return
    chosen = list(workloads) or list(WORKLOADS)
    on_managers = manager == "vllm"
    if on_managers:
        if workloads:
            raise click.BadParameter(
                "--manager vllm runs the request workload only: leave --workload out",
                param_hint="--workload",
            )
        explicit = context.get_parameter_source("memory") is not click.core.ParameterSource.DEFAULT
        if memory and explicit:
            raise click.BadParameter(
                "--manager vllm measures time only: leave --memory out", param_hint="--memory"
            )
        if compiled:
            raise click.BadParameter(
                "--compiled builds our pool, not our manager: leave it out with --manager vllm",
                param_hint="--compiled",
            )
    compiled_pool = None
    if compiled:
        try:
            compiled_pool = compiled_contender()
        except CompiledBuildUnavailable as exc:
            raise click.ClickException(f"--compiled: {exc}") from exc
    err = Console(stderr=True)
    try:
        if on_managers:
            release = managers.vllm(vllm_spec)
            manager_pair = (managers.ours(release.profile, release.hashing), release.contender)
            spec_hashed = managers.ours(release.profile)
        else:
            pool_pair = (ours(), vllm(vllm_spec))
    except Exception as exc:  # TargetLoadError and friends: say what to fix
        raise click.ClickException(f"cannot load {vllm_spec.text}: {exc}") from exc
    with Progress(
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        if on_managers:
            report = run_manager_bench(
                manager_pair, size_list, ops, large_ops, repeat, seed, progress, spec_hashed
            )
        else:
            report = run_bench(
                pool_pair,
                chosen,
                size_list,
                ops,
                large_ops,
                repeat,
                memory,
                seed,
                progress,
                compiled=compiled_pool,
            )
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        render(Console(), report)
    if chart:
        write_chart(report, chart)
        err.print(f"chart written to {chart}")
    if not report["verified"]:
        if as_json:
            which = "managers" if on_managers else "pools"
            for d in report["disagreements"]:
                err.print(f"{which} disagree: {d}")
        sys.exit(EXIT_FINDING)


__all__ = ["Program", "bench", "run_bench", "run_manager_bench"]
