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

from .measure import (
    Contender,
    Disagreement,
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
#: Aims of issue 7: ours/vLLM throughput, per-op cost growth smallest->largest, memory.
AIM_RATIO = 1.3
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
) -> dict[str, Any]:
    """Verify, time and weigh every (workload, size); the JSON-ready report."""
    cells: list[Cell] = []
    disagreements: list[Disagreement] = []
    mem: list[dict[str, Any]] = []
    steps = len(workloads) * len(sizes) * (repeat + 1) + (len(sizes) if memory else 0)
    task = progress.add_task("bench", total=steps) if progress else None

    def tick(what: str) -> None:
        if progress is not None and task is not None:
            progress.update(task, advance=1, description=what)

    ours_c, other_c = contenders
    for size in sizes:
        n_ops = large_ops if size >= 1_000_000 else ops
        for workload in workloads:
            label = f"{workload} @ {size:,}"
            prog = build(workload, size, n_ops, seed)
            found = verify(prog, contenders)
            tick(f"verified {label}")
            if found is not None:
                disagreements.append(found)
                if progress is not None:
                    progress.update(task, advance=repeat) if task is not None else None
                continue
            cell = Cell(workload, size, len(prog.timed))
            reqs = [[c.make_request(list(h)) for h in prog.requests] for c in contenders]
            for rep in range(repeat):
                # Interleaved, alternating which pool goes first.
                order = (0, 1) if rep % 2 == 0 else (1, 0)
                times = [0.0, 0.0]
                for k in order:
                    times[k] = time_once(prog, contenders[k], reqs[k])
                cell.ours_seconds.append(times[0])
                cell.vllm_seconds.append(times[1])
                if workload == FLOOR_WORKLOAD:
                    cell.floor_seconds.append(lookup_floor_once(prog))
                tick(f"timing {label} ({rep + 1}/{repeat})")
            cells.append(cell)
        if memory:
            prog = build("prefix-hit", size, min(n_ops, 5000), seed)
            o, v = peak_bytes(prog, ours_c), peak_bytes(prog, other_c)
            mem.append(
                {
                    "num_gpu_blocks": size,
                    "ours_bytes_per_block": round(o / size, 1),
                    "vllm_bytes_per_block": round(v / size, 1),
                }
            )
            tick(f"memory @ {size:,}")
    return _report(
        contenders, cells, disagreements, mem, workloads, sizes, ops, large_ops, repeat, seed
    )


