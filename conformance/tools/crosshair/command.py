"""``kvpool crosshair``: search the spec's contracts for counterexamples with CrossHair.

The spec states its rules as PEP 316 docstring contracts (``pre:`` / ``post:`` lines), most of
them on small pure functions over flat data (:mod:`kvpool.spec.flat`,
:mod:`kvpool.spec.manager.flat`, :mod:`kvpool.spec.keys`) that the transitions themselves
call. CrossHair runs each function on symbolic inputs that satisfy the preconditions and
SEARCHES for inputs that break a postcondition. It does not prove anything: a condition it
reports as "not confirmed" simply ran out of time, and even "confirmed over all paths" holds
only within the bounds the preconditions set. The Z3 proofs (``kvpool prove``) prove.

Each target runs in its own ``crosshair check`` process (CrossHair patches the interpreter
while it searches), a few at a time. ``--diff`` runs ``crosshair diffbehavior`` between the
spec's pure functions and the pool's (``kvpool.impl``), through thin flat wrappers where the
pool has no pure function; differences it finds are information, not a failure.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import click
from rich.console import Console
from rich.table import Table

from ...extras import require
from ...usage import EXIT_FINDING, EXIT_UNDECIDED

#: The bounded CI selection: the flat rule functions, which CrossHair searches well.
CURATED: tuple[str, ...] = (
    "kvpool.spec.flat.free_goes_to_front",
    "kvpool.spec.flat.requeue",
    "kvpool.spec.flat.release_counts",
    "kvpool.spec.flat.free_into_queue",
    "kvpool.spec.flat.unpin_into_queue",
    "kvpool.spec.flat.take_from_front",
    "kvpool.spec.flat.touch_counts",
    "kvpool.spec.flat.block_writable",
    "kvpool.spec.flat.usage_fraction",
    "kvpool.spec.flat.fine_hash_index",
    "kvpool.spec.flat.coarse_blocks",
    "kvpool.spec.flat.cache_positions",
    "kvpool.spec.keys.make_key",
    "kvpool.spec.keys.hash_of",
    "kvpool.spec.keys.group_of",
    "kvpool.spec.keys.hash_at_block_size",
    "kvpool.spec.keys.blocks_viewable",
    "kvpool.spec.manager.flat.growth_break",
    "kvpool.spec.manager.flat.slide_table",
    "kvpool.spec.manager.flat.written_entries",
    "kvpool.spec.manager.flat.resume_promise",
)

#: ``crosshair diffbehavior`` pairs: (what is compared, spec function, pool function).
DIFF_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("writability", f"{__name__}.spec_writable", f"{__name__}.impl_writable"),
    ("usage", f"{__name__}.spec_usage", f"{__name__}.impl_usage"),
    ("key layout: make key", "kvpool.spec.keys.make_key", f"{__name__}.impl_make_key"),
    ("key layout: hash of key", "kvpool.spec.keys.hash_of", "kvpool.impl.hashing.get_block_hash"),
    ("key layout: group of key", "kvpool.spec.keys.group_of", "kvpool.impl.hashing.get_group_id"),
    ("hash chain: one block", f"{__name__}.spec_block_hash", f"{__name__}.impl_block_hash"),
    ("hash chain: a request", f"{__name__}.spec_request_hashes", f"{__name__}.impl_request_hashes"),
)

#: Runs CrossHair's command line in this interpreter. An editable install maps ``kvpool.*``
#: through an import hook, so the ``kvpool`` namespace package has no real folder, which
#: CrossHair's option reader cannot open; it is told that such a package has no options.
_DRIVER = """
import importlib.resources, sys
_files = importlib.resources.files
def _files_or_none(anchor):
    try:
        return _files(anchor)
    except NotADirectoryError as exc:
        raise FileNotFoundError(str(exc)) from exc
