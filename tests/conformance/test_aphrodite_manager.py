"""Aphrodite's own KV cache manager (``--manager aphrodite``): Aphrodite 0.24.1's
``KVCacheManager`` with its coordinator and single-type managers, loaded from its release
wheel under its own package name (``aphrodite/v1/core/kv_cache_manager.py``) and driven by
vLLM's manager adapter.

The release's manager conforms at a small size and reads no placeholder but the request
states; its API generation is the one the entry states; a tree of the fork loads by its own
package name (``vllm@PATH``, ``--package``); a one-line fault planted in the fork's own
manager file is caught, so the files run are the fork's and not vLLM's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.aphrodite.entry import ENTRY, KNOWN
from kvpool.conformance.engines.vllm.distribution import MANAGER_CACHE, cached_release
from kvpool.conformance.engines.vllm.isolation import load_release
from kvpool.conformance.engines.vllm.manager_api import ManagerApi, manager_api
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.pool.runner import LevelResult
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import ManagerTargetFactory
from kvpool.conformance.targets.loading import TargetLoadError, choose_profile, load_manager
from kvpool.spec.profile import get_profile
from manager_faults import FAULTS  # on sys.path via pytest

PROFILE = get_profile("vllm-0.30")
CORE = Path("aphrodite") / "v1" / "core"
#: ``kvpool conform --machine requests``'s defaults (its pools have up to 12 blocks).
DEFAULTS = {"max_examples": 150, "steps": 40, "max_blocks": REQUEST_MIN_BLOCKS}


@pytest.fixture(scope="module")
def release() -> Path:
    """Aphrodite 0.24.1's pool and manager files (downloaded once into the cache)."""
    return cached_release(
        KNOWN, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS, dist=ENTRY.dist
    )


def _tree(release: Path, where: Path, fault: str | None = None) -> Path:
    """A copy of the release's files under ``where``, with one of the vLLM manager faults
    (its line is the same in the fork's file) made once."""
    tree = where / "aphrodite-tree"
    shutil.copytree(release, tree)
    if fault is not None:
        planted = FAULTS[fault]
        path = tree / CORE / planted.file
        source = path.read_text()
        assert source.count(planted.old) == 1, fault
        path.write_text(source.replace(planted.old, planted.new))
    return tree


def _run(factory: ManagerTargetFactory, seed: int, **sizes: int) -> LevelResult:
    return run_requests(
        manager_builder(factory, PROFILE), ON_MANAGER, seed=seed, max_findings=1,
        shrink_seconds=1.0, **{**DEFAULTS, **sizes},
    )  # fmt: skip


def test_the_release_manager_runs_named_after_its_engine(release: Path) -> None:
    factory, name = load_manager("aphrodite", f"aphrodite=={KNOWN}")
    assert factory is not None and name == "aphrodite"
    result = run_requests(
        manager_builder(factory, PROFILE), ON_MANAGER, max_examples=25, steps=25, seed=1,
        max_blocks=8, max_findings=1,
    )  # fmt: skip
    assert result.failure is None, result.failure
    for situation in ("prefix hit shared", "sliding window dropped blocks"):
        assert result.record.situations[situation] > 0, situation
    assert result.record.properties["tail-first-free"] > 0


def test_the_manager_reaches_no_placeholder_but_the_request_status(release: Path) -> None:
    from kvpool.conformance.engines.vllm.manager_target import manager_factory
    from kvpool.conformance.engines.vllm.target import describe_release

    loaded = load_release(release, KNOWN, manager=True, package="aphrodite")
    api = describe_release(loaded).api()
    factory = manager_factory(loaded.modules, api, manager_api(loaded.modules), KNOWN)
    result = run_requests(
        manager_builder(factory, PROFILE), ON_MANAGER, max_examples=15, steps=20, seed=2,
        max_blocks=8,
    )  # fmt: skip
    assert result.failure is None, result.failure
    reached = set(loaded.placeholders.after_load)
    assert reached <= {
        "aphrodite.v1.request.RequestStatus.WAITING",
        "aphrodite.v1.request.RequestStatus.PREEMPTED",
    }, reached


