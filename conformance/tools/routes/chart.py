"""The route-check curves as inline SVG, drawn from recordings by our own small code.

One chart per stream: a panel per scenario (three to a row), the batches published on the
x axis, the share on the y axis (0 to 100%), and per consumer one solid line (recall at
each check) and one dashed line (precision). A consumer that knew exactly what the worker
held runs along the top in both. Text and axes take the page's colour (``currentColor``);
the consumers' colours are mid-tone, readable on light and dark pages, and each line is
also told apart by its legend entry and by its dash pattern, not by colour alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .recording import COLUMNS, HEADERS, Curve, Recording
from .scenarios import SCENARIOS

PANEL_W, PANEL_H = 300.0, 170.0
MARGIN_L, MARGIN_T, GAP_X, GAP_Y = 44.0, 26.0, 30.0, 46.0
PER_ROW = 3
#: Mid-tone colours, one per consumer column (readable on white and on dark slate).
COLOURS = {
    "count": "#2e7d32",
    "set": "#ef6c00",
    "dynamo": "#1e88e5",
    "dynamo-indexer": "#c2185b",
}
FALLBACK = "#8e24aa"
#: How far apart the consumers' lines are drawn (px), so that equal curves stay visible.
OFFSET = 1.6


def _polyline(curve: Curve, left: float, top: float, last_batch: int, which: str,
              shift: float) -> str:  # fmt: skip
    points = []
    for p in curve.points:
        x = left + PANEL_W * (p.batch / last_batch if last_batch else 0.0)
        value = p.recall if which == "recall" else p.precision
        y = top + PANEL_H * (1 - value) + shift
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)


def _panel(scenario: str, curves: dict[str, Curve], columns: Sequence[str], left: float,
           top: float) -> list[str]:  # fmt: skip
    last = max((p.batch for c in curves.values() for p in c.points), default=0)
    out = [
        f'<text x="{left}" y="{top - 8}" font-weight="bold">{escape(scenario)}</text>',
        f'<rect x="{left}" y="{top}" width="{PANEL_W}" height="{PANEL_H}" fill="none" '
        'stroke="currentColor" stroke-opacity="0.5"/>',
    ]
    for share in (0.0, 0.5, 1.0):
        y = top + PANEL_H * (1 - share)
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
            f"{share:.0%}</text>"
        )
        if share == 0.5:
            out.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{left + PANEL_W}" y2="{y:.1f}" '
                'stroke="currentColor" stroke-opacity="0.2"/>'
            )
    out.append(
        f'<text x="{left + PANEL_W}" y="{top + PANEL_H + 14}" text-anchor="end" '
        f'font-size="11">{last} batches</text>'
    )
    for i, name in enumerate(columns):
        curve = curves.get(name)
        if curve is None or not curve.points:
            continue
        colour = COLOURS.get(name, FALLBACK)
        shift = (i - (len(columns) - 1) / 2) * OFFSET
        for which, dash in (("recall", ""), ("precision", ' stroke-dasharray="5 3"')):
            out.append(
                f'<polyline points="{_polyline(curve, left, top, last, which, shift)}" '
                f'fill="none" stroke="{colour}" stroke-width="1.8"{dash}>'
                f"<title>{escape(HEADERS.get(name, name))}: {which}</title></polyline>"
            )
    return out


def route_check_chart(recording: Recording) -> str:
    """One stream's curves, a panel per scenario, as an ``<svg>`` element."""
    present = {c for row in recording.curves.values() for c in row}
    columns = [c for c in COLUMNS if c in present] + sorted(present - set(COLUMNS))
    scenarios = [s for s in SCENARIOS if s in recording.curves]
    rows = max(1, -(-len(scenarios) // PER_ROW))
    width = MARGIN_L + PER_ROW * (PANEL_W + GAP_X)
    legend_y = MARGIN_T + rows * (PANEL_H + GAP_Y)
    height = legend_y + 30
    body: list[str] = []
    for i, scenario in enumerate(scenarios):
        left = MARGIN_L + (i % PER_ROW) * (PANEL_W + GAP_X)
        top = MARGIN_T + (i // PER_ROW) * (PANEL_H + GAP_Y)
        body += _panel(scenario, recording.curves[scenario], columns, left, top)
    x = MARGIN_L
    for name in columns:
        colour = COLOURS.get(name, FALLBACK)
        label = escape(HEADERS.get(name, name))
        body.append(
            f'<line x1="{x}" y1="{legend_y}" x2="{x + 24}" y2="{legend_y}" stroke="{colour}" '
            'stroke-width="2.5"/>'
            f'<text x="{x + 30}" y="{legend_y + 4}" font-size="12">{label}</text>'
        )
        x += 40 + 7.5 * len(label)
    body.append(
        f'<text x="{x + 10}" y="{legend_y + 4}" font-size="12">solid: recall · dashed: '
        "precision, at each check</text>"
    )
    title = f"route-check over the run: {recording.stream}"
    return (
        f'<svg class="kvpool-diagram" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" xmlns="http://www.w3.org/2000/svg" '
        'font-family="sans-serif" font-size="13" '
        f'style="max-width:{width:.0f}px;color:var(--md-default-fg-color,#222)" '
        'fill="currentColor">' + "".join(body) + "</svg>"
    )


def route_check_charts(recordings: Sequence[Recording]) -> str:
    """Every stream's chart, each under its name, as Markdown with inline SVG."""
    parts = []
    for recording in recordings:
        parts.append(f"**{escape(recording.stream)}**\n\n" + route_check_chart(recording) + "\n")
    return "\n".join(parts)
