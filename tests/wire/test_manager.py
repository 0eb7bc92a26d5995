"""A KV cache manager over the wire (``--manager exec:...``): the request machine drives a
served manager exactly as in process, and finds a faulty one's fault the same way."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS, EXIT_USAGE

FAULTY_MANAGERS = Path(__file__).resolve().parent.parent / "conformance"
SERVE = f"exec,timeout=60:{sys.executable} -m kvpool.conformance.wire.serve impl"


def requests(manager: str) -> Result:
    return CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            "impl",
            "--manager",
            manager,
            "--machine",
            "requests",
            "--seed",
            "1",
            "--max-examples",
            "30",
        ],
    )


def test_the_served_impl_manager_passes_the_request_machine() -> None:
    result = requests(SERVE)
    assert result.exit_code == EXIT_PASS, result.output
    assert "requests/manager" in result.output
    assert f"manager {SERVE}" in result.output


def test_a_faulty_manager_served_is_caught_as_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAULTY_MANAGERS))
    faulty = f"{SERVE} --manager faulty_managers:make_HeadFirstFree"
    over_wire = requests(faulty)
    assert over_wire.exit_code == EXIT_FINDING, over_wire.output
    trace = next(Path("kvpool-traces").glob("*requests-manager*.itf.json"))
    again = CliRunner().invoke(main, ["replay", str(trace), "--manager", faulty])
    assert again.exit_code == EXIT_FINDING, again.output
    fixed = CliRunner().invoke(main, ["replay", str(trace), "--manager", SERVE])
    assert fixed.exit_code == EXIT_PASS, fixed.output
    monkeypatch.syspath_prepend(str(FAULTY_MANAGERS))
    in_process = requests("faulty_managers:make_HeadFirstFree")
    assert in_process.exit_code == EXIT_FINDING, in_process.output
    found = next(line for line in in_process.output.splitlines() if "property '" in line)
    assert found in over_wire.output


def test_a_pool_program_asked_for_a_manager_says_so(
    build_c_pool: Callable[[str | None], Path],
) -> None:
    program = build_c_pool(None)
    result = requests(f"exec:{program}")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "message 1 (init)" in result.output and "config: expected a PoolConfig" in result.output
