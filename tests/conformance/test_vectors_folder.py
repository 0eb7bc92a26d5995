"""`kvpool vectors generate --out DIR` removes or replaces only the files it wrote there
(listed in the folder's manifest): a user's own files stay, and one where a vector goes
stops the generation before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.vectors.owned import (
    MANIFEST,
    FolderNotOwned,
    read_manifest,
    write_owned,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "vectors"
A, B = "seed/free_blocks/order-0.itf.json", "seed/touch/order-0.itf.json"


def test_a_stale_vector_it_wrote_is_removed_and_a_users_file_is_not(tmp_path: Path) -> None:
    write_owned(tmp_path, {A: "a\n", B: "b\n"})
    saved = tmp_path / "mine/counterexample.itf.json"
    saved.parent.mkdir()
    saved.write_text("my trace")
    written = write_owned(tmp_path, {A: "a2\n"})
    assert written.removed == [B] and not (tmp_path / B).exists()
    assert (tmp_path / A).read_text() == "a2\n", "a file it wrote is replaced"
    assert saved.read_text() == "my trace"
    assert written.left == ["mine/counterexample.itf.json"]
    assert read_manifest(tmp_path) == {A}


def test_a_users_file_where_a_vector_goes_stops_before_any_write(tmp_path: Path) -> None:
    mine = tmp_path / B
    mine.parent.mkdir(parents=True)
    mine.write_text("my own")
    with pytest.raises(FolderNotOwned, match="kvpool did not write"):
        write_owned(tmp_path, {A: "a\n", B: "b\n"})
    assert mine.read_text() == "my own"
    assert not (tmp_path / A).exists() and not (tmp_path / MANIFEST).exists()


def test_a_users_file_with_the_vectors_own_bytes_is_kept_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "seed/free_blocks").mkdir(parents=True)
    (tmp_path / A).write_text("a\n")
    assert write_owned(tmp_path, {A: "a\n"}).files == [tmp_path / A]


@pytest.mark.parametrize(
    "line", ["../outside.itf.json", "/etc/x.itf.json", "seed/notes.txt", "a/../../b.itf.json"]
)
def test_a_manifest_line_is_never_followed_out_of_the_folder(tmp_path: Path, line: str) -> None:
    outside = tmp_path / "outside.itf.json"
    outside.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(f"{A}\n{line}\n")
    with pytest.raises(FolderNotOwned, match="line 2"):
        write_owned(out, {A: "a\n"})
    assert outside.read_text() == "keep"


def test_the_committed_manifest_lists_the_committed_corpus() -> None:
    listed = read_manifest(CORPUS)
    assert listed == {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.itf.json")}


def test_generate_into_a_folder_holding_a_users_vector_exits_2(tmp_path: Path) -> None:
    mine = tmp_path / A
    mine.parent.mkdir(parents=True)
    mine.write_text("my own")
    result = CliRunner().invoke(main, ["vectors", "generate", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "kvpool did not write" in result.output and "Traceback" not in result.output
    assert mine.read_text() == "my own"
    assert list(tmp_path.rglob("*.itf.json")) == [mine]


def test_generate_into_the_current_folder_keeps_a_users_saved_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: ``--out .`` with a saved counterexample beside."""
    saved = tmp_path / "kvpool-traces/mine-pool-order-1.itf.json"
    saved.parent.mkdir()
    saved.write_text("saved")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["vectors", "generate", "--out", "."])
    assert result.exit_code == 0, result.output
    assert saved.read_text() == "saved"
    assert "left 1 other" in result.output
