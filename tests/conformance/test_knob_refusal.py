"""Knob ``refuses_by_return``: a pool that refuses a call outside its contract by returning
``False`` (``None`` from ``get_new_blocks``) instead of raising is judged conformant under
a profile file that says so, and a refusal by return value is judged as strictly as one by
exception: a refusal that changed the pool, and a ``True`` on a refused call, are caught
(``returning_pools.py``: the sound pool and the two planted faults)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.refusal import RefusedByReturn, refusal
from kvpool.spec import SEED, get_profile

PROFILE = """\
base = "seed"
description = "a pool that refuses by return value"

[knobs.refuses_by_return]
value = true
reason = "a refused call returns False and changes nothing"
"""


@pytest.fixture
def profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "returning.toml"
    path.write_text(PROFILE)
    return path


def robustness(pool: str, seed: int, *profile: str) -> Result:
    run = ["conform", "--target", f"returning_pools:{pool}", "--level", "robustness"]
    return CliRunner().invoke(main, [*run, "--seed", str(seed), "--no-coverage", *profile])


def test_refusal_reads_false_only_where_the_profile_says_so() -> None:
    by_return = replace(SEED, refuses_by_return=True)
    assert refusal("free_blocks", False, SEED) is None  # the seed raises: a False is not read
    found = refusal("free_blocks", False, by_return)
    assert isinstance(found, RefusedByReturn) and found.operation == "free_blocks"
    assert refusal("free_blocks", True, by_return) is None
    assert refusal("free_blocks", None, by_return) is None
    assert refusal("get_new_blocks", None, by_return) is not None
    assert refusal("get_new_blocks", [], by_return) is None  # zero blocks, handed out
    assert refusal("reset_prefix_cache", False, by_return) is None  # its result, not a refusal


def test_a_pool_refusing_by_return_value_passes_under_its_file(profile_file: Path) -> None:
    result = robustness("ReturningPool", 1, "--profile", str(profile_file))
    assert result.exit_code == 0, result.output


def test_judged_by_the_seed_its_refusals_read_as_accepted_calls(profile_file: Path) -> None:
    result = robustness("ReturningPool", 1)
    assert result.exit_code == 1, result.output
    assert "was accepted although it breaks the contract" in result.output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_refusal_by_return_that_changed_the_pool_is_caught(profile_file: Path, seed: int) -> None:
    result = robustness("ChangedThenFalse", seed, "--profile", str(profile_file))
    assert result.exit_code == 1, result.output
    assert "free_blocks was refused (rule 'free-held') but the pool changed" in result.output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_true_on_a_refused_call_is_caught(profile_file: Path, seed: int) -> None:
    result = robustness("TrueOnRefusal", seed, "--profile", str(profile_file))
    assert result.exit_code == 1, result.output
    assert "free_blocks was accepted although it breaks the contract" in result.output
    assert "rule 'free-held'" in result.output


def test_derive_measures_it_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "derived.toml"
    result = CliRunner().invoke(
        main, ["profile", "derive", "--target", "returning_pools:ReturningPool", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "[knobs.refuses_by_return]" in text and text.count("[knobs.") == 1, text
    assert get_profile(str(out)).refuses_by_return
