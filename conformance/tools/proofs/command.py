"""``kvpool prove``: the Z3 proofs, and bounded model checking of planted faults.

Importing this module runs nothing; the CLI registers :data:`prove` with
``main.add_command(prove)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ...extras import require
from ...usage import EXIT_FINDING, EXIT_PASS, EXIT_UNDECIDED

COUNTING_NOTE = (
    "counting invariants: 'free count = number of free blocks' is proved as the "
    "count-delta lemma (base and step proved by Z3 by induction on m) plus one "
    "quantifier-free obligation per action (free-count:*); 'ref count = holders across "
    "tables' is proved as the concat-count lemma (count of b in t ++ new = count in t + "
    "count in new; base and step proved by Z3 by induction, quantifier-free) plus one "
    "quantifier-free obligation per request table effect (refs-holders:*: append-new, "
    "touch-hits, free-tail, cow-swap, slide-null), with every other request's holders one "
    "symbolic count; the request machine never calls unpin_blocks, and the other pool "
    "actions change neither ref counts nor tables. `--bmc` without --fault checks the free "
    "count and every invariant on every run up to --depth (bounded, not a proof)."
)

HELP = """Prove the block pool's invariants with Z3, over any number of blocks.

\b
Default: every obligation, quantifier-free. The pool's state is a set of Z3 arrays
over a symbolic N (ref counts, free membership, primary keys, the key->block multimap);
each invariant is a predicate of one block and one key, assumed at the blocks an action
touches and proved at a fresh witness block, so each query decides in milliseconds.
get_new_blocks hands out any subset of n free blocks (symbolic n); free_blocks, touch and
unpin_blocks take multisets (a block listed twice is covered). Each obligation is also
run against its named faulty variant, which Z3 must refute with a model (the
'faulty variant' column), and its premises must be satisfiable: a proof that cannot
fail proves nothing. 'unknown' counts as a failure.

\b
--bmc: bounded model checking on a pool of --blocks blocks. With --fault NAME, find the
shortest run (at most --depth steps) on which the planted fault shows, and write it as a
trace file (--out) that `kvpool replay` runs on the faulty pool
(tests/conformance/faulty_pools.py; run from that folder) and on impl. Without --fault,
check every invariant and the free count on all runs up to --depth. Cost grows steeply
with depth: keep it small (4 blocks, depth 8 finds every listed fault in seconds).

\b
Exit status: 0 all proved (with --bmc: the counterexample found and written, or no
violation found); 1 an obligation refuted on the correct encoding (with --bmc: an
invariant broken); 5 undecided: a solver's unknown, a faulty variant not refuted, vacuous
premises, a planted fault --bmc did not find.

\b
Examples:
  kvpool prove
  kvpool prove --quantified --timeout 20
  kvpool prove --list-faults
  kvpool prove --bmc --blocks 4 --depth 8 --fault CachedToFront --out cached.itf.json