importlib.resources.files = _files_or_none
from crosshair.main import main
sys.argv = ["crosshair", *sys.argv[1:]]
main()
"""

_MESSAGE = re.compile(r"^(?P<file>.*?):(?P<line>\d+): (?P<kind>error|info|warning): (?P<text>.*)$")


@dataclass
class CheckResult:
    """What ``crosshair check`` said about one target."""

    target: str
    conditions: int = 0
    confirmed: int = 0
    counterexamples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Set when CrossHair could not check the target at all (import error, bad name, ...).
    error: str | None = None


@dataclass
class DiffResult:
    """What ``crosshair diffbehavior`` said about one pair of functions."""

    what: str
    spec: str
    impl: str
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


def crosshair_command(*args: str) -> list[str]:
    """The command line that runs ``crosshair ARGS`` in this interpreter."""
    return [sys.executable, "-c", _DRIVER, *args]


def parse_check_output(target: str, stdout: str, returncode: int, stderr: str) -> CheckResult:
    """Turn ``crosshair check --report_all`` output into a :class:`CheckResult`."""
    result = CheckResult(target)
    lines = stdout.splitlines()
    i = 0
    while i < len(lines):
        match = _MESSAGE.match(lines[i])
        i += 1
        if match is None:
            continue
        kind, text = match["kind"], match["text"]
        if kind == "error":
            # a counterexample may run over several lines (a long repr)
            while i < len(lines) and _MESSAGE.match(lines[i]) is None:
                text += "\n" + lines[i]
                i += 1
            result.conditions += 1
            where = f"{match['file']}:{match['line']}"
            result.counterexamples.append(f"{where}: {text}")
        elif text.startswith("Confirmed"):
            result.conditions += 1
            result.confirmed += 1
        elif text.startswith("Not confirmed"):
            result.conditions += 1
    if returncode not in (0, 1) or (returncode == 1 and not result.counterexamples):
        tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["(no output)"])[-1]
        result.error = f"crosshair exited {returncode}: {tail}"
    return result


def check_target(target: str, timeout: float) -> CheckResult:
    """Search one target (a module, a function, or a file path) for counterexamples."""
    command = crosshair_command(
        "check",
        "--analysis_kind=PEP316",
        "--report_all",
        "--per_condition_timeout",
        str(timeout),
        target,
    )
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    result = parse_check_output(target, done.stdout, done.returncode, done.stderr)
    result.seconds = time.monotonic() - start
    return result


def diff_pair(what: str, spec: str, impl: str, timeout: float) -> DiffResult:
    """Search for an input on which ``spec`` and ``impl`` behave differently."""
    command = crosshair_command(
        "diffbehavior",
        "--exception_equivalence",
        "SAME_TYPE",
        "--per_condition_timeout",
        str(timeout),
        spec,
        impl,
    )
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    result = DiffResult(what, spec, impl, seconds=time.monotonic() - start)
    text = done.stdout.strip()
    if done.returncode == 1 and text:
        result.differences = [text]
    elif done.returncode not in (0, 1):
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        result.error = f"crosshair exited {done.returncode}: {tail}"
    return result


def run_parallel(
    jobs: int, work: Sequence[Callable[[], CheckResult]], on_done: Callable[[CheckResult], None]
) -> list[CheckResult]:
    """Run ``work`` a few at a time, reporting each result as it comes; results in order."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(w) for w in work]
        results = []
        for future in futures:
            results.append(future.result())
            on_done(results[-1])
    return results


def check_targets(
    targets: Iterable[str],
    timeout: float,
    jobs: int = 2,
    on_done: Callable[[CheckResult], None] = lambda _: None,
) -> list[CheckResult]:
    """Search every target; see :func:`check_target`."""
    work = [lambda t=t: check_target(t, timeout) for t in targets]
    return run_parallel(jobs, work, on_done)


def resolve_target(name: str) -> str:
    """The fully qualified dotted name of a target given as ``module.func``,
    ``module:func`` or relative to ``kvpool.spec`` (``flat.release_counts``); a path to a
    ``.py`` file is taken as it is. Raises ``ValueError`` if it names nothing."""
    if name.endswith(".py") or os.sep in name:
        if not os.path.exists(name.split(":")[0]):
            raise ValueError(f"no such file: {name}")
        return name
    dotted = name.replace(":", ".")
    candidates = [dotted] if dotted.startswith("kvpool.") else [f"kvpool.spec.{dotted}", dotted]
    for candidate in candidates:
        if _names_something(candidate):
            return candidate
    raise ValueError(f"{name!r} names no module or function (tried {', '.join(candidates)})")


