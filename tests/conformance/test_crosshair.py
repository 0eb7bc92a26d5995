"""``kvpool crosshair``: CrossHair finds a planted contract break, and the curated flat
rule functions of the spec yield no counterexample."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.tools.crosshair.command import (
    CURATED,
    check_target,
    crosshair,
    parse_check_output,
    resolve_target,
)
from kvpool.spec import flat


def planted_copy(tmp_path: Path, function: object, wrong: str, right: str) -> Path:
    """A module holding a copy of the flat spec function with one line changed."""
    source = textwrap.dedent(inspect.getsource(function))  # type: ignore[arg-type]
    assert source.count(right) == 1
    module = tmp_path / "planted_spec.py"
    module.write_text(
        "from kvpool.spec.flat import *  # noqa: F403\n"
        "from kvpool.spec.flat import NULL  # noqa: F401\n"
        "from kvpool.spec.bounds import *  # noqa: F403\n\n" + source.replace(right, wrong)
    )
    return module


def test_crosshair_finds_a_planted_write_guard_bug(tmp_path: Path) -> None:
    # the bug: a block held by two requests counts as writable
    module = planted_copy(
        tmp_path,
        flat.block_writable,
        "ref_cnt >= 1 and not has_key",
        "ref_cnt == 1 and not has_key",
    )
    result = check_target(str(module), timeout=2.0)
    assert result.error is None
    assert result.counterexamples, result
    assert any("block_writable(" in c for c in result.counterexamples)


def test_crosshair_finds_a_planted_release_bug_through_the_command(tmp_path: Path) -> None:
    # the bug: the null block's count is released like any other
    module = planted_copy(tmp_path, flat.release_counts, "if b == -1:", "if b == NULL:")
    out = CliRunner().invoke(crosshair, ["--target", str(module), "--timeout", "3"])
    assert out.exit_code == 1, out.output
    assert "COUNTEREXAMPLE" in out.output
    assert "release_counts(" in out.output


def test_the_curated_flat_rules_have_no_counterexample() -> None:
    quick = [t for t in CURATED if "manager" not in t and "keys" not in t][:8]
    out = CliRunner().invoke(crosshair, ["--timeout", "0.3", *(f"--target={t}" for t in quick)])
    assert out.exit_code == 0, out.output
    assert "No counterexample found" in out.output


def test_targets_resolve_and_bad_ones_are_usage_errors() -> None:
    assert resolve_target("flat.release_counts") == "kvpool.spec.flat.release_counts"
    assert resolve_target("kvpool.spec.keys:make_key") == "kvpool.spec.keys.make_key"
    out = CliRunner().invoke(crosshair, ["--target", "flat.no_such_rule"])
    assert out.exit_code == 2
    out = CliRunner().invoke(crosshair, ["--all", "--target", "flat.requeue"])
    assert out.exit_code == 2
    assert all(resolve_target(t) == t for t in CURATED)


def test_output_parsing_counts_conditions_and_counterexamples() -> None:
    stdout = (
        "/x/f.py:3: info: Confirmed over all paths.\n"
        "/x/f.py:4: error: false when calling f(1, 2) (which returns 3)\n"
        "/x/f.py:5: info: Not confirmed.\n"
    )
    result = parse_check_output("f", stdout, 1, "")
    assert (result.conditions, result.confirmed, result.error) == (3, 1, None)
    assert result.counterexamples == ["/x/f.py:4: false when calling f(1, 2) (which returns 3)"]
    assert parse_check_output("f", "", 2, "boom").error == "crosshair exited 2: boom"
