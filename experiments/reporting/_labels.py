"""Point labels for the report's scatter plots that never overlap each other, another point or
a panel title: placed when the figure's layout is final, in display pixels, each label's box
measured by the renderer."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not when the report starts
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_LABEL_FONT = 7
_MARKER_PT = 5  # the plots' point marker size, in points
_GAP_PX = 4.0  # between a point and its label, and between stacked labels' boxes
_EDGE_PX = 3.0  # kept free inside the axes frame
_PENDING: weakref.WeakKeyDictionary[Figure, list[tuple[Axes, list[tuple[str, float, float]]]]] = \
    weakref.WeakKeyDictionary()


def label_points(ax: Axes, points: Sequence[tuple[str, float, float]]) -> None:
    """Ask for labels on ``points`` (name, x, y); :func:`place_labels` puts them when the
    figure's layout is final (after ``mark_simulated`` adds its title line, when the figure is saved)."""
    from matplotlib.figure import Figure

    fig = ax.figure
    assert isinstance(fig, Figure)
    _PENDING.setdefault(fig, []).append((ax, list(points)))


Box = tuple[float, float, float, float]  # x0, x1, y0, y1 in display pixels


def place_labels(fig: Figure) -> None:
    """Place every pending point label of ``fig`` so that no two labels overlap, no label covers
    another point, and every label stays inside its axes frame (so clear of the panel title).

    The layout is run first, so positions are final display pixels, and each label's box is
    measured by the renderer. Labels are placed in order of their point (x, then y), each at the
    free slot nearest its point: on the point's line right of it, then left of it, then one text
    line further up or down per step (with a thin leader line to the point). When no slot inside
    the frame is free (far more labels than the panel has lines), the one with least overlap is
    taken.
    """
    pending = _PENDING.pop(fig, [])
    if not pending:
        return
    fig.draw_without_rendering()  # the final layout: axes positions in display pixels
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    marker = 0.5 * _MARKER_PT * fig.dpi / 72 + 1  # half a point marker's width, in pixels
    for ax, points in pending:
        frame = ax.get_window_extent(renderer)
        bounds = (frame.x0 + _EDGE_PX, frame.x1 - _EDGE_PX, frame.y0 + _EDGE_PX, frame.y1 - _EDGE_PX)
        pixels = [(float(a), float(b)) for a, b in ax.transData.transform([(x, y) for _, x, y in points])]
        markers = [(px - marker, px + marker, py - marker, py + marker) for px, py in pixels]
        placed: list[Box] = []
        for i in sorted(range(len(points)), key=lambda i: (points[i][1], points[i][2], points[i][0])):
            text = short_defender(points[i][0])
            probe = ax.text(0, 0, text, fontsize=_LABEL_FONT)
            size = probe.get_window_extent(renderer)
            probe.remove()
            others = placed + [m for j, m in enumerate(markers) if j != i]
            dx, dy, level = _free_slot(pixels[i], size.width, size.height, bounds, others, marker)
            arrow = ({"arrowstyle": "-", "color": "#888888", "lw": 0.6, "shrinkA": 0,
                      "shrinkB": marker} if level else None)
            ann = ax.annotate(text, points[i][1:], textcoords="offset pixels", xytext=(dx, dy),
                              ha="left", va="bottom", fontsize=_LABEL_FONT, arrowprops=arrow)
            ann.set_in_layout(False)
            px, py = pixels[i]
            placed.append((px + dx, px + dx + size.width, py + dy, py + dy + size.height))


def _free_slot(point: tuple[float, float], w: float, h: float, bounds: Box,
               others: Sequence[Box], marker: float) -> tuple[float, float, int]:
    """Offset (dx, dy) of a w x h label's lower-left corner from ``point``, and its line level."""
    px, py = point
    best: tuple[float, float, float, int] | None = None  # overlap, dx, dy, level
    level = 0
    while True:
        rows = [py - h / 2] if level == 0 else [py - h / 2 + level * (h + 1), py - h / 2 - level * (h + 1)]
        if level and rows[0] + h > bounds[3] and rows[1] < bounds[2]:
            break  # both rows of this level leave the frame, and further levels go further out
        for y0 in rows:
            for x0 in (px + marker + _GAP_PX, px - marker - _GAP_PX - w):
                box = (x0, x0 + w, y0, y0 + h)
                if not (bounds[0] <= box[0] and box[1] <= bounds[1] and bounds[2] <= box[2] and box[3] <= bounds[3]):
                    continue
                overlap = sum(_overlap(box, b) for b in others)
                if best is None or overlap < best[0]:
                    best = (overlap, x0 - px, y0 - py, level)
                if overlap == 0:
                    return x0 - px, y0 - py, level
        level += 1
    if best is None:  # no slot inside the frame at all (a label wider than the panel)
        return marker + _GAP_PX, -h / 2, 0
    return best[1], best[2], best[3]


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Overlap area of two (x0, x1, y0, y1) boxes, in square pixels."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[2], b[2]))


def short_defender(name: str, width: int = 28) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
