"""A Python pool served over the wire is judged as it is in process: the served impl
passes, and a faulty pool served finds the same fault."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS, EXIT_USAGE

HERE = Path(__file__).resolve().parent
FAULTY_POOLS = HERE.parent / "conformance"


def served(target: str, *args: str) -> Result:
    command = f"exec,timeout=60:{sys.executable} -m kvpool.conformance.wire.serve {target}"
    return CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            command,
            "--seed",
            "1",
            "--max-examples",
            "30",
            *args,
        ],
    )


def test_the_served_impl_passes_the_pool_and_request_machines() -> None:
    result = served("impl", "--machine", "pool,requests")
    assert result.exit_code == EXIT_PASS, result.output
    assert "requests/pool" in result.output


def test_a_faulty_pool_served_is_caught_as_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAULTY_POOLS))
    over_wire = served("faulty_pools:CachedToFront", "--level", "order", "--machine", "pool")
    assert over_wire.exit_code == EXIT_FINDING, over_wire.output
    monkeypatch.syspath_prepend(str(FAULTY_POOLS))
    in_process = CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            "faulty_pools:CachedToFront",
            "--seed",
            "1",
            "--max-examples",
            "30",
            "--level",
            "order",
            "--machine",
            "pool",
        ],
    )
    assert in_process.exit_code == EXIT_FINDING, in_process.output
    first = next(line for line in in_process.output.splitlines() if "after " in line)
    assert first in over_wire.output


def test_serving_a_target_that_does_not_load_says_why() -> None:
    result = served("no_such_module:pool")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "cannot import module 'no_such_module'" in result.output
