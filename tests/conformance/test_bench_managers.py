"""kvpool bench --manager vllm: the request workload through our KVCacheManager beside vLLM
0.33.0's own, verified step by step before anything is timed (no timing assertions)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.engines.builtin.impl_manager import ManagerApiTarget, build_impl_manager
from kvpool.conformance.engines.vllm.distribution import MANAGER_CACHE, cached_release
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS
from kvpool.conformance.machines.requests.target import ManagerTarget, RequestSetup
from kvpool.conformance.tools.bench import command, managers
from kvpool.conformance.tools.bench.managers import HashFunction, ManagerContender
from kvpool.impl import KVCacheManager
from kvpool.impl.hashing import sha256_hash
from kvpool.spec import get_profile
from kvpool.spec.manager import Admit
from manager_faults import FAULTS, planted_manager_tree  # on sys.path via pytest

PROFILE = get_profile("vllm-0.33")
#: The planted manager answers every admission after this many with another table.
HONEST_ADMITS = 5


class SwappingManager(KVCacheManager):
    """Our manager, answering admissions after the fifth with the table's first two
    blocks swapped (its state is left as it is): a manager returning another table."""

    admits = 0

    def admit(self, request_id: str, tokens: Any, salt: str | None = None, **extra: Any) -> Any:
        result = super().admit(request_id, tokens, salt, **extra)
        if result is None:
            return None
        self.admits += 1
        table = result.block_ids[0]
        if self.admits > HONEST_ADMITS and len(table) > 1:
            swapped = (table[1], table[0], *table[2:])
            return replace(result, block_ids=(swapped, *result.block_ids[1:]))
        return result


def swapping() -> ManagerContender:
    def make(setup: RequestSetup, hash_function: HashFunction | None) -> ManagerTarget:
        manager = build_impl_manager(SwappingManager, setup)
        if hash_function is not None:
            manager.hash_function = hash_function
        return ManagerApiTarget(manager, setup, PROFILE, "swapping")

    return ManagerContender("swapping KVCacheManager", make, sha256_hash, managers.pool_free_count)


@pytest.fixture(scope="module")
def release() -> Path:
    return cached_release("0.33.0", folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)


@pytest.fixture(scope="module")
def vllm_release(release: Path) -> managers.VllmManager:
    return managers.vllm("vllm==0.33.0")


@pytest.fixture(scope="module")
def vllm_manager(vllm_release: managers.VllmManager) -> ManagerContender:
    return vllm_release.contender


def test_the_release_manager_gives_our_tables_at_every_step(
    vllm_release: managers.VllmManager,
) -> None:
    """Ours on the spec's hashing and ours hashing as the release (its block hashes
    compared after every step too) beside the release's manager."""
    like_it = managers.ours(PROFILE, vllm_release.hashing)
    assert like_it.hashing == vllm_release.contender.hashing == "vllm-0.33.0:sha256"
    contenders = [managers.ours(PROFILE), like_it, vllm_release.contender]
    for size in (200, 1000):
        prog = managers.record(size, 400, seed=1)
        operations = {a.operation for a in prog.actions}
        assert {"admit", "append", "compute", "finish", "preempt", "resume"} <= operations
        assert managers.verify(prog, contenders) is None


def test_verification_names_the_step_and_request_of_another_table(
    vllm_manager: ManagerContender,
) -> None:
    prog = managers.record(200, 400)
    found = managers.verify(prog, [vllm_manager, swapping()])
    assert found is not None and found.what == "answers"
    # the first admission the planted manager answers falsely: found by replaying ours
    ours = managers.ours(PROFILE).make(prog.setup, None)
    admitted, expected = 0, None
    for i, action in enumerate(prog.actions):
        answer = managers.step(ours, action)
        if isinstance(action, Admit) and answer is not None:
            admitted += 1
            if admitted > HONEST_ADMITS and len(answer.tables[0]) > 1:
                expected = i
                break
    assert found.index == expected, found.describe()
    assert isinstance(found.action, Admit)
    text = found.describe()
    assert f"step {expected} admit of request {found.action.request_id!r}" in text
    assert text.count("tables") == 2


#: Faults of ``manager_faults`` the request workload reaches (one full-attention group, no
#: resets, no sliding window): each changes which blocks a later step gets or frees.
REACHED = ("free head first", "hit not touched")


