"""The one reader of outside files (kvpool.spec.files): regular files only, read to a
bound, one UnreadableFile naming the file and why for anything else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kvpool.spec.files import UnreadableFile, read_regular_file, read_regular_text


def test_a_file_at_its_bound_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_regular_file(path, 10) == b"x" * 10
    with pytest.raises(UnreadableFile, match="more than 9 bytes"):
        read_regular_file(path, 9)


def test_a_file_that_claims_no_size_is_still_read_to_the_bound_only() -> None:
    """/proc files say 0 bytes: the bound, not the size they claim, stops the read."""
    with pytest.raises(UnreadableFile, match="more than 8 bytes"):
        read_regular_file("/proc/self/status", 8)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: os.mkfifo(p), "a FIFO"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
        (lambda p: p.mkdir(), "a folder"),
        (lambda p: p.symlink_to(p.parent / "missing"), "cannot be opened"),
    ],
)
def test_anything_but_a_regular_file_is_refused_by_name(
    tmp_path: Path, make: object, why: str
) -> None:
    path = tmp_path / "input.itf.json"
    make(path)  # type: ignore[operator]
    with pytest.raises(UnreadableFile, match=why) as caught:
        read_regular_file(path, 1000, "trace")
    assert str(caught.value).startswith(f"trace {path}: ")


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"ok\xff")
    with pytest.raises(UnreadableFile, match="not UTF-8 \\(byte 2\\)"):
        read_regular_text(path, 100)
