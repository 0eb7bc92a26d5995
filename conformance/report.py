"""Readable output: actions as one-liners, result tables, the failing sequence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from kvpool.spec import Action, PoolConfig
from kvpool.spec.manager import PROPERTIES, RequestAction
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table

from .machines.pool.block_states import BLOCK_STATES
from .machines.pool.coverage import SITUATIONS
from .machines.pool.expectations import Expectation, Expectations
from .machines.pool.runner import Failure, LevelResult
from .machines.pool.state_coverage import ROWS, missed, reachable_cells
from .machines.requests.coverage import REQUEST_SITUATIONS
from .machines.requests.target import RequestSetup


def short(value: object) -> str:
    """A value as it reads in an action line: hashes shortened to 8 hex digits."""
    if isinstance(value, bytes):
        return value.hex()[:8]
    if isinstance(value, tuple) and value and all(isinstance(v, bytes) for v in value):
        return "[" + ", ".join(short(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "[" + ", ".join(short(v) for v in value) + "]"
    return repr(value)


def action_line(action: Action | RequestAction) -> str:
    """``free_blocks(blocks=[3, 2], evict_first=False)`` — the operation and its arguments
    (a field whose metadata says ``listed: omit-default`` only when it is not its default)."""
    args = ", ".join(
        f"{f.name}={short(getattr(action, f.name))}"
        for f in fields(action)
        if f.metadata.get("listed") != "omit-default" or getattr(action, f.name) != f.default
    )
    return f"{action.operation}({args})"


def config_line(config: Any) -> str:
    if isinstance(config, RequestSetup):
        manager = config.manager
        groups = ", ".join(
            f"sliding window of {manager.window_tokens(i)} tokens" if g.is_sliding else "full"
            for i, g in enumerate(manager.groups)
        )
        return (
            f"KVCacheManager(block_size={config.manager.block_size}, groups=[{groups}]) over "
            + config_line(config.pool)
        )
    if not isinstance(config, PoolConfig):
        return "BlockPool(?)"
    peer = f", peer pool of {config.peer_blocks} blocks" if config.peer_blocks else ""
    return (
        f"BlockPool(num_gpu_blocks={config.num_gpu_blocks}, "
        f"enable_caching={config.enable_caching}, "
        f"hash_block_size={config.hash_block_size}, "
        f"enable_kv_cache_events={config.enable_kv_cache_events}){peer}"
    )


#: The results table's columns: the verdict half, then the exploring half (``run`` heads
#: both halves when the table is stacked to fit a narrow terminal).
VERDICT_COLUMNS = ("run", "result", "valid", "rejected", "skipped", "time")
EXPLORING_COLUMNS = ("run", "steps", "steps/s", "ops", "refusals")
#: Wider than any results table: measured in it, a table shows its natural width.
NATURAL_WIDTH = 1000
RESULTS_COLUMNS = (
    "run",
    "result",
    "valid",
    "rejected",
    "skipped",
    "steps",
    "steps/s",
    "ops",
    "refusals",
    "time",
)


class ResultsTable:
    """The results table, one row per run: its verdict, the valid test cases it ran and
    those it dropped (rejected: ran into a known finding; skipped: draws outside the
    contract, not run), its steps and their rate while exploring, and its time (shrinking
    included). On a terminal too narrow for its ten columns it is printed as two tables
    stacked, the verdict and the exploring, each row led by its run: nothing is cut."""

    def __init__(self, title: str, rows: list[dict[str, str]]) -> None:
        self.title = title
        self.rows = rows

    def table(self, columns: tuple[str, ...], title: str) -> Table:
        table = Table(title=title)
        for column in columns:
            table.add_column(
                column, justify="left" if column in ("run", "result") else "right", no_wrap=True
            )
        for row in self.rows:
            table.add_row(*(row[column] for column in columns))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = self.table(RESULTS_COLUMNS, self.title)
        unbounded = options.update_width(NATURAL_WIDTH)  # a measure is clamped to its width
        if Measurement.get(console, unbounded, wide).maximum <= options.max_width:
            yield wide
            return
        yield self.table(VERDICT_COLUMNS, self.title)
        yield self.table(EXPLORING_COLUMNS, "exploring: steps, their rate, operations, refusals")


def results_table(target: str, profile: str, results: list[LevelResult]) -> ResultsTable:
    """The results table of ``results`` (:class:`ResultsTable`)."""
    rows = [
        {
            "run": r.label,
            "result": _verdict(r),
            "valid": str(r.valid),
            "rejected": str(r.record.rejected),
            "skipped": str(r.record.skipped),
            "steps": str(r.record.steps),
            "steps/s": f"{r.steps_per_second:,.0f}",
            "ops": str(len(r.record.operations)),
            "refusals": str(sum(r.record.refusals.values())) if r.level.out_of_contract else "-",
            "time": f"{r.seconds:.1f}s",
        }
        for r in results
    ]
    return ResultsTable(f"kvpool conform — target {target}, profile {profile}", rows)


def _verdict(r: LevelResult) -> str:
    if r.failures:
        count = f" ({len(r.failures)})" if len(r.failures) > 1 else ""
        return f"[red]FAIL{count}[/red]"
    if r.too_few_valid is not None:
        return "[red]TOO FEW VALID[/red]"
    return "[green]pass[/green]"


def coverage_tables(results: list[LevelResult]) -> list[Table]:
    """What the runs reached: one table for the pool machine, one for the request machine,
    and the operation x block state matrix of each pool run."""
    tables = []
    for machine, situations in (("pool", SITUATIONS), ("requests", REQUEST_SITUATIONS)):
        rows = [r for r in results if r.machine == machine]
        if rows:
            tables.append(_coverage(f"coverage of the {machine} machine (steps)", rows, situations))
    tables += [state_matrix(r) for r in results if r.record.drawable is not None]
    return tables


#: Column headers of the state matrix, four characters wide so that it fits 80 columns.
STATE_HEADERS = {
    "free-unkeyed": "free",
    "free-cached": "cach",
    "private": "priv",
    "registered": "reg",
    "held watched": "held\n+w",
    "shared unkeyed": "shar",
    "shared keyed": "shar\n+key",
    "unpinned unkeyed": "unpn",
    "unpinned keyed": "unpn\n+key",
    "null": "null",
}
STATE_LEGEND = (
    "states (Block lifecycle): free, cach(ed), priv(ate), reg(istered), shar(ed), "
    "unp(i)n(ned), the null block; +key: with a key; held +w: held once, private or "
    "registered, a reuse watcher waiting"
)


def state_matrix(result: LevelResult) -> Table:
    """Accepted actions by operation (rows) and the state of each block they name, before
    the action (columns, :mod:`.block_states`). '—': no action the contract allows reaches
    that cell; a reachable cell the run never reached is flagged MISS."""
    assert result.record.drawable is not None
    reachable = reachable_cells(result.record.drawable)
    counts = result.record.cells
    gaps = missed(counts, result.record.drawable)
    unexplored = [c for c in sorted(counts, key=_table_order) if counts[c] and c not in reachable]
    notes = [
        "accepted actions by the state, before the action, of each block they name; "
        "pool-wide calls count every state some block is in; — unreachable by the contract",
        STATE_LEGEND,
    ]
    if result.record.swept:
        notes.append(
            f"the end-of-run sweep ran {result.record.swept} witness(es), each the shortest "
            "action sequence to a cell (or, at robustness, a broken rule) the drawn test "
            "cases missed, in lockstep on a new pool"
        )
    if gaps:
        notes.append("MISSED: " + ", ".join(f"{row} on {state}" for row, state in gaps))
    if unexplored:
        notes.append(
            "reached but not found by the spec's exploration (n?): "
            + ", ".join(f"{row} on {state}" for row, state in unexplored)
        )
    table = Table(
        title=f"{result.label}: operation x block state, "
        f"{len(reachable) - len(gaps)} of {len(reachable)} reachable cells reached",
        caption="\n".join(notes),
        caption_justify="left",
        box=None,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("operation", no_wrap=True, min_width=max(map(len, ROWS)))
    for state in BLOCK_STATES:
        table.add_column(STATE_HEADERS[state], justify="right", no_wrap=True, min_width=4)
    for row in ROWS:
        table.add_row(row, *(_cell(counts[(row, s)], (row, s) in reachable) for s in BLOCK_STATES))
    return table


def _table_order(cell: tuple[str, str]) -> tuple[int, int]:
    row, state = cell
    return ROWS.index(row), BLOCK_STATES.index(state)


def _cell(count: int, reachable: bool) -> str:
    if reachable:
        return str(count) if count else "[bold red]MISS[/bold red]"
    # reached, although exploring the spec found no way to: the exploration is too shallow
    return f"[bold magenta]{count}?[/bold magenta]" if count else "—"


def _coverage(title: str, rows: list[LevelResult], situations: tuple[str, ...]) -> Table:
    table = Table(title=title)
    # a narrow terminal wraps the situations, never a level's name or a count
    table.add_column("situation", overflow="fold")
    for r in rows:
        table.add_column(r.level.name, justify="right", no_wrap=True)
    for situation in situations:
        table.add_row(situation, *(_count(r.record.situations[situation]) for r in rows))
    for op in sorted({op for r in rows for op in r.record.operations}):
        table.add_row(f"action {op}", *(_count(r.record.operations[op]) for r in rows))
    for rule in sorted({rule for r in rows for rule in r.record.refusals}):
        table.add_row(f"refused: {rule}", *(_count(r.record.refusals[rule]) for r in rows))
    return table


def properties_table(results: list[LevelResult]) -> Table | None:
    """How often each request-level property was checked, per request run."""
    rows = [r for r in results if r.machine != "pool"]
    if not rows:
        return None
    table = Table(title="request-level properties checked (evaluations)")
    table.add_column("property (kvpool rules explains each)")
    for r in rows:
        table.add_column(r.label, justify="right")
    for name in PROPERTIES:
        table.add_row(name, *(_count(r.record.properties[name]) for r in rows))
    return table


def _count(n: int) -> str:
    return str(n) if n else "[yellow]0[/yellow]"


def _line(console: Console, text: str) -> None:
    """One line as it is: no markup, no highlighting, never wrapped."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def expected_table(expected: Expectations, results: list[LevelResult]) -> Table:
    """The known findings (``--expect``): each with how often each run met it and how
    many test cases it ended (where the spec could not take the target's state)."""
    table = Table(title=f"known findings ({expected.source}), times met")
    table.add_column("#", justify="right")
    table.add_column("rule", overflow="fold")
    pool_runs = [r for r in results if r.machine == "pool"]
    for r in pool_runs:
        table.add_column(r.label, justify="right")
    for number, entry in enumerate(expected.entries, 1):
        counts = [str(r.record.expected[entry]) for r in pool_runs]
        table.add_row(str(number), entry.rule + (" (rare)" if entry.rare else ""), *counts)
    ended = [str(r.record.expected_ended) for r in pool_runs]
    table.add_row("", "test cases a known finding ended", *ended)
    return table


