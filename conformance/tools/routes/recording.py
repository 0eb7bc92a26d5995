"""A route-check run as data, and the contract page's table rendered from recordings.

A recording is one JSON document (``kvpool_route_check: 3``): the command and the commit
it ran at, the target and publisher, the Dynamo release, the setting, and per scenario
what was published, what the indexer counted, how each consumer was fed (in process
or on the wire), and per consumer its checks, held, found and
claimed blocks and its curve: ``[batch, recall, precision]`` at each check (and, in the
data-parallel scenario, the same per rank). :func:`read_recording` checks every field it
uses (a malformed file is a :class:`RecordingError` naming the field, never a traceback);
:func:`contract_table` renders scenario x consumer for every stream, :func:`over_time_table`
a run's curve at a few points and :func:`ranks_table` the recall of each rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvpool.spec.files import UnreadableFile, read_regular_file

from ...bounds import MAX_ROUTE_RECORDING_BYTES, BoundsError, load_json
from .scenarios import SCENARIOS, ScenarioResult, Setting
from .tally import Point, Tally

VERSION = 3
#: The version before consumers said how they were fed (read as it was: only Dynamo's
#: indexer read the wire).
OLDER = 2
#: The consumers' columns, in this order when present.
COLUMNS = ("count", "set", "dynamo", "dynamo-indexer", "vllm-router")
#: How each consumer is named in the table's header.
HEADERS = {
    "count": "count model",
    "set": "set model",
    "dynamo": "Dynamo's RadixTree",
    "dynamo-indexer": "Dynamo indexer",
    "vllm-router": "vllm-router",
}
#: How a consumer was fed, as the table's header says it.
FED = {"process": "in process", "wire": "on the wire"}


#: What the restart scenario records of the indexer and the new publisher, in table order.
RESTART_FIELDS = {
    "old_batches": "batches before the restart",
    "new_batches": "batches after",
    "new_events": "events after",
    "new_events_past_old_sequence": "of them in batches past the old sequence",
    "new_events_counted": "of them the indexer counted",
}


class RecordingError(ValueError):
    """A recording that is not one; the message names the file and the field."""


@dataclass(frozen=True)
class Figures:
    held: int
    found: int
    claimed: int

    @property
    def lost(self) -> float:
        """The share of held prefix blocks the consumer did not know of."""
        return 1 - self.found / self.held if self.held else 0.0

    @property
    def extra(self) -> float:
        """The share of claimed blocks the worker did not hold."""
        return 1 - self.found / self.claimed if self.claimed else 0.0


@dataclass(frozen=True)
class Curve:
    """One consumer's figures over a scenario: the totals and each check's point."""

    figures: Figures
    points: tuple[Point, ...]
    #: One per data-parallel rank (the data-parallel scenario), else empty.
    ranks: tuple[Curve, ...] = ()


@dataclass(frozen=True)
class Recording:
    stream: str
    command: str
    commit: str
    #: scenario -> consumer -> curve
    curves: dict[str, dict[str, Curve]]
    #: The restart scenario's counts (:data:`RESTART_FIELDS`), when it ran with the indexer.
    restart: dict[str, int] = field(default_factory=dict)
    #: scenario -> (events published by type, what the indexer counted by kind/status)
    counts: dict[str, tuple[dict[str, int], dict[str, int]]] = field(default_factory=dict)
    #: consumer -> how it was fed (:data:`FED`)
    fed: dict[str, str] = field(default_factory=dict)

    @property
    def figures(self) -> dict[str, dict[str, Figures]]:
        """scenario -> consumer -> totals"""
        return {s: {c: k.figures for c, k in row.items()} for s, row in self.curves.items()}


def recording_paths(folder: Path) -> list[Path]:
    """The recordings in ``folder`` in table order: vLLM's streams newest release first,
    then the others by name."""

    def order(path: Path) -> tuple[bool, tuple[int, ...], str]:
        engine, _, version = path.stem.partition("-")
        numbers = tuple(int(n) for n in version.split(".")[:3] if n.isdigit())
        return (engine != "vllm", tuple(-n for n in numbers), path.name)

    return sorted(folder.glob("*.json"), key=order)


def _tally_json(t: Tally) -> dict[str, Any]:
    return {
        "checks": t.checks,
        "held": t.held,
        "found": t.found,
        "claimed": t.claimed,
        "over_time": [[p.batch, p.recall, p.precision] for p in t.over_time],
    }


def to_json(
    results: Sequence[ScenarioResult], setting: Setting, command: str, commit: str, dynamo: str
) -> dict[str, Any]:
    scenarios: list[dict[str, Any]] = []
    for r in results:
        consumers: dict[str, Any] = {}
        for name, t in r.tallies.items():
            consumers[name] = _tally_json(t)
            if name in r.ranks:
                consumers[name]["ranks"] = [_tally_json(one) for one in r.ranks[name]]
        scenarios.append({
            "name": r.name,
            "seconds": r.seconds,
            "published": dict(sorted(r.published.items())),
            "indexer": dict(sorted(r.indexer.items())),
            "consumers": consumers,
            "fed": dict(sorted(r.fed.items())),
            **({"restart": r.restart} if r.restart else {}),
        })  # fmt: skip
    return {
        "kvpool_route_check": VERSION,
        "command": command,
        "commit": commit,
        "target": setting.target,
        "publisher": setting.release,
        "dynamo": dynamo,
        "setting": {
            "requests": setting.requests,
            "blocks": setting.blocks,
            "block_size": setting.block_size,
            "twins": setting.twins,
            "every": setting.every,
            "seed": setting.seed,
        },
        "scenarios": scenarios,
    }


def _field(document: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(document, dict) or key not in document:
        raise RecordingError(f"{where}: no field {key!r}")
    value = document[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RecordingError(f"{where}: {key!r} is not a {kind.__name__}")
    return value


def _counts(raw: dict[Any, Any], where: str) -> dict[str, int]:
    return {str(k): _field(raw, k, int, where) for k in raw}


def _share(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise RecordingError(f"{where}: {value!r} is not a share between 0 and 1")
    return float(value)


def _points(raw: list[Any], where: str) -> tuple[Point, ...]:
    points: list[Point] = []
    for i, point in enumerate(raw):
        at = f"{where}, over_time[{i}]"
        if not isinstance(point, list) or len(point) != 3:
            raise RecordingError(f"{at}: not [batch, recall, precision]")
        batch = point[0]
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise RecordingError(f"{at}: batch {batch!r} is not a count")
        points.append(Point(batch, _share(point[1], at), _share(point[2], at)))
    return tuple(points)


def _curve(raw: Any, where: str, ranks: bool) -> Curve:
    figures = Figures(*(_field(raw, k, int, where) for k in ("held", "found", "claimed")))
    if not figures.found <= min(figures.held, figures.claimed):
        raise RecordingError(f"{where}: found {figures.found} exceeds held or claimed")
    points = _points(_field(raw, "over_time", list, where), where)
    per_rank: tuple[Curve, ...] = ()
    if ranks and "ranks" in raw:
        per_rank = tuple(
            _curve(one, f"{where}, rank {i}", ranks=False)
            for i, one in enumerate(_field(raw, "ranks", list, where))
        )
    return Curve(figures, points, per_rank)


def read_recording(path: Path) -> Recording:
    """A recording read and checked; :class:`RecordingError` says what is wrong."""
    try:
        data = read_regular_file(path, MAX_ROUTE_RECORDING_BYTES, "route-check recording")
        document = load_json(data, f"{path}", MAX_ROUTE_RECORDING_BYTES)
    except (UnreadableFile, BoundsError) as exc:
        raise RecordingError(f"{path}: not a readable JSON recording: {exc}") from None
    name = str(path)
    version = _field(document, "kvpool_route_check", int, name)
    if version not in (OLDER, VERSION):
        raise RecordingError(f"{name}: a recording of another version")
    curves: dict[str, dict[str, Curve]] = {}
    restart: dict[str, int] = {}
    counts: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    fed: dict[str, str] = {}
    for i, scenario in enumerate(_field(document, "scenarios", list, name)):
        where = f"{name}: scenario {i}"
        scenario_name = _field(scenario, "name", str, where)
        if scenario_name not in SCENARIOS:
            raise RecordingError(f"{where}: unknown scenario {scenario_name!r}")
        counts[scenario_name] = (
            _counts(_field(scenario, "published", dict, where), f"{where}, published"),
            _counts(_field(scenario, "indexer", dict, where), f"{where}, indexer"),
        )
        if scenario_name == "restart" and "restart" in scenario:
            after = _field(scenario, "restart", dict, where)
            restart = {k: _field(after, k, int, f"{where}, restart") for k in RESTART_FIELDS}
        consumers = _field(scenario, "consumers", dict, where)
        ways = _field(scenario, "fed", dict, where) if version == VERSION else {}
        for consumer, way in ways.items():
            if way not in FED:
                raise RecordingError(f"{where}, fed: {consumer} fed {way!r}, not one of {FED}")
            fed[str(consumer)] = way
        curves[scenario_name] = {
            consumer: _curve(c, f"{where}, {consumer}", ranks=True)
            for consumer, c in consumers.items()
        }
        if version == OLDER:  # before protocol 2 only Dynamo's indexer read the wire
            fed.update((c, "wire" if c == "dynamo-indexer" else "process") for c in consumers)
    return Recording(
        _stream(document, name),
        _field(document, "command", str, name),
        _field(document, "commit", str, name),
        curves,
        restart,
        counts,
        fed,
    )


def _stream(document: Any, name: str) -> str:
    """The stream's name: the pool, and the release whose publisher sent its events when
    that is another one."""
    target = str(_field(document, "target", str, name))
    publisher = str(_field(document, "publisher", str, name))
    seed = _field(_field(document, "setting", dict, name), "seed", int, f"{name}: setting")
    stream = target
    if publisher != target and target != f"vllm=={publisher}":
        stream = f"{target} through vLLM {publisher}'s publisher"
    return f"{stream}, seed {seed}" if seed else stream


def _cell(f: Figures | None) -> str:
    if f is None:
        return "—"
    return f"{f.lost:.0%} lost · {f.extra:.0%} extra"


def _columns(recordings: Sequence[Recording]) -> list[str]:
    present = {c for r in recordings for s in r.curves.values() for c in s}
    return [c for c in COLUMNS if c in present] + sorted(present - set(COLUMNS))


def _header(consumer: str, recordings: Sequence[Recording]) -> str:
    """A consumer's column header: its name and how it was fed."""
    ways = sorted({FED[r.fed[consumer]] for r in recordings if consumer in r.fed})
    return f"{HEADERS.get(consumer, consumer)} ({' / '.join(ways)})" if ways else consumer


