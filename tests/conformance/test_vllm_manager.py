"""vLLM 0.33.0's own KV cache manager under the request machine (``--manager vllm``).

The release's manager conforms at a small size; each one-line fault planted in a copy of
it (``manager_faults``) is caught at ``kvpool conform --machine requests``'s default
examples, steps and blocks, by the property or comparison the fault breaks: on the first of
seeds 1, 2, 3 that catches it (one seed catches most faults at once), or, with
``KVPOOL_MANAGER_FAULT_SEEDS=1,2,3,4,5``, on every one of those seeds (the campaign of the
docs, where the spread is recorded); a finding replays and renders; a tree without a
drivable manager is refused with exit 2.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm.distribution import MANAGER_CACHE, cached_release
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import ManagerTargetFactory
from kvpool.conformance.targets.loading import TargetLoadError, load_manager
from kvpool.spec.profile import get_profile
from manager_faults import CORE, FAULTS, planted_manager_tree  # on sys.path via pytest

PROFILE = get_profile("vllm-0.33")
CAMPAIGN = os.environ.get("KVPOOL_MANAGER_FAULT_SEEDS")
SEEDS = tuple(int(s) for s in (CAMPAIGN or "1,2,3").split(","))
#: ``kvpool conform --machine requests``'s defaults (its pools have up to 12 blocks).
DEFAULTS = {"max_examples": 150, "steps": 40, "max_blocks": REQUEST_MIN_BLOCKS}


@pytest.fixture(scope="module")
def release() -> Path:
    """vLLM 0.33.0's pool and manager files (downloaded once into the cache)."""
    return cached_release("0.33.0", folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)


def _manager(tree: Path) -> ManagerTargetFactory:
    factory, name = load_manager("vllm", f"vllm@{tree}")
    assert factory is not None and name == "vllm"
    return factory


@pytest.fixture(scope="module")
def unplanted(release: Path, tmp_path_factory: pytest.TempPathFactory) -> ManagerTargetFactory:
    return _manager(planted_manager_tree(release, tmp_path_factory.mktemp("clean"), None))


def test_the_release_manager_conforms_at_a_small_size(unplanted: ManagerTargetFactory) -> None:
    result = run_requests(
        manager_builder(unplanted, PROFILE), ON_MANAGER, max_examples=25, steps=25, seed=1,
        max_blocks=8, max_findings=1,
    )  # fmt: skip
    assert result.failure is None, result.failure
    record = result.record
    for situation in (
        "prefix hit shared",
        "sliding window dropped blocks",
        "cached blocks evicted",
    ):
        assert record.situations[situation] > 0, situation
    for prop in ("append-only-up-to-null", "hit-keys", "refcounts-match-tables", "tail-first-free"):
        assert record.properties[prop] > 0, prop


