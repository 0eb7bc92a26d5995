"""The folder ``kvpool vectors generate`` writes: it removes or replaces only what it wrote.

A generation lists every file it wrote in the folder's manifest (:data:`MANIFEST`, one
path a line, relative to the folder). The next generation removes a file that is no longer
in the corpus only when the manifest lists it, and replaces a file whose bytes differ only
when the manifest lists it; anything else in the folder (a user's saved counterexamples,
notes, another tool's files) is left as it is, and a corpus file whose place such a file
takes is refused (:class:`FolderNotOwned`, naming it) before anything is written. The
manifest itself is read as data: a line that is not a plain relative ``*.itf.json`` path
inside the folder is refused, never followed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kvpool.spec.files import UnreadableFile, read_regular_text

#: The manifest's name inside the folder.
MANIFEST = ".kvpool-vectors"
#: The largest manifest read (the corpus lists about 800 paths of 60 bytes).
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


class FolderNotOwned(Exception):
    """The folder holds something the generation would have to remove or replace without
    having written it (or a manifest that is not one); the message says which."""


@dataclass
class Written:
    """What a generation did to the folder."""

    #: Every corpus file, as a path (written now, or already holding its bytes).
    files: list[Path] = field(default_factory=list)
    #: Files the last generation wrote that are no longer in the corpus: removed.
    removed: list[str] = field(default_factory=list)
    #: ``*.itf.json`` files kvpool did not write, left in place.
    left: list[str] = field(default_factory=list)


def read_manifest(out: Path) -> frozenset[str]:
    """The paths the last generation wrote into ``out`` (none when it has no manifest)."""
    path = out / MANIFEST
    if not path.exists() and not path.is_symlink():
        return frozenset()
    try:
        text = read_regular_text(path, MAX_MANIFEST_BYTES, "vector manifest")
    except UnreadableFile as exc:
        raise FolderNotOwned(str(exc)) from None
    listed = [line for line in text.splitlines() if line]
    for number, line in enumerate(listed, 1):
        if not _plain(line):
            raise FolderNotOwned(
                f"{path}: line {number} is not a relative PROFILE/.../NAME.itf.json path "
                "inside the folder"
            )
    return frozenset(listed)


def _plain(line: str) -> bool:
    relative = PurePosixPath(line)
    return (
        line.isprintable()
        and "\\" not in line
        and not relative.is_absolute()
        and ".." not in relative.parts
        and relative.as_posix() == line
        and line.endswith(".itf.json")
    )


def write_owned(out: Path, wanted: dict[str, str]) -> Written:
    """Make ``out`` hold ``wanted`` (relative path -> text), touching only what the last
    generation wrote there; :class:`FolderNotOwned` before any change if a wanted file's
    place holds other bytes kvpool did not write."""
    ours = read_manifest(out)
    taken = [
        relative
        for relative, text in wanted.items()
        if relative not in ours and _holds_other(out / relative, text)
    ]
    if taken:
        raise FolderNotOwned(
            f"{out} holds {len(taken)} file(s) kvpool did not write where the corpus goes "
            f"(first: {taken[0]}); give a new or empty folder, or move them away"
        )
    out.mkdir(parents=True, exist_ok=True)
    result = Written()
    for relative in sorted(ours - set(wanted)):
        stale = out / relative
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
            result.removed.append(relative)
    for relative, text in wanted.items():
        path = out / relative
        if _holds_other(path, text):
            path.unlink(missing_ok=True)  # ours (listed), or a dangling link
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        result.files.append(path)
    result.left = sorted(
        str(p.relative_to(out))
        for p in out.rglob("*.itf.json")
        if str(p.relative_to(out).as_posix()) not in wanted
    )
    _write_manifest(out, sorted(wanted))
    return result


def _holds_other(path: Path, text: str) -> bool:
    """Whether ``path`` is there (a file, a link, anything) and is not a regular file
    holding exactly ``text``."""
    if not path.exists() and not path.is_symlink():
        return False
    try:
        return read_regular_text(path, len(text.encode("utf-8")), "vector") != text
    except UnreadableFile:
        return True


def _write_manifest(out: Path, relatives: list[str]) -> None:
    """The manifest, replaced whole (a generation killed midway leaves the old one)."""
    draft = out / f"{MANIFEST}.{os.getpid()}"
    draft.write_text("".join(f"{r}\n" for r in relatives), encoding="utf-8")
    os.replace(draft, out / MANIFEST)