def _names_something(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def spec_modules() -> list[str]:
    """Every module of ``kvpool.spec`` (for ``--all``)."""
    package = importlib.import_module("kvpool.spec")
    found = [info.name for info in pkgutil.walk_packages(package.__path__, "kvpool.spec.")]
    return sorted(found)


# --- thin flat wrappers for diffbehavior --------------------------------------------------
# Both sides of a pair take the same flat arguments and refuse the same out-of-bounds ones
# (returning None), so a difference CrossHair reports is a difference in the rule.

_MAX_BLOCKS = 8


def spec_writable(ref_cnt: int, has_key: bool, block: int) -> bool | None:
    """The spec's write guard, over flat arguments."""
    from kvpool.spec.flat import block_writable

    if not (0 <= block < _MAX_BLOCKS and 0 <= ref_cnt <= 4):
        return None
    return block_writable(ref_cnt, has_key, block)


def impl_writable(ref_cnt: int, has_key: bool, block: int) -> bool | None:
    """The pool's ``is_block_writable`` on a block with that count and key."""
    from kvpool.impl.block_pool import BlockPool

    if not (0 <= block < _MAX_BLOCKS and 0 <= ref_cnt <= 4):
        return None
    pool = BlockPool(_MAX_BLOCKS, enable_caching=True, hash_block_size=1)
    blk = pool.blocks[block]
    blk.ref_cnt = ref_cnt
    if has_key:
        blk.set_block_hash(b"h" * 8 + bytes(4), 1)
    return pool.is_block_writable(blk)


def spec_usage(num_free: int, num_blocks: int) -> float | None:
    """The spec's usage, over flat arguments."""
    from kvpool.spec.flat import usage_fraction

    if not (1 <= num_blocks <= _MAX_BLOCKS and 0 <= num_free <= num_blocks - 1):
        return None
    return usage_fraction(num_free, num_blocks)


def impl_usage(num_free: int, num_blocks: int) -> float | None:
    """The pool's ``get_usage`` once all but ``num_free`` real blocks are handed out."""
    from kvpool.impl.block_pool import BlockPool

    if not (1 <= num_blocks <= _MAX_BLOCKS and 0 <= num_free <= num_blocks - 1):
        return None
    pool = BlockPool(num_blocks, enable_caching=True, hash_block_size=1)
    pool.get_new_blocks(num_blocks - 1 - num_free)
    return pool.get_usage()


def impl_make_key(block_hash: bytes, group_id: int) -> bytes:
    """The pool's key maker, with the spec's argument names."""
    from kvpool.impl.hashing import make_block_hash_with_group_id

    return make_block_hash_with_group_id(block_hash, group_id)


def spec_block_hash(parent: bytes | None, tokens: tuple[int, ...]) -> bytes:
    """The spec's chained hash of one block (no extra keys)."""
    from kvpool.spec.hashing import hash_block_tokens

    return hash_block_tokens(parent, tokens)


def impl_block_hash(parent: bytes | None, tokens: tuple[int, ...]) -> bytes:
    """The pool's chained hash of one block (no extra keys), with its default hash."""
    from kvpool.impl.hashing import hash_block_tokens, sha256_hash

    return hash_block_tokens(sha256_hash, parent, tokens)


def spec_request_hashes(tokens: tuple[int, ...], hash_block_size: int) -> tuple[bytes, ...] | None:
    """The spec's hash chain over a request's tokens."""
    from kvpool.spec.hashing import request_block_hashes

    if not 1 <= hash_block_size <= 4:
        return None
    return request_block_hashes(tokens, hash_block_size)


def impl_request_hashes(tokens: tuple[int, ...], hash_block_size: int) -> tuple[bytes, ...] | None:
    """The pool's hash chain over a request's tokens."""
    from kvpool.impl.hashing import request_block_hashes

    if not 1 <= hash_block_size <= 4:
        return None
    return tuple(request_block_hashes(tokens, hash_block_size))


# --- the command ---------------------------------------------------------------------------


def results_table(results: Sequence[CheckResult]) -> Table:
    table = Table(title="CrossHair search (counterexamples found; no proof)")
    table.add_column("target", overflow="fold")
    table.add_column("conditions", justify="right")
    table.add_column("confirmed", justify="right")
    table.add_column("counterexamples", justify="right")
    table.add_column("time", justify="right")
    for r in results:
        found = "error" if r.error else str(len(r.counterexamples))
        table.add_row(r.target, str(r.conditions), str(r.confirmed), found, f"{r.seconds:.1f}s")
    return table


def diff_table(results: Sequence[DiffResult]) -> Table:
    table = Table(title="crosshair diffbehavior: spec vs kvpool.impl (informative)")
    table.add_column("compared", overflow="fold")
    table.add_column("spec", overflow="fold")
    table.add_column("impl", overflow="fold")
    table.add_column("result", overflow="fold")
    table.add_column("time", justify="right")
    for r in results:
        verdict = r.error or ("differs" if r.differences else "no difference found")
        table.add_row(r.what, r.spec, r.impl, verdict, f"{r.seconds:.1f}s")
    return table


@click.command(name="crosshair")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=1.5,
    show_default=True,
    help="CrossHair's time per condition, in CPU seconds (--per_condition_timeout).",
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="MODULE.FUNC",
    help="A module or function to search (repeatable; 'module:func' and names relative to "
    "kvpool.spec are accepted). Default: the curated list of flat rule functions.",
)
@click.option(
    "--all",
    "all_modules",
    is_flag=True,
    help="Search every module of kvpool.spec, the whole-state transitions included "
    "(slow; those mostly run out of time without a verdict).",
)
@click.option(
    "--diff",
    is_flag=True,
    help="Instead, run crosshair diffbehavior between the spec's pure functions and the "
    "pool's (kvpool.impl). Informative: exits 0 whatever it finds.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=os.cpu_count() or 2,
    show_default=True,
    help="CrossHair processes run at once.",
)
@click.option("--list", "list_only", is_flag=True, help="Print the targets and stop.")
def crosshair(
    timeout: float,
    targets: tuple[str, ...],
    all_modules: bool,
    diff: bool,
    jobs: int,
    list_only: bool,
) -> None:
    """Search the spec's docstring contracts for counterexamples with CrossHair.

    CrossHair SEARCHES: it runs each function on symbolic inputs within the preconditions'
    bounds and reports inputs that break a postcondition. Finding none is evidence, not
    proof ("not confirmed" means the time ran out); `kvpool prove` (Z3) proves.

    A counterexample is a finding (exit 1); a target CrossHair itself failed on leaves the
    search undecided (exit 5).
    """
    require("crosshair", "crosshair-tool", "kvpool crosshair")
    console = Console()
    if all_modules and targets:
        raise click.UsageError("--all and --target exclusive")
    if diff:
        if targets or all_modules:
            raise click.UsageError("--diff runs its own pairs; drop --target/--all")
        _run_diff(console, timeout, jobs, list_only)
        return
    try:
        chosen = spec_modules() if all_modules else [resolve_target(t) for t in targets] or CURATED
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if list_only:
        for t in chosen:
            console.print(t, highlight=False)
        return
    console.print(
        f"CrossHair: {len(chosen)} target(s), {timeout:g}s per condition, {jobs} at a time",
        highlight=False,
    )
    start = time.monotonic()

    def progress(r: CheckResult) -> None:
        mark = "ERROR" if r.error else "FOUND" if r.counterexamples else "ok"
        console.print(
            f"  [{mark}] {r.target}: {r.conditions} condition(s), "
            f"{len(r.counterexamples)} counterexample(s), {r.seconds:.1f}s",
            highlight=False,
            markup=False,
        )

    results = check_targets(chosen, timeout, jobs, progress)
    console.print(results_table(results))
    console.print(f"total {time.monotonic() - start:.1f}s", highlight=False)
    found = [c for r in results for c in r.counterexamples]
    for r in results:
        for c in r.counterexamples:
            console.print(f"COUNTEREXAMPLE in {r.target}:\n  {c}", highlight=False, markup=False)
        if r.error:
            console.print(f"ERROR in {r.target}: {r.error}", highlight=False, markup=False)
    if found:
        sys.exit(EXIT_FINDING)
    if any(r.error for r in results):  # the tool failed: no verdict on that target
        sys.exit(EXIT_UNDECIDED)
    console.print("No counterexample found (a bounded search, not a proof).", highlight=False)


def _run_diff(console: Console, timeout: float, jobs: int, list_only: bool) -> None:
    if list_only:
        for what, spec, impl in DIFF_PAIRS:
            console.print(f"{what}: {spec} vs {impl}", highlight=False)
        return
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(diff_pair, w, s, i, timeout) for w, s, i in DIFF_PAIRS]
        results = [f.result() for f in futures]
    console.print(diff_table(results))
    for r in results:
        for d in r.differences:
            console.print(f"DIFFERENCE ({r.what}):\n{d}", highlight=False, markup=False)
