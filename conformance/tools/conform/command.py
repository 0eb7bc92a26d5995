"""``kvpool conform``: the lockstep suite on a target, level by level, and the
traces of what it found. The command reads its options into a plan
(:mod:`.plan`), runs it (:mod:`.run`) and reports (:mod:`.report`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from kvpool.spec import PROFILES
from rich.console import Console

from ...consumers.naming import BUILT_IN as CONSUMERS
from ...exits import EXIT_PASS
from ...machines.pool.surface import SurfaceMismatch
from ...run_options import (
    blocks_option,
    machines_option,
    manager_option,
    max_examples_option,
    max_findings_option,
    profile_option,
    seed_option,
    steps_option,
    target_option,
    trace_dir_option,
)
from ...targets.options import package_option
from ...usage import fail_usage
from .plan import Options, plan, print_plan
from .report import print_header, report
from .run import execute


@click.command()
@package_option
@target_option(
    "The pool to check: 'impl' (ours), 'spec' (self-check), an engine's NAME, "
    "NAME==VERSION or NAME@PATH (kvpool targets lists them: vllm==0.33.0, lmdeploy, ...), "
    "or 'module:factory' — a factory building a pool with vLLM's BlockPool API "
    "(called with num_gpu_blocks=, enable_caching=, hash_block_size=, "
    "enable_kv_cache_events=) or a Target from (config, profile)."
)
@profile_option(
    "Which pool behaviour is expected (default: the target's own profile, e.g. "
    "vllm-0.33 for vllm==0.33.0, else seed). Known: " + ", ".join(PROFILES) + "."
)
@click.option(
    "--level",
    "-l",
    "levels",
    default=None,
    help="Comma-separated levels: safety (set semantics, any eviction order), order "
    "(the profile's exact eviction order), robustness (out-of-contract input "
    "refused, pool unchanged), events (the target's KV events fed to a consumer model "
    "after every step; see --consumer; named here, it also judges the request machine's "
    "pool calls). [default: safety,order,robustness, and events on the pool machine when "
    "the target publishes KV events]",
)
@click.option(
    "--consumer",
    default=None,
    metavar="NAME",
    help="Who the events level judges the stream by: count (residency counted per medium, "
    "group and hash; every copy stored and removed: vLLM's documented contract), set (the "
    "hashes present per group), dynamo (NVIDIA Dynamo's radix-tree index in process, the "
    "extra [dynamo]: asked after every step about every prefix the pool serves; "
    "router-recall and router-precision), or a plugin module:factory (see the contract "
    "page). Built in: " + ", ".join(CONSUMERS) + ". [default: the one the profile's release "
    "promises; count where it promises none]",
)
@machines_option(
    "Comma-separated machines: pool (pool actions at each --level), requests "
    "(request actions: the spec's manager driving the target pool, and the target's own "
    "manager, if any, against the spec's manager; request-level properties checked). "
    "Alone: engine (the engine's own scheduler plans every batch, the suite plays the "
    "clients and the model; --target names an engine driver)."
)
@manager_option(
    "The KV cache manager for the requests machine: 'auto' (the target's own, e.g. "
    "impl's KVCacheManager, or an LMDeploy release's block manager with its prefix trie), "
    "'none', 'vllm' (the KVCacheManager of the vLLM release --target names), 'lmdeploy' "
    "(the same for an LMDeploy release), or 'module:factory' building a manager target from "
    "(setup, profile)."
)
@max_examples_option(per=" per level")
@steps_option
@seed_option(help="Seed for drawing actions; the run prints the one it used.")
@blocks_option(
    help="Largest pool drawn (num_gpu_blocks, the null block included). Small pools "
    "reach eviction, duplicates and exhaustion sooner."
)
@max_findings_option(
    "findings",
    " per run before stopping; 1 ends the whole command at its first finding, as --fail-fast does",
)
@click.option(
    "--fail-fast",
    is_flag=True,
    default=False,
    help="End the command at its first finding: that run stops there (its finding still "
    "shrunk and its trace written) and the levels and machines after it do not run.",
)
@click.option(
    "--min-valid",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Fewest valid test cases a run's last search must run, as a fraction of "
    "--max-examples; a run under it fails (exit 3). Test cases that run into a finding "
    "already reported are dropped, and Hypothesis only gives up once fewer than 1% of its "
    "test cases are valid: a search under half of what was asked was sized by its "
    "rejections, not by --max-examples.",
)
@trace_dir_option("a failure's")
@click.option(
    "--coverage/--no-coverage",
    default=True,
    show_default=True,
    help="Print which actions and situations the run reached.",
)
@click.option(
    "--expect",
    "expect_file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The target's known findings (TOML or JSON: each with its rule, situation and "
    "upstream link; see docs/guide/expectations.md). A known finding is reported as "
    "expected and the run goes on past it; one that no longer shows up, and every new "
    "one, fail the run.",
)
@click.option(
    "--plan",
    "show_plan",
    is_flag=True,
    help="Print what would run (target, manager, profile, expectations, machines, runs, "
    "sizes) and stop: nothing is run.",
)
@click.option(
    "--check-contracts",
    is_flag=True,
    help="Debug the spec itself: on every step, check the pre: and post: lines of the "
    "transition it takes (PEP 316 docstring contracts) on the run's real states. A "
    "condition that fails is a bug of the spec, reported with the transition, the "
    "condition and the action; the run is slower.",
)
def conform(show_plan: bool, **options: object) -> None:
    """Run the lockstep conformance suite: the spec and TARGET, step by step.

    Every action is applied to both; results, reuse-watcher firings, events, and whatever
    the target shows of its state (free queue, ref counts, keys, free-list links) must
    agree. A difference is shrunk to a minimal action sequence and printed. The result
    table gives each run's valid test cases, those rejected (they ran into a finding
    already reported) and draws skipped (outside the contract), and its steps per second.

    A target lacking a method, field or signature the chosen levels call is a usage error,
    checked before any test case and listed in one message; a run with fewer valid test
    cases than --min-valid (and no finding) exits 3.
    """
    console = Console()  # a pipe or a log gets COLUMNS (80 unset): the tables fit or stack
    given = Options(**options)  # type: ignore[arg-type]
    if given.machines == "engine":  # an engine through its own scheduler
        from ...machines.engine.command import conform_engine

        conform_engine(
            console,
            given.target,
            seed=given.seed,
            max_examples=given.max_examples,
            steps=given.steps,
            blocks=given.blocks,
            max_findings=1 if given.fail_fast else given.max_findings,
            min_valid=given.min_valid,
            trace_dir=given.trace_dir,
            consumer=given.consumer,
            expect_file=given.expect_file,
        )
        return
    chosen = plan(given, console)
    if show_plan:
        print_plan(console, chosen)
        sys.exit(EXIT_PASS)
    print_header(console, chosen)
    try:
        done = execute(chosen, console)
    except SurfaceMismatch as exc:  # a call the surface check could not foresee
        fail_usage(
            console,
            f"target {chosen.name!r} does not take a call the suite makes (this is not a "
            f"finding): {exc}",
        )
    status = report(console, chosen, done)
    if status != EXIT_PASS:
        sys.exit(status)
