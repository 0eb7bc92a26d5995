"""vLLM working copies: a clone naming no version and a dev build naming one the table has
never seen are judged by the right profile, say why, and get the verdicts of the release
their code is (vLLM 0.33.0's files, laid out both ways)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm.distribution import (
    MANAGER_CACHE,
    PUBLISHER_CACHE,
    cached_release,
)
from kvpool.conformance.engines.vllm.profile_choice import choice_for_version
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS, PUBLISHER_MEMBERS
from kvpool.conformance.targets.loading import TargetLoadError, load_manager
from kvpool.conformance.targets.releases.files import MANIFEST
from kvpool.conformance.tools.stream.publisher import load_publisher, publisher_source

DEV_VERSION = "0.34.0.dev118+g4ba787ec9"
RUN = ["--level", "safety,order,robustness", "--seed", "1", "--max-examples", "25"]


def tree(tmp_path: Path, name: str, version: str | None) -> Path:
    """vLLM 0.33.0's files as a checkout (the pool's, the manager's and the publisher's):
    no manifest, ``_version.py`` only if given."""
    root = tmp_path / name
    for folder, members in (
        (MANAGER_CACHE, MANAGER_WHEEL_MEMBERS),
        (PUBLISHER_CACHE, PUBLISHER_MEMBERS),
    ):
        cached = cached_release("0.33.0", folder=folder, members=members)
        shutil.copytree(cached, root, dirs_exist_ok=True)
    (root / MANIFEST).unlink()
    (root / "vllm" / "_version.py").unlink()
    if version is not None:
        (root / "vllm" / "_version.py").write_text(f"__version__ = version = {version!r}\n")
    return root


def conform(target: str, tmp_path: Path) -> tuple[int, str, list[str]]:
    """Exit status, output and the findings (their headers and messages) of one run."""
    result = CliRunner().invoke(
        main, ["conform", "--target", target, *RUN, "--trace-dir", str(tmp_path / "traces")]
    )
    lines = result.output.splitlines()
    findings = [
        re.sub(r" \(finding \d+ of \d+\)", "", line) + " | " + lines[i + 1].strip()
        for i, line in enumerate(lines)
        if line.startswith("Nonconformance:")
    ]
    return result.exit_code, result.output, sorted(findings)


def test_a_clone_and_a_dev_build_get_the_verdicts_of_their_release(tmp_path: Path) -> None:
    status, _, findings = conform("vllm==0.33.0", tmp_path)
    assert status == 1 and findings  # 0.33.0 has robustness findings: something to compare
    clone = tree(tmp_path, "clone", None)
    status_clone, out, findings_clone = conform(f"vllm@{clone}", tmp_path)
    assert "profile vllm-0.33" in out
    assert "names no version" in out and "its code matches vllm-0.33 in every one" in out
    assert (status_clone, findings_clone) == (status, findings)
    dev = tree(tmp_path, "dev", DEV_VERSION)
    status_dev, out, findings_dev = conform(f"vllm@{dev}", tmp_path)
    assert (
        f"{DEV_VERSION}: a pre-release of 0.34.0, which comes before it; judged as vllm-0.33" in out
    )
    assert (status_dev, findings_dev) == (status, findings)


def test_a_clone_matching_no_profile_is_refused_with_the_nearest(tmp_path: Path) -> None:
    clone = tree(tmp_path, "odd", None)
    pool = clone / "vllm" / "v1" / "core" / "block_pool.py"
    text = pool.read_text()
    planted = "self.free_block_queue.append_n(blocks_to_evict_first)"
    pool.write_text(text.replace("self.free_block_queue.prepend_n(blocks_to_evict_first)", planted))
    assert planted in pool.read_text()
    result = CliRunner().invoke(main, ["conform", "--target", f"vllm@{clone}", *RUN])
    assert result.exit_code == 2
    assert "matches no known vLLM profile" in result.output
    assert "unkeyed_free_to_front" in result.output and "--profile my.toml" in result.output


def test_explain_shows_the_measured_knobs_and_the_choice(tmp_path: Path) -> None:
    clone = tree(tmp_path, "clone", None)
    result = CliRunner().invoke(main, ["targets", "--explain", f"vllm@{clone}"])
    assert result.exit_code == 0, result.output
    assert "profile vllm-0.33" in result.output and "names no version" in result.output
    assert "strong_pool_reference" in result.output and "NO" not in result.output


@pytest.mark.parametrize(
    ("version", "profile", "why"),
    [
        ("0.33.0", "vllm-0.33", "a release the table covers"),
        ("0.33.0.post1", "vllm-0.33", "a release the table covers"),
        ("0.34.0rc1", "vllm-0.33", "a pre-release of 0.34.0, which comes before it"),
        ("0.35.0.dev3+gabc123", "vllm-0.34", "newer than every known release"),
        ("0.33.0rc1", "vllm-0.32", "a pre-release of 0.33.0, which comes before it"),
        ("0.30.0.dev7+gabc123", "vllm-0.29", "the newest profile below it"),
    ],
)
def test_every_version_form_gets_a_profile_and_a_reason(
    version: str, profile: str, why: str
) -> None:
    choice = choice_for_version(version)
    assert choice.profile == profile
    assert why in choice.reason and choice.reason.startswith(version)


def test_the_manager_and_the_publisher_load_from_the_same_tree(tmp_path: Path) -> None:
    clone = tree(tmp_path, "clone", None)
    assert load_manager("vllm", f"vllm@{clone}")[1] == "vllm"
    manager = clone / "vllm" / "v1" / "core" / "kv_cache_manager.py"
    manager.write_text("raise RuntimeError('the tree of this test')\n")  # the tree's own file
    with pytest.raises(TargetLoadError, match="the tree of this test"):
        load_manager("vllm", f"vllm@{clone}")
    assert publisher_source(f"vllm@{clone}") == f"vllm@{clone}"
    assert publisher_source("vllm==0.30.0") == "0.30.0"
    release = load_publisher(f"vllm@{clone}")
    assert str(clone) in str(release.root) and hasattr(release.kv_events, "ZmqEventPublisher")
