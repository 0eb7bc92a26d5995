"""``kvpool targets --latest``: each registered engine's newest release on the package
index, whether the suite can check it, the profile it would be judged by and why, and what
is missing.

Each engine whose entry names a project on the index (:attr:`~..registry.EngineEntry.
project`) is one row. The index is asked through pip (:mod:`.index`); an engine the index
says nothing usable about is a row whose release is ``unknown``, with the reason. Nothing
is downloaded: support is judged from the release number (:meth:`~..registry.EngineEntry.
support`), the profile as ``kvpool conform`` would choose it (:func:`~..loading.
choose_profile`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from ..errors import TargetLoadError, TargetUsageError
from ..registry import EngineEntry
from .index import IndexAnswerError, newest_release

#: What a row says when the index gave no release, or support cannot be judged offline.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class LatestRow:
    """One engine's row."""

    engine: str
    project: str
    #: The newest release, or :data:`UNKNOWN`.
    newest: str
    #: ``yes``, ``no``, or :data:`UNKNOWN` (only a run can tell).
    supported: str
    #: The profile it would be judged by, and why.
    profile: str
    reason: str
    #: What is missing (the index's error when it gave no release); empty when nothing.
    missing: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def latest_rows(
    entries: Iterable[EngineEntry], ask: Callable[[str], str] | None = None
) -> list[LatestRow]:
    """A row for each of ``entries`` with a project on the index, asked by ``ask``
    (default: :func:`~.index.newest_release`, the configured index)."""
    asking = ask or newest_release
    return [_row(entry, entry.project, asking) for entry in entries if entry.project]


def _row(entry: EngineEntry, project: str, ask: Callable[[str], str]) -> LatestRow:
    try:
        newest = ask(project)
    except IndexAnswerError as exc:
        return LatestRow(entry.name, project, UNKNOWN, UNKNOWN, "-", "", str(exc))
    support = entry.support(newest)
    verdict = {True: "yes", False: "no", None: UNKNOWN}[support.supported]
    if support.supported is False:
        return LatestRow(entry.name, project, newest, verdict, "-", "", support.missing)
    from ..loading import choose_profile

    try:
        choice = choose_profile(entry.release_form(newest))
    except (TargetLoadError, TargetUsageError) as exc:
        first = str(exc).splitlines()[0]
        return LatestRow(entry.name, project, newest, "no", "-", "", first)
    return LatestRow(
        entry.name, project, newest, verdict, choice.name, choice.reason, support.missing
    )


def all_unknown(rows: list[LatestRow]) -> bool:
    """Whether the index answered about no engine at all (offline, or a broken index)."""
    return bool(rows) and all(row.newest == UNKNOWN for row in rows)