def print_expected(console: Console, expected: Expectations) -> None:
    """Each known finding's situation and upstream link, by its number in the table."""
    for number, entry in enumerate(expected.entries, 1):
        _line(console, f"  {number:>2}. {entry.situation} ({entry.upstream})")


def print_unmet(console: Console, expected: Expectations, unmet: Sequence[Expectation]) -> None:
    """The known findings no run met: each named, with where to remove it if it was fixed."""
    for entry in unmet:
        console.print(
            f"\n[bold red]A known finding no longer shows up: {entry.rule}[/bold red]",
            highlight=False,
        )
        _line(
            console,
            f"  {entry.situation} ({entry.upstream}): remove it from {expected.source} "
            "if it was fixed",
        )


def print_repeat(console: Console, result: LevelResult, number: int, first: str) -> None:
    """A finding identical to one already printed (the same message): named, not repeated."""
    count = f" (finding {number} of {len(result.failures)})" if len(result.failures) > 1 else ""
    console.print(f"\n[bold red]Nonconformance: {result.label}{count}[/bold red]")
    _line(console, f"  the same finding as {first}'s, printed above: not repeated")


def print_failure(console: Console, result: LevelResult, failure: Failure, number: int = 1) -> None:
    """One finding: the difference, and the shrunk sequence that shows it."""
    count = f" (finding {number} of {len(result.failures)})" if len(result.failures) > 1 else ""
    console.print(f"\n[bold red]Nonconformance: {result.label}{count}[/bold red]")
    _line(console, f"  {failure.message}")
    console.print(f"\n  Shrunk action sequence ({len(failure.trace)} actions) on a pool built as")
    _line(console, f"    {config_line(failure.config)}")
    for i, action in enumerate(failure.trace, 1):
        marker = "  <- diverges here" if i == len(failure.trace) else ""
        _line(console, f"    {i:>3}. {action_line(action)}{marker}")
