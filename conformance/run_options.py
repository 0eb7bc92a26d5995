"""The options every command that draws test cases shares (``conform``, ``fuzz``,
``diff``, ``bench``, ``workload``), each declared once here: a command takes the decorator,
and says in a word what its test cases are where the wording differs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .targets.options import MANAGER, TARGET

F = TypeVar("F", bound=Callable[..., Any])

#: The defaults the lockstep machines draw with.
STEPS, BLOCKS, MAX_EXAMPLES, MAX_FINDINGS = 40, 8, 150, 10
TRACE_DIR = "kvpool-traces"


def steps_option(function: F) -> F:
    """``--steps``: the most actions of one test case."""
    return click.option(
        "--steps",
        default=STEPS,
        show_default=True,
        type=click.IntRange(1),
        help="Most actions per test case.",
    )(function)


def blocks_option(
    default: int = BLOCKS,
    most: int | None = 4096,
    help: str = "Largest pool drawn (num_gpu_blocks, the null block included).",
) -> Callable[[F], F]:
    """``--blocks``: the pool size (the largest drawn, for the machines)."""
    return click.option(
        "--blocks", default=default, show_default=True, type=click.IntRange(2, most), help=help
    )


def seed_option(default: int | None = None, help: str | None = None) -> Callable[[F], F]:
    """``--seed``: the seed of the draws (default ``None``: one drawn at random and
    printed)."""
    if default is None:
        return click.option(
            "--seed", type=int, default=None, help=help or "Seed for drawing; the run prints it."
        )
    return click.option("--seed", default=default, show_default=True, type=int, help=help)


def max_examples_option(
    cases: str = "fresh pools", per: str = "", short: bool = True
) -> Callable[[F], F]:
    """``--max-examples`` (and ``-n`` where ``short``): test cases per run (``cases``:
    what one is)."""
    names = ("--max-examples", "-n") if short else ("--max-examples",)
    return click.option(
        *names,
        default=MAX_EXAMPLES,
        show_default=True,
        type=click.IntRange(1),
        help=f"Test cases ({cases}){per}.",
    )


def max_findings_option(findings: str, then: str = "") -> Callable[[F], F]:
    """``--max-findings``: distinct findings collected before a run stops."""
    return click.option(
        "--max-findings",
        default=MAX_FINDINGS,
        show_default=True,
        type=click.IntRange(1, 50),
        help=f"Distinct {findings} to collect (each shrunk, each with its trace){then}.",
    )


def trace_dir_option(whose: str) -> Callable[[F], F]:
    """``--trace-dir``: where ``whose`` trace (ITF JSON) and pytest file are written."""
    return click.option(
        "--trace-dir",
        default=TRACE_DIR,
        show_default=True,
        type=click.Path(file_okay=False),
        help=f"Where {whose} trace (ITF JSON) and pytest file are written.",
    )


def profile_option(help: str) -> Callable[[F], F]:
    """``--profile``/``-p``: the pool behaviour expected (default: the target's own)."""
    return click.option("--profile", "-p", default=None, help=help)


def target_option(help: str) -> Callable[[F], F]:
    """``--target``/``-t``: the pool checked (default: kvpool's own, ``impl``)."""
    return click.option("--target", "-t", default="impl", show_default=True, type=TARGET, help=help)


def manager_option(help: str) -> Callable[[F], F]:
    """``--manager``: the KV cache manager the requests machine runs (default: ``auto``)."""
    return click.option("--manager", default="auto", show_default=True, type=MANAGER, help=help)


def machines_option(help: str) -> Callable[[F], F]:
    """``--machine``/``-m``: the machines run, comma-separated (default: both)."""
    return click.option(
        "--machine", "-m", "machines", default="pool,requests", show_default=True, help=help
    )


def count_option(
    *names: str, default: int, least: int = 1, most: int | None = None, help: str | None = None
) -> Callable[[F], F]:
    """A whole number of something (``names``: click's declarations), from ``least`` to
    ``most``, its default shown."""
    return click.option(
        *names, default=default, show_default=True, type=click.IntRange(least, most), help=help
    )


def seconds_option(
    *names: str, default: float, least: float = 0.0, most: float | None = None, help: str
) -> Callable[[F], F]:
    """A duration, a rate or a fraction, from ``least`` (0 unless said) to ``most``, its
    default shown."""
    return click.option(
        *names, default=default, show_default=True, type=click.FloatRange(least, most), help=help
    )


def file_option(*names: str, help: str, exists: bool = False) -> Callable[[F], F]:
    """A file to write (or, with ``exists``, to read), none by default."""
    return click.option(
        *names, type=click.Path(exists=exists, dir_okay=False, path_type=Path), default=None,
        help=help,
    )  # fmt: skip


def limit_option(name: str, kind: type[int] | type[float], help: str) -> Callable[[F], F]:
    """A bound a run stops at (none by default): a count from 1, or a time from 0."""
    within = click.IntRange(1) if kind is int else click.FloatRange(0.0)
    return click.option(name, type=within, default=None, help=help)


def text_option(
    *names: str, default: str, help: str, metavar: str | None = None
) -> Callable[[F], F]:
    """A string (an address, a list, a topic), its default shown."""
    return click.option(*names, default=default, show_default=True, metavar=metavar, help=help)


def flag_option(*names: str, help: str) -> Callable[[F], F]:
    """A switch, off by default."""
    return click.option(*names, is_flag=True, help=help)
