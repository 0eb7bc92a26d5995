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
from kvpool.conformance.targets.releases.short_run import ShortRun, short_run
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


@pytest.fixture(scope="module")
def answers() -> dict[str, str | IndexAnswerError]:
    """What the fake index answered about each project, kept for the module's other run."""
    return {}


@pytest.fixture
def asked_once(
    fake_index: Path, answers: dict[str, str | IndexAnswerError], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ``pip index versions`` answers each project once for this module (a pip
    process each, the module's CPU cost): the JSON and the table run read the same answers."""

    def ask(project: str) -> str:
        if project not in answers:
            try:
                answers[project] = newest_release(project)
            except IndexAnswerError as error:
                answers[project] = error
        answer = answers[project]
        if isinstance(answer, IndexAnswerError):
            raise answer
        return answer

    monkeypatch.setattr(latest, "newest_release", ask)


def rows_by_engine(output: str) -> dict[str, dict[str, str]]:
    return {row["engine"]: row for row in json.loads(output)}


def fake_runs(entry: object, target: str) -> ShortRun:
    """What the short runs give here: vLLM's newest runs with a finding, LMDeploy's is
    refused, every other one passes (nothing is downloaded)."""
    if target.startswith("vllm=="):
        return ShortRun("findings", ("touch-identity",), "", ("kvpool conform ...",))
    if target.startswith("lmdeploy=="):
        return ShortRun("refused", (), "could not download lmdeploy 0.19.0 with pip")
    return ShortRun("pass", (), "", ("kvpool conform ...",))


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(latest, "run_release", lambda entry, target, say: fake_runs(entry, target))


def test_every_engine_gets_its_newest_release_and_a_verdict(asked_once: None, runs: None) -> None:
    result = CliRunner().invoke(main, ["targets", "--latest", "--json"])
    assert result.exit_code == 0, result.output
    rows = rows_by_engine(result.stdout)
    vllm = rows["vllm"]
    assert (vllm["newest"], vllm["supported"], vllm["profile"]) == ("0.40.0", "yes", "vllm-0.34")
    assert (vllm["result"], vllm["rules"]) == ("findings", ["touch-identity"])
    assert "newer than every known release" in vllm["reason"]
    assert "kvpool profile derive --target vllm==0.40.0" in vllm["missing"]
    lmdeploy = rows["lmdeploy"]  # refused by its run: supported no, with the reason
    assert (lmdeploy["newest"], lmdeploy["supported"], lmdeploy["result"]) == (
        "0.19.0",
        "no",
        "refused",
    )
    assert "could not download" in lmdeploy["missing"]
    for engine, newest in (("aphrodite", "0.24.1"), ("vllm-mlx", "0.6.0"), ("nanovllm", "0.0.2")):
        row = rows[engine]
        assert (row["newest"], row["supported"], row["result"]) == (newest, "yes", "pass"), engine
    assert rows["nanovllm-fork"]["newest"] == "20260210"
    sglang = rows["sglang"]  # not on this index: a row that says so, not a failure
    assert (sglang["newest"], sglang["supported"]) == ("unknown", "unknown")
    assert "has no release of sglang" in sglang["missing"]
    assert {"impl", "spec"}.isdisjoint(rows)  # nothing of theirs is on an index
    assert "asking the package index" in result.stderr  # progress, beside the JSON


def test_a_finding_is_named_by_its_rule_property_or_invariant() -> None:
    from kvpool.conformance.targets.releases.short_run import _rule

    assert _rule("touch: block 1: rule 'touch-identity': block 1 is free") == "touch-identity"
    assert _rule("the null block was cached (invariant 'null-block-inert': a") == (
        "null-block-inert"
    )
    assert _rule("after free_blocks: free count 3, expected 2") is None


def test_a_short_run_reads_pass_refusal_and_missing_events() -> None:
    def runner(outcomes: list[tuple[int, str]]) -> object:
        def run(argv: list[str]) -> tuple[int, str]:
            return outcomes.pop(0)

        return run

    passed = short_run("x==1", True, "x", runner=runner([(0, ""), (0, "")]))  # type: ignore[arg-type]
    assert (passed.status, passed.ran, len(passed.commands)) == ("pass", True, 2)
    quiet = runner([(0, ""), (2, "error: target 'x' publishes no KV events (its pool ...")])
    assert short_run("x==1", True, runner=quiet).reason == "no events"  # type: ignore[arg-type]
    refused = short_run(
        "x==1", False, runner=runner([(2, "\nerror: vLLM 9.9 uses a\n  placeholder")])
    )  # type: ignore[arg-type]
    assert (refused.status, refused.reason) == ("refused", "vLLM 9.9 uses a placeholder")


def test_an_engine_its_requests_machine_refuses_runs_at_the_engine_machine() -> None:
    """SGLang from 0.5 on, TokenSpeed: the requests machine refuses the release (exit 2),
    their driver runs it instead; an engine without a driver stays refused."""
    seen: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str]:
        seen.append(argv)
        if argv[argv.index("--machine") + 1] == "engine":
            return 0, ""
        return 2, "error: x==1: check it with --machine engine"

    driven = short_run("x==1", False, runner=run, drives=True)  # type: ignore[arg-type]
    assert (driven.status, driven.reason) == (
        "pass",
        "the requests machine refused it: run at --machine engine",
    )
    assert [a[a.index("--machine") + 1] for a in seen] == ["requests", "engine"]
    assert "--machine engine" in driven.commands[-1]
    seen.clear()
    refused = short_run("x==1", False, runner=run)  # type: ignore[arg-type]
    assert refused.status == "refused" and len(seen) == 1


def test_a_row_run_at_the_engine_machine_names_no_profile() -> None:
    """The engine machine judges by the properties, not by the profile the pool levels
    would have used: the row says so."""
    from kvpool.conformance.targets.registry import engine
    from kvpool.conformance.targets.releases.short_run import ENGINE_ONLY

    sglang = engine("sglang")
    engine_only = ShortRun("pass", (), ENGINE_ONLY, ("kvpool conform ...",))
    row = latest._row(sglang, "sglang", lambda project: "0.5.23", lambda e, t: engine_only)
    assert (row.supported, row.profile, row.result) == ("yes", "none", "pass")
    assert ENGINE_ONLY in row.missing
    passed = ShortRun("pass", (), "", ("kvpool conform ...",))
    row = latest._row(sglang, "sglang", lambda project: "0.4.6.post5", lambda e, t: passed)
    assert row.profile == "seed"


def test_the_table_names_every_column(asked_once: None, runs: None) -> None:
    result = CliRunner().invoke(main, ["targets", "--latest"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for word in ("newest release", "supported", "result", "profile", "what is missing", "0.40.0"):
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
