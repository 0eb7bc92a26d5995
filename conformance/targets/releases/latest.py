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
from .short_run import ENGINE_ONLY, ShortRun, short_run

#: What a row says when the index gave no release, or support cannot be judged offline.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class LatestRow:
    """One engine's row."""

    engine: str
    project: str
    #: The newest release, or :data:`UNKNOWN`.
    newest: str
    #: ``yes`` (it ran), ``no`` (refused), or :data:`UNKNOWN` (the index gave no release).
    supported: str
    #: The profile it would be judged by, and why.
    profile: str
    reason: str
    #: What is missing: the refusal's reason, the index's error, advice; empty: nothing.
    missing: str
    #: What the short run gave: ``pass``, ``findings``, ``refused``, or ``-`` (not run).
    result: str = "-"
    #: The kinds of finding the short run met (rules and properties).
    rules: tuple[str, ...] = ()
    #: The commands of the short run.
    commands: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        row = asdict(self)
        row["rules"] = list(self.rules)
        row["commands"] = list(self.commands)
        return row


#: Runs one release shortly: (engine, its ``==`` target) -> what the run gave.
Runner = Callable[[EngineEntry, str], ShortRun]


def run_release(entry: EngineEntry, target: str, progress: Callable[[str], None]) -> ShortRun:
    """The short run of ``target`` at every level ``entry`` supports, its own manager's
    beside its pool's (or its scheduler's, where only the engine machine takes it)."""
    manager = entry.name if entry.has_pool and entry.manager_summary else None
    drives = callable(getattr(entry, "load_driver", None))
    return short_run(target, entry.has_pool, manager, progress, drives=drives)


def latest_rows(
    entries: Iterable[EngineEntry],
    ask: Callable[[str], str] | None = None,
    run: Runner | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[LatestRow]:
    """A row for each of ``entries`` with a project on the index, asked by ``ask``
    (default: :func:`~.index.newest_release`, the configured index), each release run by
    ``run`` (default: :func:`run_release`, telling ``progress`` what runs)."""
    asking = ask or newest_release
    say = progress or (lambda text: None)
    running = run or (lambda entry, target: run_release(entry, target, say))
    rows = []
    for entry in entries:
        if entry.project:
            say(f"asking the package index for {entry.project}'s newest release")
            rows.append(_row(entry, entry.project, asking, running))
    return rows


def _row(entry: EngineEntry, project: str, ask: Callable[[str], str], run: Runner) -> LatestRow:
    try:
        newest = ask(project)
    except IndexAnswerError as exc:
        return LatestRow(entry.name, project, UNKNOWN, UNKNOWN, "-", "", str(exc))
    support = entry.support(newest)
    if support.supported is False:
        return LatestRow(entry.name, project, newest, "no", "-", "", support.missing)
    from ..loading import choose_profile

    target = entry.release_form(newest)
    try:
        choice = choose_profile(target)
    except (TargetLoadError, TargetUsageError) as exc:
        first = str(exc).splitlines()[0]
        return LatestRow(entry.name, project, newest, "no", "-", "", first, "refused")
    outcome = run(entry, target)
    if not outcome.ran:
        return LatestRow(
            entry.name, project, newest, "no", choice.name, choice.reason, outcome.reason,
            "refused", (), outcome.commands,
        )  # fmt: skip
    missing = "; ".join(m for m in (outcome.reason, support.missing) if m)
    profile, reason = choice.name, choice.reason
    if ENGINE_ONLY in outcome.reason:  # the engine machine judges by no profile
        profile, reason = "none", "the engine machine judges by the properties"
    return LatestRow(
        entry.name, project, newest, "yes", profile, reason, missing,
        outcome.status, outcome.rules, outcome.commands,
    )  # fmt: skip


def all_unknown(rows: list[LatestRow]) -> bool:
    """Whether the index answered about no engine at all (offline, or a broken index)."""
    return bool(rows) and all(row.newest == UNKNOWN for row in rows)
