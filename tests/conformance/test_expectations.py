"""Known findings from an expectations file: the run goes on past them, so the bugs
behind them stay visible; a known finding that no longer shows up fails the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.expectations import ExpectationsError, read_expectations
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS, EXIT_USAGE

HERE = Path(__file__).parent
FILES = HERE / "expectations"


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)


def conform(*args: str) -> Result:
    return CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--machine",
            "pool",
            "--level",
            "order",
            "--seed",
            "3",
            "--max-examples",
            "150",
            "--max-findings",
            "3",
            *args,
        ],
    )


def test_without_expectations_the_second_fault_hides_behind_the_first() -> None:
    result = conform("--target", "surface_pools:TwoFaults")
    assert result.exit_code == EXIT_FINDING, result.output
    assert "free queue order" in result.output
    assert "ref_cnt expected 1, got 2" not in result.output


def test_an_expected_finding_is_passed_and_the_fault_behind_it_is_caught() -> None:
    result = conform(
        "--target", "surface_pools:TwoFaults", "--expect", str(FILES / "two_faults.toml")
    )
    assert result.exit_code == EXIT_FINDING, result.output
    assert "ref_cnt expected 1, got 2" in result.output
    assert "Nonconformance: pool/order" in result.output
    assert "known findings" in result.output
    # the known one is counted, not reported as a finding
    assert "  after free_blocks: free queue order" not in result.output


def test_a_known_finding_that_no_longer_shows_up_fails_the_run() -> None:
    result = conform("--target", "tiny_pool:TinyPool", "--expect", str(FILES / "stale.toml"))
    assert result.exit_code == EXIT_FINDING, result.output
    assert "A known finding no longer shows up: after free_blocks: free queue order" in (
        result.output
    )


def test_the_only_fault_expected_passes() -> None:
    result = conform(
        "--target", "surface_pools:ReversedBatch", "--expect", str(FILES / "two_faults.toml")
    )
    assert result.exit_code == EXIT_PASS, result.output


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ("[[expected]]\nrule = 1\n", ".toml", "'rule' must be a non-empty string"),
        ("[[expected]]\nrule = 'x'\nsituation = 'y'\n", ".toml", "'upstream' is missing"),
        ("[[expected]]\nrule='x'\nsituation='y'\nupstream='ftp://a'\n", ".toml", "must be a link"),
        ("[" * 100_000, ".json", "not valid JSON"),
        ("\xff", ".toml", "not valid TOML"),
        ('{"expected": 3}', ".json", "is a list of entries"),
        ('{"expected": [], "import": "os"}', ".json", "unknown top-level key"),
        ("expected = []\n", ".yaml", "ends in .toml or .json"),
    ],
)
def test_a_malformed_file_is_a_clear_error(
    tmp_path: Path, text: str, suffix: str, message: str
) -> None:
    path = tmp_path / f"expect{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ExpectationsError, match=message):
        read_expectations(path)
    result = conform("--target", "impl", "--expect", str(path))
    assert result.exit_code == EXIT_USAGE, result.output
    assert message.split("'")[0] in result.output
