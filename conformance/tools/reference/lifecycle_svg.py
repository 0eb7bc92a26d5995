"""The lifecycle state diagram as inline SVG, drawn by our own small code (no script, no CDN).

The six states sit on a 3 x 3 grid, placed so that no edge runs through a state and as
few edges cross as possible (every placement is tried). Each observed ``(source, target)``
pair is one curved arrow labelled with its operations; arrows bend to their left, so the
two directions of a pair never overlap; labels are placed clear of nodes and of each other.
Colours follow the page (``currentColor`` and Material's CSS
variables): the text is filled with the page's text colour, never SVG's default black, so
the diagram reads in light and dark mode (``tests/docs/test_diagram_themes.py`` measures
the contrast in headless Chromium in both colour schemes).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import cache
from html import escape

from .lifecycle import STATES, LifecycleState, Transition, explore, grouped

Point = tuple[float, float]

WIDTH, HEIGHT = 1040.0, 760.0
NODE_W, NODE_H = 230.0, 54.0
#: How far an arrow bows out, per unit of its length: more when the pair runs both ways.
BEND, BEND_BOTH_WAYS = 0.08, 0.2
LINE = 17.0
LABEL_FONT, CHAR_W = 14, 8.5


#: Where a state may sit: a 3 x 3 grid of slots.
SLOTS: tuple[Point, ...] = tuple(
    (x, y) for y in (70.0, 380.0, 690.0) for x in (130.0, 520.0, 910.0)
)


def _passes_through(a: Point, b: Point, box: Point) -> bool:
    """Whether the straight line from ``a`` to ``b`` crosses the node box centred at ``box``
    (with a margin, so that labels keep clear of it too)."""
    for i in range(1, 60):
        t = i / 60
        x, y = a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t
        if abs(x - box[0]) <= NODE_W / 2 + 10 and abs(y - box[1]) <= NODE_H / 2 + 10:
            return True
    return False


def _turn(a: Point, b: Point, c: Point) -> float:
    return (c[1] - a[1]) * (b[0] - a[0]) - (b[1] - a[1]) * (c[0] - a[0])


def _cross(a: Point, b: Point, c: Point, d: Point) -> bool:
    """Whether segments ``ab`` and ``cd`` (with four distinct ends) cross."""
    if len({a, b, c, d}) < 4:
        return False
    return _turn(c, d, a) * _turn(c, d, b) < 0 and _turn(a, b, c) * _turn(a, b, d) < 0


@cache
def grid_layout(pairs: frozenset[frozenset[str]]) -> dict[str, Point]:
    """Put the six states on grid slots: no straight edge through a node, then the fewest
    crossings, then the shortest edges; ties go to the first placement tried (stable).

    Every placement is tried (9 * 8 * 7 * 6 * 5 * 4 of them, about a second, once per
    process); the scores of slot pairs are computed once up front.
    """
    ids = [s.id for s in STATES]
    n = len(SLOTS)
    through = [
        [
            [k not in (i, j) and _passes_through(SLOTS[i], SLOTS[j], SLOTS[k]) for k in range(n)]
            for j in range(n)
        ]
        for i in range(n)
    ]
    crossing = {
        (i, j, k, m): _cross(SLOTS[i], SLOTS[j], SLOTS[k], SLOTS[m])
        for i, j, k, m in itertools.product(range(n), repeat=4)
    }
    length = [[math.dist(SLOTS[i], SLOTS[j]) / 100 for j in range(n)] for i in range(n)]
    index = {s: i for i, s in enumerate(ids)}
    edges = sorted(tuple(sorted(index[s] for s in pair)) for pair in pairs)
    best: tuple[float, tuple[int, ...]] | None = None
    for placed in itertools.permutations(range(n), len(ids)):
        lines = [(placed[a], placed[b]) for a, b in edges]
        score = 0.0
        for i, j in lines:
            score += length[i][j] + 1000 * sum(through[i][j][k] for k in placed)
        for (i, j), (k, m) in itertools.combinations(lines, 2):
            score += 10 * crossing[i, j, k, m]
        if best is None or score < best[0]:
            best = (score, placed)
    assert best is not None
    return {state: SLOTS[best[1][i]] for i, state in enumerate(ids)}


def _inside(p: Point, centre: Point, margin: float = 4.0) -> bool:
    return (
        abs(p[0] - centre[0]) <= NODE_W / 2 + margin
        and abs(p[1] - centre[1]) <= NODE_H / 2 + margin
    )


def _bezier(p0: Point, p1: Point, p2: Point, t: float) -> Point:
    u = 1 - t
    return (
        u * u * p0[0] + 2 * u * t * p1[0] + t * t * p2[0],
        u * u * p0[1] + 2 * u * t * p1[1] + t * t * p2[1],
    )


def _sub_control(p0: Point, p1: Point, p2: Point, t0: float, t1: float) -> Point:
    """The control point of the part of a quadratic curve between ``t0`` and ``t1``."""
    a, b, c = (1 - t0) * (1 - t1), (1 - t0) * t1 + t0 * (1 - t1), t0 * t1
    return (a * p0[0] + b * p1[0] + c * p2[0], a * p0[1] + b * p1[1] + c * p2[1])


def edge_path(source: Point, target: Point, bend: float) -> tuple[str, Point, Point]:
    """The SVG path of an arrow between two node centres, bowed to its left by ``bend`` and
    clipped to the boxes; its apex; and the unit vector pointing out of its bow."""
    dx, dy = target[0] - source[0], target[1] - source[1]
    norm = math.hypot(dx, dy)
    out = (-dy / norm, dx / norm)
    control = ((source[0] + target[0]) / 2 - dy * bend, (source[1] + target[1]) / 2 + dx * bend)
    samples = [i / 400 for i in range(401)]
    t0 = next(t for t in samples if not _inside(_bezier(source, control, target, t), source))
    t1 = next(
        t for t in reversed(samples) if not _inside(_bezier(source, control, target, t), target)
    )
    start = _bezier(source, control, target, t0)
    end = _bezier(source, control, target, t1)
    mid = _sub_control(source, control, target, t0, t1)
    path = f"M{start[0]:.1f},{start[1]:.1f} Q{mid[0]:.1f},{mid[1]:.1f} {end[0]:.1f},{end[1]:.1f}"
    return path, _bezier(source, control, target, 0.5), out


def _node(state: LifecycleState, centre: Point) -> str:
    x, y = centre[0] - NODE_W / 2, centre[1] - NODE_H / 2
    words = state.title.split(", ", 1)
    lines = "".join(
        f'<tspan x="{centre[0]:.1f}" dy="{0 if i == 0 else LINE + 2:.0f}">{escape(w)}</tspan>'
        for i, w in enumerate(words)
    )
    first_y = centre[1] + 4 - (len(words) - 1) * (LINE + 2) / 2
    return (
        f'<g class="kvpool-node" data-state="{state.id}">'
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W:.0f}" height="{NODE_H:.0f}" rx="8" '
        'style="fill:var(--md-accent-fg-color--transparent,#e8eaf6);stroke:currentColor"/>'
        f'<text x="{centre[0]:.1f}" y="{first_y:.1f}" text-anchor="middle" '
        f'fill="currentColor" font-weight="bold">{lines}</text></g>'
    )


Box = tuple[float, float, float, float]


def _overlaps(a: Box, b: Box, gap: float = 4.0) -> bool:
    """Whether two boxes come closer than ``gap``."""
    return (
        a[0] < b[0] + b[2] + gap
        and b[0] < a[0] + a[2] + gap
        and a[1] < b[1] + b[3] + gap
        and b[1] < a[1] + a[3] + gap
    )


def place_label(
    operations: Sequence[str], apex: Point, out: Point, taken: list[Box]
) -> tuple[Point, Box]:
    """Where the label of one arrow goes: just outside its bow, slid along the arrow and
    pushed further out (then tried on the arrow's other side) until it stays on the picture
    and clear of every node and every label placed before it. Returns its centre and box,
    and adds the box to ``taken``."""
    width = max(len(op) for op in operations) * CHAR_W + 8
    height = len(operations) * LINE + 4
    first = abs(out[0]) * width / 2 + abs(out[1]) * height / 2 + 2
    along = (out[1], -out[0])
    tries = [
        (side * (first + 6 * k), 12 * shift)
        for side in (1, -1)
        for k in range(20)
        for shift in (0, 1, -1, 2, -2, 3, -3)
    ]
    placed: tuple[Point, Box] | None = None
    for reach, slide in tries:
        at = (
            apex[0] + out[0] * reach + along[0] * slide,
            apex[1] + out[1] * reach + along[1] * slide,
        )
        box = (at[0] - width / 2, at[1] - height / 2, width, height)
        inside = box[0] >= 0 and box[1] >= 0 and box[0] + width <= WIDTH
        if inside and box[1] + height <= HEIGHT and not any(_overlaps(box, o) for o in taken):
            placed = (at, box)
            break
    if placed is None:  # nowhere free: keep the first spot, readable if crowded
        at = (apex[0] + out[0] * first, apex[1] + out[1] * first)
        placed = (at, (at[0] - width / 2, at[1] - height / 2, width, height))
    taken.append(placed[1])
    return placed


def _label(operations: Sequence[str], at: Point, box: Box) -> str:
    """The operations of one arrow, stacked in a box centred at ``at``."""
    x, y, width, height = box
    lines = "".join(
        f'<tspan x="{at[0]:.1f}" dy="{0 if i == 0 else LINE:.0f}">{escape(op)}</tspan>'
        for i, op in enumerate(operations)
    )
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" rx="3" '
        'style="fill:var(--md-default-bg-color,#fff);opacity:0.9"/>'
        f'<text x="{at[0]:.1f}" y="{y + LINE - 2:.1f}" text-anchor="middle" '
        f'fill="currentColor" font-family="monospace" font-size="{LABEL_FONT}">{lines}</text>'
    )


def lifecycle_svg(transitions: tuple[Transition, ...] | None = None) -> str:
    """The diagram of ``transitions`` (default: what :func:`explore` finds in the spec)."""
    if transitions is None:
        transitions = explore()[1]
    edges = grouped(transitions)
    where = grid_layout(frozenset(frozenset(pair) for pair in edges))
    by_id = {s.id: s for s in STATES}
    taken: list[Box] = [
        (x - NODE_W / 2 - 4, y - NODE_H / 2 - 4, NODE_W + 8, NODE_H + 8) for x, y in where.values()
    ]
    arrows, labels = [], []
    for (source, target), operations in edges.items():
        bend = BEND_BOTH_WAYS if (target, source) in edges else BEND
        path, apex, out = edge_path(where[source], where[target], bend)
        arrows.append(
            f'<path d="{path}" fill="none" stroke="currentColor" stroke-width="1.4" '
            f'marker-end="url(#kvpool-arrow)" data-edge="{source}->{target}"/>'
        )
        at, box = place_label(operations, apex, out, taken)
        labels.append(_label(operations, at, box))
    nodes = [_node(by_id[s], where[s]) for s in where]
    title = "Block lifecycle: the six states and the operations that move a block between them"
    return (
        f'<svg class="kvpool-diagram" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {WIDTH:.0f} {HEIGHT:.0f}" width="100%" '
        'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="17" '
        'style="max-width:1040px;color:var(--md-default-fg-color,#222)">'
        f"<title>{escape(title)}</title>"
        '<defs><marker id="kvpool-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="currentColor"/></marker></defs>'
        + "".join(arrows)
        + "".join(nodes)
        + "".join(labels)
        + "</svg>"
    )