def test_the_stated_generation_is_the_measured_one(release: Path) -> None:
    """The entry says 0.24.1's manager speaks vLLM 0.33's calls: what the adapter measures
    on its files (every call of the newest generation present)."""
    loaded = load_release(release, KNOWN, manager=True, package="aphrodite")
    assert manager_api(loaded.modules) == ManagerApi(
        skipped_take_prompt=True, skipped_on_manager=True, copies=True, evicts=True,
        identical_groups=True, two_full_groups=True,
    )  # fmt: skip
    assert "remove_skipped_blocks takes the prompt length" in ENTRY.manager_summary
    assert choose_profile(f"aphrodite=={KNOWN}").name == "vllm-0.30"


def test_a_fork_tree_loads_its_manager_by_its_own_package_name(
    release: Path, tmp_path: Path
) -> None:
    tree = _tree(release, tmp_path)
    factory, name = load_manager("vllm", f"vllm@{tree}")
    assert factory is not None and name == "vllm"
    factory, name = load_manager("aphrodite", f"aphrodite@{tree}")
    assert factory is not None and name == "aphrodite"
    assert _run(factory, 1, max_examples=10, steps=15).failure is None


def test_a_tree_of_two_packages_takes_the_one_package_named(release: Path, tmp_path: Path) -> None:
    tree = _tree(release, tmp_path)
    shutil.copytree(tree / "aphrodite", tree / "otherfork")
    args = ["--target", f"vllm@{tree}", "--machine", "requests", "--manager", "vllm"]
    refused = CliRunner().invoke(main, ["conform", *args, "-n", "5"])
    assert refused.exit_code == 2, refused.output
    assert "--package NAME" in refused.output
    chosen = CliRunner().invoke(
        main, ["conform", *args, "--package", "aphrodite", "-n", "5", "--steps", "10"]
    )
    assert chosen.exit_code == 0, chosen.output
    assert "manager vllm" in chosen.output


def test_a_tree_without_the_fork_manager_is_refused_naming_its_file(
    release: Path, tmp_path: Path
) -> None:
    tree = _tree(release, tmp_path)
    (tree / CORE / "kv_cache_manager.py").unlink()
    with pytest.raises(TargetLoadError, match=r"missing aphrodite/v1/core/kv_cache_manager\.py"):
        load_manager("aphrodite", f"aphrodite@{tree}")


@pytest.mark.parametrize("fault", ["free head first", "hit not touched"])
def test_a_fault_planted_in_the_fork_manager_is_caught(
    release: Path, tmp_path: Path, fault: str
) -> None:
    factory, _ = load_manager("aphrodite", f"aphrodite@{_tree(release, tmp_path, fault)}")
    assert factory is not None
    caught = []
    for seed in (1, 2, 3):
        failure = _run(factory, seed).failure
        if failure is not None:
            assert any(text in failure.message for text in FAULTS[fault].caught_by), failure.message
            caught.append(seed)
    assert len(caught) >= 2, f"caught on seeds {caught} of 1-3: {FAULTS[fault].effect}"


def test_a_finding_names_the_fork_manager_and_replays(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = f"aphrodite@{_tree(release, tmp_path, 'free head first')}"
    monkeypatch.chdir(tmp_path)
    args = ["--target", target, "--manager", "aphrodite"]
    conform = CliRunner().invoke(
        main, ["conform", *args, "--machine", "requests", "--seed", "1", "--fail-fast"]
    )
    assert conform.exit_code == 1, conform.output
    assert "tail-first-free" in conform.output
    assert f"--target {target} --manager aphrodite" in conform.output  # the replay command
    (trace,) = (tmp_path / "kvpool-traces").glob("*requests-manager*.itf.json")
    replay = CliRunner().invoke(main, ["replay", str(trace), *args])
    assert replay.exit_code == 1, replay.output
