"""``kvpool conform`` end to end: our pool passes, planted faults fail, bad input exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from faulty_pools import CAUGHT_AT as FAULTS  # pytest puts this folder on sys.path
from kvpool.conformance.cli import main

HERE = Path(__file__).parent


def conform(*args: str) -> Result:
    return CliRunner().invoke(main, ["conform", "--no-coverage", "--max-findings", "1", *args])


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)  # failures write their traces here


# One run per level (and the request machine), so that a failure names its level and a
# failing level does not wait for the others.
@pytest.mark.parametrize(
    ("args", "rows"),
    [
        (("--machine", "pool", "--level", "safety"), ("safety",)),
        (("--machine", "pool", "--level", "order"), ("order",)),
        (("--machine", "pool", "--level", "robustness"), ("robustness",)),
        (("--machine", "requests"), ("requests/pool", "requests/manager")),
    ],
    ids=["safety", "order", "robustness", "requests"],
)
def test_impl_passes_every_level(args: tuple[str, ...], rows: tuple[str, ...]) -> None:
    result = conform("--target", "impl", "--max-examples", "60", "--seed", "7", *args)
    assert result.exit_code == 0, result.output
    assert "every run passed" in result.output
    for row in rows:
        assert row in result.output


def test_spec_target_passes_its_own_suite() -> None:
    result = conform("--target", "spec", "--max-examples", "40", "--seed", "3")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_planted_fault_is_caught_with_its_action_sequence(fault: str) -> None:
    level = FAULTS[fault]
    result = conform(
        "--target",
        f"faulty_pools:{fault}",
        "--machine",
        "pool",
        "--level",
        level,
        "--max-examples",
        "400",
        "--steps",
        "30",
        "--seed",
        "11",
    )
    assert result.exit_code == 1, result.output
    assert f"Nonconformance: pool/{level}" in result.output
    assert "Shrunk action sequence" in result.output
    assert "<- diverges here" in result.output


def test_tiny_user_pool_passes_safety_and_order() -> None:
    result = conform(
        "--target",
        "tiny_pool:TinyPool",
        "--level",
        "safety,order",
        "--max-examples",
        "60",
        "--seed",
        "5",
    )
    assert result.exit_code == 0, result.output


def test_tiny_user_pool_with_one_bug_fails_with_the_offending_sequence() -> None:
    result = conform(
        "--target",
        "tiny_pool:TinyPoolReversedFree",
        "--machine",
        "pool",
        "--level",
        "order",
        "--max-examples",
        "300",
        "--seed",
        "5",
    )
    assert result.exit_code == 1, result.output
    assert "free_blocks(" in result.output
    assert "free queue order" in result.output or "get_new_blocks" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "nosuchthing"], "unknown target"),
        (["--target", "no_such_module_xyz:make"], "cannot import module"),
        (["--target", "tiny_pool:Missing"], "has no attribute"),
        (["--level", "fastest"], "unknown level"),
        (["--machine", "turbo"], "unknown machine"),
        (["--manager", "nosuchmanager"], "unknown manager"),
        (["--manager", "no_such_module_xyz:make"], "cannot import module"),
        (["--profile", "vllm-9.9"], "unknown profile"),
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    result = conform(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_targets_lists_builtins_and_profiles() -> None:
    result = CliRunner().invoke(main, ["targets"])
    assert result.exit_code == 0
    assert "impl" in result.output and "seed" in result.output


def test_several_distinct_findings_are_collected_each_with_its_trace(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--target",
            "vllm-mlx",
            "--machine",
            "pool",
            "--level",
            "robustness",
            "--max-findings",
            "3",
            "--seed",
            "1",
            "--no-coverage",
            "--trace-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "FAIL (3)" in result.output and "(finding 3 of 3)" in result.output
    traces = sorted(tmp_path.glob("*.itf.json"))
    assert len(traces) == 3
    from kvpool.conformance.machines.pool.signature import signature
    from kvpool.conformance.trace.files import read_trace

    kinds = {signature(read_trace(t).meta.message) for t in traces}
    assert len(kinds) == 3


@pytest.mark.parametrize(
    ("command", "module", "package"),
    [("prove", "z3", "z3-solver"), ("crosshair", "crosshair", "crosshair-tool")],
)
def test_a_missing_optional_tool_is_named_with_its_install_line(
    monkeypatch: pytest.MonkeyPatch, command: str, module: str, package: str
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )
    result = CliRunner().invoke(main, [command])
    assert result.exit_code == 2
    assert f"pip install {package}" in result.output
