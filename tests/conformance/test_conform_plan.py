"""``kvpool conform`` is a plan, its execution and its report: ``--plan`` prints the plan
and runs nothing, each part stays short, and the options the commands share are declared
once (``run_options.py``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main

HERE = Path(__file__).parent
CONFORMANCE = HERE.parents[1] / "conformance"


@pytest.fixture(autouse=True)
def _scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)


def test_plan_prints_what_would_run_and_runs_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["conform", "--plan", "--seed", "7", "--level", "safety,robustness", "-n", "20",
         "--expect", str(HERE / "expectations" / "two_faults.toml")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "kvpool conform --plan (nothing has run):"
    fields = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in lines[1:])
    assert fields["target"] == "impl (impl)"
    assert fields["profile"].startswith("seed (")
    assert fields["manager"] == "impl"
    assert fields["expectations"].endswith("two_faults.toml (1 known finding(s))")
    assert fields["machines"] == "pool, requests"
    assert fields["runs"] == "pool/safety, pool/robustness, requests/pool, requests/manager"
    assert fields["sizes"].startswith("20 test cases per run of at most 40 actions")
    assert fields["sizes"].endswith("seed 7")
    assert "a run under 10 valid test cases fails" in fields["stops"]
    assert "every run passed" not in result.output and "steps/s" not in result.output
    assert not (tmp_path / "kvpool-traces").exists()


def test_plan_refuses_what_cannot_run_before_anything_runs() -> None:
    result = CliRunner().invoke(
        main, ["conform", "--plan", "--target", "surface_pools:NoFreeCount"]
    )
    assert result.exit_code == 2, result.output
    assert "has no method get_num_free_blocks" in result.output


def _lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name: node.end_lineno - node.lineno + 1  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
    }


@pytest.mark.parametrize(
    ("module", "function"),
    [
        ("tools/conform/plan.py", "plan"),
        ("tools/conform/run.py", "execute"),
        ("tools/conform/report.py", "report"),
        ("tools/conform/command.py", "conform"),
    ],
)
def test_each_part_of_conform_is_under_80_lines(module: str, function: str) -> None:
    lengths = _lengths(CONFORMANCE / module)
    assert lengths[function] < 80, lengths
    assert max(lengths.values()) < 80, lengths  # and so is every helper beside it


SHARED = ("--steps", "--blocks", "--seed", "--trace-dir", "--max-examples", "--max-findings")
#: The commands that draw test cases, each taking the shared options from run_options.py.
DRAWING = (
    "tools/conform/command.py",
    "tools/fuzz/command.py",
    "tools/diff/command.py",
    "tools/bench/command.py",
    "machines/requests/workload_command.py",
    "tools/mutants/command.py",
    "tools/stream/publish_command.py",
)


@pytest.mark.parametrize("module", DRAWING)
def test_the_shared_options_are_declared_once(module: str) -> None:
    text = (CONFORMANCE / module).read_text(encoding="utf-8")
    for option in SHARED:
        assert f'click.option(\n    "{option}"' not in text, (module, option)
        assert f'click.option("{option}"' not in text, (module, option)
    assert re.search(r"^from \.+run_options import", text, re.M), module


@pytest.mark.parametrize(
    "module",
    ["tools/conform/command.py", "tools/fuzz/command.py", "machines/requests/workload_command.py"],
)
def test_the_target_and_manager_options_are_declared_once(module: str) -> None:
    text = (CONFORMANCE / module).read_text(encoding="utf-8")
    for option in ("--target", "--manager", "--machine", "--profile"):
        assert f'click.option(\n    "{option}"' not in text, (module, option)
        assert f'click.option("{option}"' not in text, (module, option)