@pytest.fixture
def planted(release: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    yield planted_manager_tree(release, tmp_path, FAULTS[request.param])


@pytest.mark.parametrize("planted", sorted(FAULTS), indirect=True)
def test_each_planted_fault_is_caught(planted: Path, request: pytest.FixtureRequest) -> None:
    fault = FAULTS[request.node.callspec.params["planted"]]
    factory = _manager(planted)
    missed = []
    for seed in SEEDS:
        result = run_requests(
            manager_builder(factory, PROFILE), ON_MANAGER, seed=seed, max_findings=1,
            shrink_seconds=1.0, **DEFAULTS,
        )  # fmt: skip
        if result.failure is None:
            missed.append(seed)
            continue
        message = result.failure.message
        assert any(text in message for text in fault.caught_by), message
        if not CAMPAIGN:
            break
    assert not CAMPAIGN or not missed, f"not caught on seeds {missed}: {fault.effect}"
    assert len(missed) < len(SEEDS), f"caught on none of seeds {list(SEEDS)}: {fault.effect}"


def test_every_fault_edits_one_line_of_the_manager(release: Path) -> None:
    for name, fault in FAULTS.items():
        source = (release / CORE / fault.file).read_text()
        assert source.count(fault.old) == 1, name
        removed = set(fault.old.splitlines()) - set(fault.new.splitlines())
        assert len(removed) == 1, (name, removed)


def test_a_finding_replays_and_shows_both_tables(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = planted_manager_tree(release, tmp_path, FAULTS["whole prompt hit"])
    monkeypatch.chdir(tmp_path)
    target = f"vllm@{tree}"
    args = ["--target", target, "--machine", "requests", "--manager", "vllm"]
    conform = CliRunner().invoke(
        main, ["conform", *args, "--seed", "1", "--max-examples", "30", "--fail-fast"]
    )
    assert conform.exit_code == 1, conform.output
    # caught by the property the fault breaks (or, where it runs first, by the admission
    # result that differs from the spec's)
    assert "computes-last-token" in conform.output or "tokens computed" in conform.output
    (trace,) = (tmp_path / "kvpool-traces").glob("*requests-manager*.itf.json")
    replay = CliRunner().invoke(
        main, ["replay", str(trace), "--target", target, "--manager", "vllm"]
    )
    assert replay.exit_code == 1, replay.output
    shown = CliRunner().invoke(main, ["show", "--format", "markdown", str(trace)])
    assert shown.exit_code == 0, shown.output
    assert "admit(" in shown.output and "expected" in shown.output and "actual" in shown.output


def test_a_tree_without_a_manager_is_refused(release: Path, tmp_path: Path) -> None:
    tree = planted_manager_tree(release, tmp_path, None)
    (tree / CORE / "kv_cache_manager.py").unlink()
    with pytest.raises(TargetLoadError, match=r"missing vllm/v1/core/kv_cache_manager\.py"):
        load_manager("vllm", f"vllm@{tree}")
    result = CliRunner().invoke(
        main, ["conform", "--target", f"vllm@{tree}", "--machine", "requests", "--manager", "vllm"]
    )
    assert result.exit_code == 2, result.output


def test_a_manager_without_a_call_the_adapter_needs_is_refused_naming_it(
    release: Path, tmp_path: Path
) -> None:
    tree = planted_manager_tree(release, tmp_path, None)
    path = tree / CORE / "kv_cache_manager.py"
    path.write_text(path.read_text().replace("        delay_cache_blocks: bool = False,\n", ""))
    with pytest.raises(TargetLoadError, match=r"allocate_slots\(\) takes no delay_cache_blocks"):
        load_manager("vllm", f"vllm@{tree}")


def test_only_vllm_targets_have_a_vllm_manager() -> None:
    with pytest.raises(TargetLoadError, match="give a vLLM target"):
        load_manager("vllm", "impl")


def test_the_manager_files_are_cached_beside_the_pool_files(release: Path) -> None:
    assert release.parent.name == "vllm-manager"
    assert (release / CORE / "kv_cache_manager.py").is_file()
    pool_cache = release.parent.parent / "vllm" / "0.33.0"
    if pool_cache.is_dir():  # the pool's cache keeps its own files only
        assert not (pool_cache / CORE / "kv_cache_manager.py").exists()


def test_the_manager_reaches_no_placeholder_but_the_request_status(release: Path) -> None:
    """Nothing the manager calls while it runs is missing from the isolated files: its
    only reads of a placeholder are the two request states of its admission watermark."""
    from kvpool.conformance.engines.vllm.isolation import load_release
    from kvpool.conformance.engines.vllm.manager_api import manager_api
    from kvpool.conformance.engines.vllm.manager_target import manager_factory
    from kvpool.conformance.engines.vllm.target import describe_release

    loaded = load_release(release, "0.33.0", manager=True)
    api = describe_release(loaded).api()
    factory = manager_factory(loaded.modules, api, manager_api(loaded.modules), "0.33.0")
    result = run_requests(
        manager_builder(factory, PROFILE), ON_MANAGER, max_examples=15, steps=20, seed=2,
        max_blocks=8,
    )  # fmt: skip
    assert result.failure is None, result.failure
    reached = set(loaded.placeholders.after_load)
    assert reached <= {
        "vllm.v1.request.RequestStatus.WAITING",
        "vllm.v1.request.RequestStatus.PREEMPTED",
    }, reached
