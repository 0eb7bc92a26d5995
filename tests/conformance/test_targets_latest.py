"""``kvpool targets --latest`` against a fake package index: a folder of empty wheel files
that pip is pointed at alone (no network), so the real ``pip index versions`` answers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_index import point_pip_at  # pytest puts this folder on sys.path
from kvpool.conformance.cli import main
from kvpool.conformance.targets.releases import latest
from kvpool.conformance.targets.releases.index import (
    IndexAnswerError,
    newest_release,
    read_answer,
)
from kvpool.conformance.usage import EXIT_USAGE

#: The fake index: every engine's project but SGLang's, each with a release the suite
#: knows and a newer one (vLLM's newer than every profiled release; a pre-release beside).
WHEELS = (
    "vllm-0.33.0-cp38-abi3-manylinux1_x86_64.whl",
    "vllm-0.40.0-cp38-abi3-manylinux1_x86_64.whl",
    "vllm-0.41.0rc1-cp38-abi3-manylinux1_x86_64.whl",
    "lmdeploy-0.16.0-py3-none-any.whl",
    "lmdeploy-0.19.0-py3-none-any.whl",
    "aphrodite_engine-0.24.1-py3-none-any.whl",
    "vllm_mlx-0.6.0-py3-none-any.whl",
    "nano_vllm_npu-0.0.2-py3-none-any.whl",
    "nano_vllm_fork-20260210-py3-none-any.whl",
)


@pytest.fixture
def fake_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = point_pip_at(tmp_path / "index", monkeypatch)
    for name in WHEELS:
        (folder / name).write_bytes(b"")
    return folder


def rows_by_engine(output: str) -> dict[str, dict[str, str]]:
    return {row["engine"]: row for row in json.loads(output)}


def test_every_engine_gets_its_newest_release_and_a_verdict(fake_index: Path) -> None:
    result = CliRunner().invoke(main, ["targets", "--latest", "--json"])
    assert result.exit_code == 0, result.output
    rows = rows_by_engine(result.stdout)
    vllm = rows["vllm"]
    assert (vllm["newest"], vllm["supported"], vllm["profile"]) == ("0.40.0", "yes", "vllm-0.33")
    assert "newer than every known release" in vllm["reason"]
    assert "kvpool profile derive --target vllm==0.40.0" in vllm["missing"]
    lmdeploy = rows["lmdeploy"]
    assert (lmdeploy["newest"], lmdeploy["supported"], lmdeploy["profile"]) == (
        "0.19.0",
        "unknown",
        "lmdeploy",
    )
    assert "kvpool conform --target lmdeploy==0.19.0 --manager lmdeploy" in lmdeploy["missing"]
    for engine, newest in (("aphrodite", "0.24.1"), ("vllm-mlx", "0.6.0"), ("nanovllm", "0.0.2")):
        assert (rows[engine]["newest"], rows[engine]["supported"]) == (newest, "yes"), engine
    assert rows["nanovllm-fork"]["newest"] == "20260210"
    sglang = rows["sglang"]  # not on this index: a row that says so, not a failure
    assert (sglang["newest"], sglang["supported"]) == ("unknown", "unknown")
    assert "has no release of sglang" in sglang["missing"]
    assert {"impl", "spec"}.isdisjoint(rows)  # nothing of theirs is on an index


def test_the_table_names_every_column(fake_index: Path) -> None:
    result = CliRunner().invoke(main, ["targets", "--latest"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for word in ("newest release", "supported", "profile", "what is missing", "0.40.0"):
        assert word in result.output


def test_too_old_a_release_is_not_supported_and_says_why() -> None:
    from kvpool.conformance.targets.registry import engine

    rows = latest.latest_rows([engine("vllm")], ask=lambda project: "0.9.2")
    assert (rows[0].supported, rows[0].profile) == ("no", "-")
    assert "older than 0.10.1" in rows[0].missing


def test_offline_every_row_is_unknown_and_the_command_exits_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def offline(project: str) -> str:
        raise IndexAnswerError(f"asking the package index about {project} failed: refused")

    monkeypatch.setattr(latest, "newest_release", offline)
    result = CliRunner().invoke(main, ["targets", "--latest", "--json"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "answered about no engine" in result.stderr
    assert all(row["newest"] == "unknown" for row in json.loads(result.stdout))


def test_an_unreachable_index_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(IndexAnswerError, match="the package index has no release of lmdeploy"):
        newest_release("lmdeploy")


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "lmdeploy\n",
        "other (1.0)\n",
        "lmdeploy (1.0; rm -rf /)\n",
        "lmdeploy (" + "9" * 80 + ")",
    ],
)
def test_an_answer_naming_no_release_is_refused(answer: str) -> None:
    with pytest.raises(IndexAnswerError, match="names no release"):
        read_answer("lmdeploy", answer)


def test_names_compare_as_the_index_compares_them() -> None:
    assert read_answer("nano-vllm-npu", "nano_vllm.NPU (0.0.2)\nAvailable versions: 0.0.2") == (
        "0.0.2"
    )
    with pytest.raises(IndexAnswerError, match="not a project name"):
        newest_release("--index-url=http://x")
