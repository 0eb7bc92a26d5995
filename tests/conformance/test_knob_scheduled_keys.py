"""Knob ``scheduled_keys_within_pass``: a manager that keys a block when it schedules it
(before the forward pass writes it) may serve that key to another request of the same pass,
and must drop it when its request leaves before the pass wrote the block
(``pass_managers.py``). The one keeping that window passes under a profile file that states
the design; the one that keeps the key after its request left is caught by the stale hit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.api import ManagerConfig, PoolView, RequestSetup
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.lockstep import Nonconformance
from kvpool.conformance.machines.requests.capabilities import Capabilities
from kvpool.conformance.machines.requests.checks import RequestChecks
from kvpool.spec import PoolConfig
from kvpool.spec.manager import FULL_ATTENTION
from kvpool.spec.manager import properties as props

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
def test_a_key_kept_after_its_pass_ended_unwritten_is_caught(profile_file: Path, seed: int) -> None:
    result = conform("make_stale", seed, "--profile", str(profile_file))
    assert result.exit_code == 1, result.output
    assert "property 'own-contents' broken" in result.output
    assert "a stale key, registered when request" in result.output


def test_the_pass_that_keyed_a_block_writes_it_though_a_reader_of_that_pass_holds_it() -> None:
    setup = RequestSetup(ManagerConfig(2, (FULL_ATTENTION,)), PoolConfig(4))
    view = PoolView(free_count=2, ref_cnt=(0, 2, 0, 0), keys=(frozenset(), frozenset([b"k"])) * 2)
    checks = RequestChecks(setup, Counter())
    checks.declared = Capabilities(registers_when_scheduled=True)
    checks.keys_within_pass = True
    checks.pending[1] = (b"k", "a")  # keyed when 'a' was scheduled, not written yet
    checks.guard("a", 1, False, view, "write")  # 'a's pass writes it: b reads it in that pass
    with pytest.raises(Nonconformance, match="property 'write-guard'"):
        checks.guard("b", 1, True, view, "write")  # the reader may not write it
    checks.keys_within_pass = False
    with pytest.raises(Nonconformance, match="property 'write-guard'"):
        checks.guard("a", 1, True, view, "write")  # without the knob: held twice


def test_a_block_pending_for_one_request_stays_its_own_when_another_schedules_it() -> None:
    """Two requests of one pass with the same keyed block in their tables: the one that
    keyed it first writes it; the other, writing it too, is the second writer, named."""
    setup = RequestSetup(ManagerConfig(2, (FULL_ATTENTION,)), PoolConfig(4))
    checks = RequestChecks(setup, Counter())
    checks.declared = Capabilities(registers_when_scheduled=True)
    checks.keys_within_pass = True
    checks.admitted("a", (1, 2), None)
    checks.admitted("b", (1, 2), None)
    key = props.expected_key(checks.requests["a"].hashes(checks.hbs), checks.hbs, 2, 0, 0)
    keyed = (frozenset(), frozenset([key]), frozenset(), frozenset())
    view = PoolView(free_count=2, ref_cnt=(0, 2, 0, 0), keys=keyed)
    for rid in ("a", "b"):
        checks.requests[rid].tables = ((1,),)
        checks._note_pending(rid, checks.requests[rid], view)
    assert checks.pending_for(1) == "a"
    checks.guard("a", 1, False, view, "write")  # the pass that keyed it writes it
    with pytest.raises(Nonconformance, match=r"property 'write-guard' broken \(request 'b'"):
        checks.guard("b", 1, True, view, "write")
