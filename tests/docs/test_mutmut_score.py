"""The mutmut score record (docs/data/mutmut.json): consistent, every killing test real, the
published score computed from it and within the aim; and each consistency check catches a
planted fault."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from kvpool.conformance.tools.reference.fragments import expand
from kvpool.conformance.tools.reference.mutmut_score import (
    DATA,
    ScoreFileError,
    impl_digest,
    impl_tree_digest,
    parse,
    readme_summary,
    score_table,
    survivors_table,
)

ROOT = Path(__file__).resolve().parents[2]
KILL_TESTS = ROOT / "tests" / "impl" / "test_impl_mutmut_kills.py"
#: Issue 7: the unit tests kill at least 90% of the non-equivalent mutants.
AIM = 0.90


def kill_test_names() -> set[str]:
    tree = ast.parse(KILL_TESTS.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def record() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "docs" / DATA).read_text())
    return data


def test_the_committed_record_is_consistent_and_meets_the_aim() -> None:
    score = parse(record(), kill_test_names())
    assert score.checked > 0
    assert score.score >= AIM, f"{score.score:.1%} of the non-equivalent mutants killed"


def test_the_pages_show_the_computed_score_and_every_verdict() -> None:
    score = parse(record())
    page = expand(
        "# Scoring\n\n<!-- kvpool:mutmut-score -->\n\n<!-- kvpool:mutmut-survivors -->\n",
        "guide/scoring.md",
        ROOT / "docs",
    )
    assert f"{score.score:.1%}" in page
    assert f"{score.killed:,} / {score.checked - score.equivalent:,}" in page
    for verdict in score.verdicts:
        assert f"`{verdict.function}`" in page
        assert verdict.by in page
    scoring = (ROOT / "docs" / "guide" / "scoring.md").read_text()
    assert "<!-- kvpool:mutmut-score -->" in scoring
    assert "<!-- kvpool:mutmut-survivors -->" in scoring


def test_the_readme_states_the_computed_score() -> None:
    expected = readme_summary(parse(record()), ROOT / "impl")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert expected in readme, f"README.md should say: {expected}"


def test_mutant_names_read_as_functions() -> None:
    data = {
        "schema": "kvpool-mutmut/1",
        "run": {"mutants": 2, "status": {"survived": 2}},
        "reasons": {"r": "why"},
        "verdicts": [
            {
                "mutant": "kvpool.impl.block_pool.xǁBlockPoolǁ_check_own__mutmut_8",
                "status": "survived",
                "verdict": "equivalent",
                "by": "r",
            },
            {
                "mutant": "kvpool.impl.hashing.x_get_group_id__mutmut_4",
                "status": "survived",
                "verdict": "equivalent",
                "by": "r",
            },
        ],
    }
    first, second = parse(data).verdicts
    assert (first.function, first.number) == ("block_pool.BlockPool._check_own", 8)
    assert (second.function, second.number) == ("hashing.get_group_id", 4)


def _small() -> dict[str, Any]:
    return {
        "schema": "kvpool-mutmut/1",
        "run": {
            "date": "2026-11-29",
            "commit": "abc1234",
            "mutmut": "3.8.1",
            "python": "3.11.7",
            "hours": 1.5,
            "mutants": 10,
            "status": {"killed": 6, "timeout": 1, "survived": 2, "no tests": 1},
        },
        "reasons": {"same": "it changes nothing"},
        "verdicts": [
            {"mutant": "kvpool.impl.m.x_f__mutmut_1", "status": "survived",
             "verdict": "killed", "by": "test_f"},
            {"mutant": "kvpool.impl.m.x_f__mutmut_2", "status": "survived",
             "verdict": "equivalent", "by": "same"},
            {"mutant": "kvpool.impl.m.x_g__mutmut_1", "status": "no tests",
             "verdict": "killed", "by": "test_g"},
        ],
    }  # fmt: skip


def test_the_score_is_killed_over_checked_minus_equivalent() -> None:
    score = parse(_small(), {"test_f", "test_g"})
    # 6 killed + 1 timeout by the run, 2 killed since; 10 checked, 1 equivalent
    assert (score.killed, score.checked, score.equivalent) == (9, 10, 1)
    assert score.score == 1.0
    assert "9 / 9 = 100.0%" in score_table(score, ROOT / "impl")
    table = survivors_table(score)
    assert "`m.f` | 1 | `test_f`" in table and "`m.f` | 2 | **same**" in table


def test_unchecked_mutants_make_a_partial_score_that_says_so() -> None:
    data = _small()
    data["run"]["mutants"] = 14
    data["run"]["status"]["not checked"] = 4
    score = parse(data)
    assert (score.checked, score.unchecked) == (10, 4)
    assert "checked 10 of the 14 mutants" in score_table(score, ROOT / "impl")


def _broken(change: str) -> dict[str, Any]:
    data = copy.deepcopy(_small())
    if change == "counts":
        data["run"]["mutants"] = 11
    elif change == "missing verdict":
        data["verdicts"].pop(0)
    elif change == "two verdicts":
        data["verdicts"].append(dict(data["verdicts"][0]))
        data["run"]["status"]["survived"] = 3
        data["run"]["status"]["killed"] = 5
    elif change == "unexplained reason":
        data["verdicts"][1]["by"] = "other"
    elif change == "unused reason":
        data["reasons"]["spare"] = "never used"
    elif change == "no such test":
        data["verdicts"][0]["by"] = "test_nothing"
    elif change == "bad verdict":
        data["verdicts"][0]["verdict"] = "probably fine"
    elif change == "verdict for a killed mutant":
        data["verdicts"][0]["status"] = "killed"
    elif change == "schema":
        data["schema"] = "kvpool-mutmut/0"
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("counts", "add up to 10, not 11"),
        ("missing verdict", "2 mutants are 'survived' but 1 have a verdict"),
        ("two verdicts", "two verdicts"),
        ("unexplained reason", "reason 'other' is not explained"),
        ("unused reason", "reasons no verdict uses: ['spare']"),
        ("no such test", "killing test 'test_nothing' does not exist"),
        ("bad verdict", "verdict must be killed or equivalent"),
        ("verdict for a killed mutant", "needs no verdict"),
        ("schema", "schema must be"),
    ],
)
def test_an_inconsistent_record_is_refused_saying_where(change: str, message: str) -> None:
    with pytest.raises(ScoreFileError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse(_broken(change), {"test_f", "test_g"})


def test_a_run_with_only_equivalent_survivors_says_so() -> None:
    data = _small()
    data["verdicts"] = [v for v in data["verdicts"] if v["verdict"] == "equivalent"]
    data["run"]["status"] = {"killed": 8, "timeout": 1, "survived": 1}
    score = parse(data)
    assert "Every mutant the run did not kill is argued equivalent (1;" in survivors_table(score)
    assert "Killed by a test" not in survivors_table(score)
    assert "9 / 9 = 100.0%" in score_table(score, ROOT / "impl")


def write_impl(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_a_score_of_other_code_is_marked_stale(tmp_path: Path) -> None:
    """The record keeps the content hash of the impl/ its run mutated; any change to
    impl/ since (or a record without the hash) marks the score stale, without git."""
    impl = write_impl(tmp_path / "impl", {"block_pool.py": "x = 1\n", "sub/q.py": "y = 2\n"})
    data = _small()
    data["run"]["impl_sha256"] = impl_tree_digest(impl)
    score = parse(data)
    assert score.stale(impl) is None
    assert "Stale" not in score_table(score, impl)
    assert readme_summary(score, impl).endswith("100.0%**.")
    (impl / "block_pool.py").write_text("x = 2\n")  # impl/ changed since the run
    assert score.stale(impl) == "impl/ has changed since commit abc1234"
    assert score_table(score, impl).startswith('!!! warning "Stale')
    assert "(**stale**: impl/ has changed since commit abc1234" in readme_summary(score, impl)
    del data["run"]["impl_sha256"]
    assert "keeps no content hash" in (parse(data).stale(impl) or "")


def test_the_impl_hash_depends_on_content_and_paths_only(tmp_path: Path) -> None:
    files = {"a.py": "x = 1\n", "b/c.py": "y = 2\n"}
    one = write_impl(tmp_path / "one", files)
    two = write_impl(tmp_path / "two", dict(reversed(list(files.items()))))
    (two / "__pycache__").mkdir()
    (two / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert impl_tree_digest(one) == impl_tree_digest(two)
    assert impl_tree_digest(one) == impl_digest([("b/c.py", b"y = 2\n"), ("a.py", b"x = 1\n")])
    (two / "b" / "c.py").rename(two / "b" / "d.py")
    assert impl_tree_digest(one) != impl_tree_digest(two)


def test_the_recorded_impl_hash_is_that_of_the_recorded_commit() -> None:
    """The hash in the record is the one of impl/ at the run's commit (read from git,
    where the checkout has the history), so "stale" is decided against the right code."""
    import subprocess

    score = parse(record())
    commit = score.run["commit"]
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit, "impl/"],
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip(f"commit {commit} is not in this checkout's history")
    files = [
        (
            name.removeprefix("impl/"),
            subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{commit}:{name}"],
                capture_output=True,
                check=True,
            ).stdout,
        )
        for name in listed.stdout.split()
        if name.endswith(".py")
    ]
    assert score.run["impl_sha256"] == impl_digest(files)