@pytest.mark.parametrize("fault", REACHED)
def test_a_fault_planted_in_the_release_manager_is_caught_before_timing(
    release: Path, tmp_path: Path, fault: str
) -> None:
    tree = planted_manager_tree(release, tmp_path, FAULTS[fault])
    planted = managers.vllm(f"vllm@{tree}").contender
    for seed in (0, 1, 2):
        prog = managers.record(200, 1000, seed)
        found = managers.verify(prog, [managers.ours(PROFILE), planted])
        assert found is not None, f"{fault} not seen on seed {seed}"


@pytest.mark.parametrize("like_the_release", [True, False])
def test_prehashed_runs_hash_through_the_recorded_digests_only(
    vllm_manager: ManagerContender, like_the_release: bool
) -> None:
    hashing = managers.vllm("vllm==0.33.0").hashing if like_the_release else None
    contenders = [managers.ours(PROFILE, hashing), vllm_manager]
    prog = managers.record(200, 300)
    digests = [managers.Digests(c.hash_function) for c in contenders]
    assert managers.verify(prog, contenders, digests) is None
    for contender, recorded in zip(contenders, digests, strict=True):
        assert recorded.known
        assert managers.time_once(prog, contender, recorded.lookup) >= 0.0
        # an empty table of digests fails at the first hash: nothing else is hashed
        with pytest.raises(KeyError):
            managers.time_once(prog, contender, managers.Digests(sha256_hash).lookup)
    ours, theirs = (set(d.known.values()) for d in digests)
    if like_the_release:  # the same function: ours are the release's (a request refused
        # for want of room is hashed only as far as our lookup read, but whole by vLLM's)
        assert ours and ours <= theirs
    else:  # different inputs and functions: digests of their own
        assert ours.isdisjoint(theirs)


def _bench(*args: str) -> Any:
    return CliRunner().invoke(
        command.bench,
        [
            "--manager",
            "vllm",
            "--sizes",
            "200,400",
            "--ops",
            "150",
            "--repeat",
            "1",
            "--json",
            *args,
        ],
    )


def test_the_command_reports_both_timings_per_size(vllm_manager: ManagerContender) -> None:
    result = _bench("--target", "vllm==0.33.0")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["level"] == "manager" and report["verified"] is True
    assert report["pools"] == {"ours": "ours KVCacheManager", "vllm": vllm_manager.name}
    rows = {(r["workload"], r["num_gpu_blocks"]): r for r in report["results"]}
    timings = managers.PROGRAMS[managers.WORKLOAD]
    assert set(rows) == {(w, n) for w in timings for n in (200, 400)}
    for row in rows.values():
        assert row["calls"] == 150 and row["ours_ops_per_s"] > 0 and row["vllm_ops_per_s"] > 0
    assert report["aims"] == {} and report["growth"] == {} and report["memory"] == []
    # the long prompts do not fit pools this small: said, not run
    assert [s.split(" @ ")[0] for s in report["skipped"]] == [managers.LONG] * 2


def test_the_long_prompts_are_8k_to_128k_tokens_and_verified(
    vllm_manager: ManagerContender,
) -> None:
    prog = managers.record(managers.LONG_MIN_BLOCKS, 12, workload=managers.LONG)
    admits = [a for a in prog.actions if isinstance(a, Admit)]
    assert admits and all(8_192 <= len(a.tokens) <= 131_072 for a in admits)
    like_it = managers.ours(PROFILE, managers.vllm("vllm==0.33.0").hashing)
    assert managers.verify(prog, [managers.ours(PROFILE), like_it, vllm_manager]) is None


def test_the_command_reports_no_ratio_where_the_managers_disagree(
    monkeypatch: pytest.MonkeyPatch, vllm_manager: ManagerContender
) -> None:
    monkeypatch.setattr(managers, "ours", lambda profile, hashing=None: swapping())
    result = _bench()
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["verified"] is False and report["results"] == []
    assert len(report["disagreements"]) == 2
    assert all("admit of request" in d for d in report["disagreements"])
    assert "managers disagree: requests (managers) @ 200 blocks, step" in result.stderr


def test_the_command_refuses_what_managers_do_not_measure() -> None:
    for extra in (["-w", "churn"], ["--memory"]):
        result = _bench(*extra)
        assert result.exit_code == 2 and "--manager vllm" in result.output
