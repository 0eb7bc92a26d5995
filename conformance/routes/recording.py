"""A route-check run as data, and the contract page's table rendered from recordings.

A recording is one JSON document (``kvpool_route_check: 1``): the command and the commit
it ran at, the target and publisher, the Dynamo release, the setting, and per scenario
what was published, what the indexer counted, and per consumer its checks, held, found and
claimed blocks and its share found at each check. :func:`read_recording` checks every
field it uses (a malformed file is a :class:`RecordingError` naming the field, never a
traceback); :func:`contract_table` renders scenario x consumer for every stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .scenarios import SCENARIOS, ScenarioResult, Setting

VERSION = 1
#: The consumers' columns, in this order when present.
COLUMNS = ("count", "set", "dynamo", "dynamo-indexer")
#: How each consumer is named in the table's header.
HEADERS = {
    "count": "count model",
    "set": "set model",
    "dynamo": "Dynamo in process",
    "dynamo-indexer": "Dynamo indexer",
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
class Recording:
    stream: str
    command: str
    commit: str
    #: scenario -> consumer -> figures
    figures: dict[str, dict[str, Figures]]


def to_json(
    results: Sequence[ScenarioResult], setting: Setting, command: str, commit: str, dynamo: str
) -> dict[str, Any]:
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
        "scenarios": [
            {
                "name": r.name,
                "seconds": r.seconds,
                "published": dict(sorted(r.published.items())),
                "indexer": dict(sorted(r.indexer.items())),
                "consumers": {
                    name: {
                        "checks": t.checks,
                        "held": t.held,
                        "found": t.found,
                        "claimed": t.claimed,
                        "over_time": t.over_time,
                    }
                    for name, t in r.tallies.items()
                },
            }
            for r in results
        ],
    }


def _field(document: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(document, dict) or key not in document:
        raise RecordingError(f"{where}: no field {key!r}")
    value = document[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RecordingError(f"{where}: {key!r} is not a {kind.__name__}")
    return value


def read_recording(path: Path) -> Recording:
    """A recording read and checked; :class:`RecordingError` says what is wrong."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordingError(f"{path}: not a readable JSON recording: {exc}") from None
    name = str(path)
    if _field(document, "kvpool_route_check", int, name) != VERSION:
        raise RecordingError(f"{name}: a recording of another version")
    figures: dict[str, dict[str, Figures]] = {}
    for i, scenario in enumerate(_field(document, "scenarios", list, name)):
        where = f"{name}: scenario {i}"
        scenario_name = _field(scenario, "name", str, where)
        if scenario_name not in SCENARIOS:
            raise RecordingError(f"{where}: unknown scenario {scenario_name!r}")
        consumers = _field(scenario, "consumers", dict, where)
        figures[scenario_name] = {
            consumer: Figures(
                *(_field(c, k, int, f"{where}, {consumer}") for k in ("held", "found", "claimed"))
            )
            for consumer, c in consumers.items()
        }
    target = _field(document, "target", str, name)
    return Recording(
        target,
        _field(document, "command", str, name),
        _field(document, "commit", str, name),
        figures,
    )


def _cell(f: Figures | None) -> str:
    if f is None:
        return "—"
    return f"{f.lost:.0%} lost · {f.extra:.0%} extra"


def contract_table(recordings: Sequence[Recording]) -> str:
    """Markdown: one row per stream and scenario, one column per consumer; each cell the
    share of held prefix blocks the consumer lost and the share of its claims in excess."""
    present = {c for r in recordings for s in r.figures.values() for c in s}
    columns = [c for c in COLUMNS if c in present] + sorted(present - set(COLUMNS))
    lines = [
        "| stream | scenario | " + " | ".join(HEADERS.get(c, c) for c in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for recording in recordings:
        for scenario in SCENARIOS:
            row = recording.figures.get(scenario)
            if row is None:
                continue
            cells = [_cell(row.get(c)) for c in columns]
            lines.append(f"| {recording.stream} | {scenario} | " + " | ".join(cells) + " |")
    sources = "; ".join(f"`{r.command}` at {r.commit[:12]}" for r in recordings)
    lines.append("")
    lines.append(f"Generated from the committed recordings of: {sources}.")
    return "\n".join(lines)