def _sources(recordings: Sequence[Recording]) -> str:
    sources = "; ".join(f"`{r.command}` at {r.commit[:12]}" for r in recordings)
    return f"Generated from the committed recordings of: {sources}."


def contract_table(recordings: Sequence[Recording]) -> str:
    """Markdown: one row per stream and scenario, one column per consumer; each cell the
    share of held prefix blocks the consumer lost and the share of its claims in excess."""
    columns = _columns(recordings)
    lines = [
        "| stream | scenario | " + " | ".join(_header(c, recordings) for c in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for recording in recordings:
        for scenario in SCENARIOS:
            row = recording.figures.get(scenario)
            if row is None:
                continue
            cells = [_cell(row.get(c)) for c in columns]
            lines.append(f"| {recording.stream} | {scenario} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(_sources(recordings))
    return "\n".join(lines)


def sample(points: Sequence[Point], count: int) -> list[Point]:
    """``count`` points spread over the curve, its last one included (all when fewer)."""
    if len(points) <= count:
        return list(points)
    picks = sorted({round((i + 1) * len(points) / count) - 1 for i in range(count)})
    return [points[i] for i in picks]


def over_time_table(recording: Recording, consumer: str, count: int = 5) -> str:
    """Markdown: one row per scenario, ``consumer``'s recall and precision at ``count``
    checks spread over the run (``recall / precision @ batch``)."""
    lines = [
        f"**{recording.stream}**",
        "",
        f"| scenario | {HEADERS.get(consumer, consumer)}: recall / precision after N batches |",
        "|---|---|",
    ]
    for scenario in SCENARIOS:
        curve = recording.curves.get(scenario, {}).get(consumer)
        if curve is None:
            continue
        cells = " · ".join(
            f"{p.recall:.0%} / {p.precision:.0%} @ {p.batch}" for p in sample(curve.points, count)
        )
        lines.append(f"| {scenario} | {cells or '—'} |")
    lines.append("")
    lines.append(_sources([recording]))
    return "\n".join(lines)


def ranks_table(recordings: Sequence[Recording]) -> str:
    """Markdown: per stream and consumer, the recall and precision of each data-parallel
    rank over the data-parallel scenario."""
    lines = ["| stream | consumer | rank | recall | precision | lowest recall |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for recording in recordings:
        for consumer in _columns([recording]):
            curve = recording.curves.get("data-parallel", {}).get(consumer)
            for rank, one in enumerate(curve.ranks if curve else ()):
                f = one.figures
                lowest = min((p.recall for p in one.points), default=None)
                lines.append(
                    f"| {recording.stream} | {HEADERS.get(consumer, consumer)} | {rank} | "
                    f"{1 - f.lost:.1%} | {1 - f.extra:.1%} | "
                    + ("—" if lowest is None else f"{lowest:.0%}")
                    + " |"
                )
    lines.append("")
    lines.append(_sources(recordings))
    return "\n".join(lines)


def restart_table(recordings: Sequence[Recording]) -> str:
    """Markdown: per stream, the restart scenario's batches and events on each side of the
    restart, and how many of the new publisher's events Dynamo's indexer counted."""
    lines = [
        "| stream | " + " | ".join(RESTART_FIELDS.values()) + " |",
        "|---|" + "---|" * len(RESTART_FIELDS),
    ]
    shown = [r for r in recordings if r.restart]
    for recording in shown:
        cells = " | ".join(str(recording.restart[k]) for k in RESTART_FIELDS)
        lines.append(f"| {recording.stream} | {cells} |")
    lines.append("")
    lines.append(_sources(shown))
    return "\n".join(lines)


def indexer_table(recordings: Sequence[Recording]) -> str:
    """Markdown: per stream and scenario, the batches and events published and what Dynamo's
    indexer counted of them (its ``/metrics`` by type and status; ``batch/*`` from its log:
    batches it could not decode, gaps it saw)."""
    lines = [
        "| stream | scenario | batches | events published | Dynamo's indexer counted |",
        "|---|---|---|---|---|",
    ]
    for recording in recordings:
        for scenario in SCENARIOS:
            if scenario not in recording.counts:
                continue
            published, counted = recording.counts[scenario]
            curves = recording.curves.get(scenario, {})
            batches = max((c.points[-1].batch for c in curves.values() if c.points), default=0)
            lines.append(
                f"| {recording.stream} | {scenario} | {batches} | "
                + ", ".join(f"{k} {n}" for k, n in sorted(published.items()))
                + " | "
                + (", ".join(f"`{k}` {n}" for k, n in sorted(counted.items())) or "—")
                + " |"
            )
    lines.append("")
    lines.append(_sources(recordings))
    return "\n".join(lines)