def _report(
    contenders: tuple[Contender, Contender],
    cells: list[Cell],
    disagreements: list[Disagreement],
    mem: list[dict[str, Any]],
    workloads: list[str],
    sizes: list[int],
    ops: int,
    large_ops: int,
    repeat: int,
    seed: int,
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
    for w in workloads:
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
    aims = {
        "throughput_ratio_at_least_1_3": bool(cells) and all(c.ratio >= AIM_RATIO for c in cells),
        "ours_growth_at_most_1_25": all(g["ours"] <= AIM_GROWTH for g in growth.values())
        if growth
        else None,
        "memory_per_block_not_worse": all(
            m["ours_bytes_per_block"] <= m["vllm_bytes_per_block"] for m in mem
        )
        if mem
        else None,
    }
    return {
        "schema": SCHEMA,
        "pools": {"ours": contenders[0].name, "vllm": contenders[1].name},
        "python": platform.python_version(),
        "workloads": workloads,
        "sizes": sizes,
        "calls_per_run": ops,
        "calls_per_run_at_1m": large_ops,
        "repeat": repeat,
        "seed": seed,
        "verified": not disagreements,
        "disagreements": [d.describe() for d in disagreements],
        "results": results,
        "growth": growth,
        "memory": mem,
        "memory_method": (
            "tracemalloc: bytes allocated by pool construction plus the peak allocated "
            "during the prefix-hit workload (whole pool cached), divided by num_gpu_blocks"
        ),
        "aims": aims,
    }


def _short_size(blocks: int) -> str:
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if blocks >= unit and blocks % unit == 0:
            return f"{blocks // unit}{name}"
    return f"{blocks:,}"


def render(console: Console, report: dict[str, Any]) -> None:
    other = report["pools"]["vllm"]
    table = Table(
        title=f"kvpool bench — ours vs {other} (median of {report['repeat']}, interleaved)"
    )
    for col in ("workload", "blocks", "calls", "ours ops/s", f"{other} ops/s", "ours/vLLM"):
        table.add_column(col, justify="left" if col == "workload" else "right")
    for r in report["results"]:
        ratio = r["ratio"]
        style = "green" if ratio >= AIM_RATIO else ("yellow" if ratio >= 1 else "red")
        table.add_row(
            r["workload"],
            f"{r['num_gpu_blocks']:,}",
            f"{r['calls']:,}",
            f"{r['ours_ops_per_s']:,}",
            f"{r['vllm_ops_per_s']:,}",
            f"[{style}]{ratio:.2f}x[/{style}]",
        )
    console.print(table)
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
        for col in ("blocks", "ours B/block", f"{other} B/block"):
            m.add_column(col, justify="right")
        for row in report["memory"]:
            m.add_row(
                f"{row['num_gpu_blocks']:,}",
                f"{row['ours_bytes_per_block']:.1f}",
                f"{row['vllm_bytes_per_block']:.1f}",
            )
        console.print(m)
    aims = report["aims"]

    def mark(value: bool | None) -> str:
        return "n/a" if value is None else ("[green]met[/green]" if value else "[red]missed[/red]")

    console.print(
        f"aims: ours >= {AIM_RATIO}x vLLM everywhere: {mark(aims['throughput_ratio_at_least_1_3'])}"
        f"; growth <= {AIM_GROWTH}x: {mark(aims['ours_growth_at_most_1_25'])}"
        f"; memory/block <= vLLM's: {mark(aims['memory_per_block_not_worse'])}"
    )
    for d in report["disagreements"]:
        console.print(f"[red]pools disagree:[/red] {d}")


def write_chart(report: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException(
            "--chart needs matplotlib: pip install 'kvpool-spec[bench]' "
            "(or pip install 'matplotlib>=3.7')"
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
        ax.set_ylabel("pool calls / s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


_WORKLOAD_LINES = "\n".join(f"  {w:<11} {WORKLOAD_HELP[w]}" for w in WORKLOADS)


@click.command(
    help=f"""Benchmark our BlockPool against a released vLLM's, side by side.

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

\b
Examples:
  kvpool bench                       # 1k, 100k, 1M blocks, all workloads
  kvpool bench --quick               # a smoke run in a few seconds
  kvpool bench --sizes 1000,100000 --json > bench.json
  kvpool bench --chart bench.png     # needs pip install 'kvpool-spec[bench]'
""",
)
@click.option(
    "--vllm",
    "vllm_spec",
    default="vllm==0.33.0",
    show_default=True,
    help="The vLLM release to compare against (as kvpool conform --target).",
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
    help="Run only these workloads.",
)
@click.option(
    "--ops",
    default=20_000,
    show_default=True,
    type=click.IntRange(100),
    help="Timed pool calls per run.",
)
@click.option(
    "--ops-1m",
    "large_ops",
    default=20_000,
    show_default=True,
    type=click.IntRange(100),
    help="Timed pool calls per run at 1M blocks or more.",
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
    help="Measure memory per block (tracemalloc, one extra run per size).",
)
@click.option(
    "--quick", is_flag=True, help="Smoke run: sizes 1000,10000, 2000 calls, 3 repetitions."
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "--chart",
    type=click.Path(dir_okay=False),
    help="Write a PNG of throughput against pool size (log x), per workload.",
)
def bench(
    vllm_spec: str,
    sizes: str,
    workloads: tuple[str, ...],
    ops: int,
    large_ops: int,
    repeat: int,
    memory: bool,
    quick: bool,
    seed: int,
    as_json: bool,
    chart: str | None,
) -> None:
    size_list = _sizes("1000,10000" if quick else sizes)
    if quick:
        ops, large_ops, repeat = 2000, 2000, 3
    chosen = list(workloads) or list(WORKLOADS)
    err = Console(stderr=True)
    try:
        other = vllm(vllm_spec)
    except Exception as exc:  # TargetLoadError and friends: say what to fix
        raise click.ClickException(f"cannot load {vllm_spec}: {exc}") from exc
    with Progress(
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        report = run_bench(
            (ours(), other), chosen, size_list, ops, large_ops, repeat, memory, seed, progress
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
            for d in report["disagreements"]:
                err.print(f"pools disagree: {d}")
        sys.exit(1)


__all__ = ["Program", "bench", "run_bench"]