"""


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _style(status: str) -> str:
    colour = {"proved": "green", "refuted": "red", "unknown": "yellow", "sat": "green"}
    return f"[{colour.get(status, 'red')}]{status}[/]"


@click.command(name="prove", help=HELP)
@click.option("--bmc", is_flag=True, help="Bounded model checking instead of the proofs.")
@click.option(
    "--blocks",
    type=click.IntRange(2, 8),
    default=4,
    show_default=True,
    help="Blocks of the bounded pool (the null block included).",
)
@click.option(
    "--depth",
    type=click.IntRange(1, 30),
    default=8,
    show_default=True,
    help="Most steps a bounded run may take.",
)
@click.option("--fault", default=None, help="The planted fault to find (see --list-faults).")
@click.option("--list-faults", is_flag=True, help="List the faulty variants and exit.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where --bmc writes the counterexample [default: bmc-FAULT.itf.json].",
)
@click.option(
    "--quantified",
    is_flag=True,
    help="Also prove the inductive obligations with quantified invariants "
    "(a cross-check of the quantifier-free instantiation).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds per Z3 query (with --bmc: per depth).",
)
def prove(
    bmc: bool,
    blocks: int,
    depth: int,
    fault: str | None,
    list_faults: bool,
    out: Path | None,
    quantified: bool,
    timeout: float,
) -> None:
    require("z3", "z3-solver", "kvpool prove")
    from .actions import FAULTS
    from .bmc import BMC_FAULTS

    # wide enough for the tables when the output is not a terminal (logs, CI, tests)
    console = Console(highlight=False)  # the terminal's width, or $COLUMNS, or 80
    if list_faults:
        _list_faults(console)
        return
    if fault is not None and not bmc:
        raise click.UsageError("--fault is for --bmc (the proofs run every faulty variant)")
    if fault is not None and fault not in BMC_FAULTS:
        known = ", ".join(sorted(BMC_FAULTS))
        hint = " (a proof-only fault)" if fault in FAULTS else ""
        raise click.BadParameter(f"{fault!r}{hint}; --bmc knows: {known}", param_hint="--fault")
    if bmc:
        sys.exit(_run_bmc(console, fault, blocks, depth, out, timeout))
    sys.exit(_run_proofs(console, quantified, timeout))


def _list_faults(console: Console) -> None:
    from .actions import FAULTS
    from .bmc import BMC_FAULTS
    from .obligations import all_obligations

    refuting = {o.fault: o.name for o in all_obligations()}
    table = Table(title="faulty variants of the encoded pool")
    for column in (
        "fault",
        "action",
        "what goes wrong",
        "refuted by",
        "--bmc level",
        "faulty pool",
    ):
        table.add_column(column, overflow="fold")
    for f in FAULTS.values():
        table.add_row(
            f.name,
            f.action,
            f.description,
            refuting.get(f.name, "-"),
            BMC_FAULTS.get(f.name, "-"),
            f"faulty_pools:{f.pool}" if f.pool else "-",
        )
    console.print(table)


def _status(solver_status: str) -> int:
    """The exit status of a solver's answer that is not "proved": refuted is a finding,
    anything else (unknown) undecided."""
    from .prover import REFUTED

    return EXIT_FINDING if solver_status == REFUTED else EXIT_UNDECIDED


def _run_proofs(console: Console, quantified: bool, timeout: float) -> int:
    from .obligations import all_obligations
    from .prover import PROVED, REFUTED, premises_satisfiable
    from .prover import prove as run

    table = Table(title="kvpool prove: obligations over an unbounded number of blocks")
    for column in ("obligation", "kind", "status", "time", "faulty variant", "refuted", "premises"):
        table.add_column(column, overflow="fold")  # wrapped, never cut
    #: What did not prove, with the status it gives: a refutation of the correct encoding
    #: is a finding; an unknown, a faulty variant not refuted or vacuous premises leave
    #: the obligation undecided.
    failed: list[tuple[str, tuple[str, ...], str, int]] = []
    total = 0.0
    for ob in all_obligations():
        result = run(ob, timeout)
        bad = run(ob, timeout, fault=ob.fault)
        premises = premises_satisfiable(ob, timeout)
        total += result.seconds + bad.seconds
        table.add_row(
            ob.name,
            ob.kind,
            _style(result.status),
            _fmt(result.seconds),
            ob.fault,
            _style(bad.status) + f" {_fmt(bad.seconds)}",
            _style(premises),
        )
        if result.status != PROVED:
            failed.append(
                (ob.name, result.model, result.reason or result.status, _status(result.status))
            )
        if bad.status != REFUTED:
            failed.append(
                (
                    f"{ob.name} (faulty variant {ob.fault})",
                    (),
                    f"expected refuted, got {bad.status}",
                    EXIT_UNDECIDED,
                )
            )
        if premises != "sat":
            failed.append(
                (f"{ob.name} (premises)", (), f"premises are {premises}: vacuous", EXIT_UNDECIDED)
            )
        if quantified and ob.quantifiable:
            cross = run(ob, timeout, quantified=True)
            total += cross.seconds
            table.add_row(
                f"  {ob.name} (quantified)",
                "cross-check",
                _style(cross.status),
                _fmt(cross.seconds),
                "-",
                "-",
                "-",
            )
            if cross.status != PROVED:
                failed.append(
                    (
                        f"{ob.name} (quantified)",
                        cross.model,
                        cross.reason or cross.status,
                        _status(cross.status),
                    )
                )
    console.print(table)
    console.print(COUNTING_NOTE)
    for name, model, reason, _ in failed:
        console.print(f"[red]FAILED[/red] {name}: {reason}")
        for line in model:
            console.print(f"    {line}")
    if failed:
        return min(status for *_, status in failed)  # a finding before an undecided one
    console.print(f"[green]every obligation proved[/green] (solver time {total:.2f} s)")
    return EXIT_PASS


def _run_bmc(
    console: Console, fault: str | None, blocks: int, depth: int, out: Path | None, timeout: float
) -> int:
    from ...trace.trust import replay_command
    from .bmc import search
    from .counterexample import target_for, trace_of, write_counterexample

    what = f"fault {fault}" if fault else "invariants and free count"
    with Progress(
        TextColumn("[bold]bmc[/bold] {task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(f"{what}: depth 0/{depth}", total=depth)

        def progress(d: int, seconds: float) -> None:
            bar.update(task, completed=d, description=f"{what}: depth {d}/{depth} done")

        result = search(fault, blocks, depth, timeout=timeout, progress=progress)
    table = Table(title=f"kvpool prove --bmc ({blocks} blocks)")
    for column in ("check", "kind", "status", "depth reached", "time"):
        table.add_column(column, overflow="fold")
    if result.unknown:
        status = "unknown"
    elif fault is None:
        status = "violated" if result.found else "no violation"
    else:
        status = "found" if result.found else "not found"
    table.add_row(
        what,
        f"bmc (level {result.level})" if fault else "bmc",
        status,
        str(result.depth_reached),
        _fmt(result.seconds),
    )
    console.print(table)
    if result.unknown:
        console.print(f"[yellow]unknown[/yellow] at depth {result.depth_reached}: undecided")
        return EXIT_UNDECIDED
    if fault is None:
        if result.found:
            console.print("[red]an invariant breaks[/red] on the correct encoding:")
            for i, action in enumerate(result.actions, 1):
                console.print(f"  {i}. {action}")
            return EXIT_FINDING
        console.print(
            f"no violation on any run of up to {depth} steps (bounded check, not a proof)"
        )
        return EXIT_PASS
    if not result.found:  # the planted fault was not found: the check shows nothing
        console.print(f"[red]no run of up to {depth} steps shows {fault}[/red]: undecided")
        return EXIT_UNDECIDED
    console.print(f"shortest run showing {fault} ({result.depth_reached} step(s)):")
    for i, action in enumerate(result.actions, 1):
        console.print(f"  {i}. {action}")
    path = out or Path(f"bmc-{fault}.itf.json")
    written = write_counterexample(result, path)
    target = target_for(fault) or "impl"
    console.print(f"trace written to {written} (target {target}, level {result.level})")
    console.print(
        f"replay it: {replay_command(str(written), trace_of(result).meta)}   (from "
        "tests/conformance, where faulty_pools is importable; --target impl to see impl conform)"
    )
    return EXIT_PASS
