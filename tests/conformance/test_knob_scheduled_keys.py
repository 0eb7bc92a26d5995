"""Knob ``scheduled_keys_within_pass``: a manager that keys a block when it schedules it
(before the forward pass writes it) may serve that key to another request of the same pass,
and must drop it when its request leaves before the pass wrote the block
(``pass_managers.py``). The one keeping that window passes under a profile file that states
the design; the one that keeps the key after its request left is caught by the stale hit."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main

PROFILE = """\
base = "seed"
description = "a manager keying blocks when it schedules them, safe within one forward pass"

[knobs.scheduled_keys_within_pass]
value = true
reason = "a request scheduled into the same pass may hit a block before the pass writes it"
"""


@pytest.fixture
def profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "pass.toml"
    path.write_text(PROFILE)
    return path


def conform(manager: str, seed: int, *more: str) -> Result:
    run = ["conform", "--manager", f"pass_managers:{manager}", "--seed", str(seed)]
    return CliRunner().invoke(main, [*run, "--no-coverage", *more])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_manager_keeping_the_one_pass_window_passes_under_its_file(
    profile_file: Path, seed: int
) -> None:
    result = conform("make", seed, "--profile", str(profile_file))
    assert result.exit_code == 0, result.output
    assert "requests/manager" in result.output


def test_judged_by_the_seed_a_hit_in_the_same_pass_reads_as_unwritten(profile_file: Path) -> None:
    result = conform("make", 1)
    assert result.exit_code == 1, result.output
    assert "property 'own-contents' broken" in result.output
    assert "a stale key" not in result.output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_key_kept_after_its_pass_ended_unwritten_is_caught(
    profile_file: Path, seed: int
) -> None:
    result = conform("make_stale", seed, "--profile", str(profile_file))
    assert result.exit_code == 1, result.output
    assert "property 'own-contents' broken" in result.output
    assert "a stale key, registered when request" in result.output
