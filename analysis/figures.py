"""The paper's Figures 1 and 3, drawn from per-method summaries computed from the records.

* ``figure1`` — mean step time per method as horizontal bars; bars whose measured
  peak exceeds the logical budget are hatched; each bar is labelled with its time and
  peak ("3.06 s, 42.4 GiB"), plus "over budget" where that applies.
* ``figure3`` — peak allocated memory against mean step time per method, the
  region above the logical budget shaded, the joint planner highlighted (orange) and the
  correctly costed eager/whole control marked (blue).

A summary is a sequence of per-method rows (mappings or objects with attributes):
``method``, ``mean_ms`` (the arithmetic mean of process means), ``peak_bytes`` (measured
peak allocated bytes) and optionally ``label`` (the name to print). Units follow the data:
seconds when the slowest method takes at least a second, else milliseconds; GiB when the
largest peak reaches a GiB, else MiB — so a ``hardware=cpu`` run at scale 0.001 reads as
clearly as the paper's H100 numbers.

Both functions return what the axes actually show (read back from the drawn artists, not
from the input), so a test checks the figure, not the arguments. Matplotlib is imported
inside them, and only its object-oriented Agg canvas is used: no pyplot global state, no
display needed, and ``import stateaware.analysis`` stays fast.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stateaware.records.writer import write_bytes_atomic

__all__ = [
    "JOINT",
    "CONTROL",
    "METHOD_LABELS",
    "METHOD_COLOURS",
    "colour",
    "Figure1",
    "Figure3",
    "figure1",
    "figure3",
    "StepTimes",
    "step_times",
]

#: The method highlighted in orange, and the correctly costed control drawn in blue
#: (paper Figure 3's legend).
JOINT = "joint"
CONTROL = "eager_whole"

#: Display names for the method ids the cohorts record; an unknown id prints as itself.
METHOD_LABELS: dict[str, str] = {
    "eager": "Eager",
    "whole": "Whole snapshots",
    "region": "Fixed regions",
    "regions": "Fixed regions",
    "functional": "Functional",
    "agnostic": "State-agnostic",
    "eager_whole": "Eager/whole planner",
    "deferred": "Deferred eager",
    "joint": "Joint (ours)",
}

# One colour per method, the same in every figure of the report: Figures 1, 3 and 3C
# (here and in `stateaware.analysis.sections.cifar_application`) all colour a method with
# `colour`, so a reader who learnt "orange is joint" on one figure reads every other figure
# the same way. Joint planning keeps the paper's orange and the correctly costed eager/whole
# control its blue; every other method has its own hue, chosen to stay apart for the common
# colour-vision deficiencies (Okabe–Ito-like).

#: method -> colour (hex), for every method the paper's cohorts run.
METHOD_COLOURS: dict[str, str] = {
    "joint": "#E07B00",  # orange: the paper's highlight
    "eager_whole": "#1F5FA8",  # blue: the correctly costed control
    "eager": "#6B6B6B",
    "whole": "#009E73",
    "regions": "#CC79A7",
    "functional": "#56B4E9",
    "agnostic": "#7B4FA0",
    "deferred": "#A6761D",
}

#: Colours for methods not listed above (a user's own kind), picked by a stable hash of the
#: name so one method keeps its colour from figure to figure and run to run.
_OTHERS = ("#17BECF", "#BCBD22", "#8C564B", "#E377C2", "#2CA02C", "#D62728", "#9467BD", "#393B79")


def colour(method: str) -> str:
    """The colour of ``method`` (a hex string): the listed one, else a stable pick from a spare set."""
    known = METHOD_COLOURS.get(method)
    return known if known is not None else _OTHERS[zlib.crc32(method.encode()) % len(_OTHERS)]


_GIB = 1 << 30
_MIB = 1 << 20
#: Figure size in inches and resolution: 1,200 x 600 pixels, legible on a laptop screen
#: and in a Markdown report.
_SIZE = (8.0, 4.0)
_DPI = 150


@dataclass(frozen=True)
class Figure1:
    """What Figure 1 shows, top bar first: names, bar lengths, hatching and bar labels."""

    path: Path
    methods: tuple[str, ...]
    times: tuple[float, ...]  # bar lengths, in ``time_unit``
    time_unit: str  # "s" | "ms"
    hatched: tuple[bool, ...]
    labels: tuple[str, ...]
    budget_label: str
    pixels: tuple[int, int]  # (width, height)
    xlabel: str = ""
    headline: str | None = None  # the annotation drawn above the bars, as drawn
    interval: tuple[float, float] | None = None  # the whisker drawn on the joint bar, in ``time_unit``


@dataclass(frozen=True)
class Figure3:
    """What Figure 3 shows: one point per method, the shaded span and the highlighted points."""

    path: Path
    methods: tuple[str, ...]
    peaks: tuple[float, ...]  # x, in ``memory_unit``
    times: tuple[float, ...]  # y, in ``time_unit``
    memory_unit: str  # "GiB" | "MiB"
    time_unit: str
    shaded: tuple[float, float]  # x-range shaded as above the budget
    colors: dict[str, str]  # method label -> point colour
    annotations: tuple[str, ...]  # point labels as drawn (methods at one spot share one), sorted
    pixels: tuple[int, int]
    ylabel: str = ""


def figure1(
    summary: Sequence[Any],
    budget_bytes: int,
    path: Path | str,
    *,
    title: str | None = None,
    xlabel: str | None = None,
    headline: str | None = None,
    interval: tuple[float, float] | None = None,
) -> Figure1:
    """Draw Figure 1 to ``path`` (PNG): mean step time per method, over-budget bars hatched.

    Rows are drawn in the given order, the first at the top. ``budget_bytes`` is the
    logical budget (a selection criterion, not an allocator cap). ``xlabel`` defaults to
    "Mean step time (<unit>)"; ``<unit>`` in it is replaced by the unit the axis uses (pass
    e.g. "Mean step time, cpu clock (<unit>)" to name the clock). ``headline`` (e.g. "joint
    is 18 % faster than eager/whole", computed by the caller from these rows) is drawn in a
    box in a row of its own below the bars. ``interval`` ``(lower, upper)`` in ms is drawn as a
    whisker across the joint bar: the headline ratio's interval times the control's mean, so
    the reader sees where the joint bar could lie on the headline's own estimator.
    """
    rows = _rows(summary)
    tscale, tunit = _time_unit(r["mean_ms"] for r in rows)
    mscale, munit = _memory_unit([r["peak_bytes"] for r in rows] + [budget_bytes])

    fig, canvas = _figure()
    ax = fig.add_subplot()
    n = len(rows)
    ypos = list(range(n - 1, -1, -1))  # first row on top
    width_max = max(r["mean_ms"] / tscale for r in rows)
    for y, r in zip(ypos, rows, strict=True):
        over = r["peak_bytes"] > budget_bytes
        color = colour(r["method"])
        ax.barh(
            y,
            r["mean_ms"] / tscale,
            height=0.62,
            color=color if not over else "white",
            edgecolor=color,
            hatch="///" if over else None,
            linewidth=1.2,
            label=None,
        )
        text = f"{_num(r['mean_ms'] / tscale)} {tunit}, {_num(r['peak_bytes'] / mscale, 1)} {munit}"
        if over:
            text += ", over budget"
        ax.text(
            r["mean_ms"] / tscale + 0.015 * width_max,
            y,
            text,
            va="center",
            fontsize=9,
            fontweight="bold" if r["method"] == JOINT else "normal",
        )
    ax.set_yticks(ypos)
    ax.set_yticklabels([r["label"] for r in rows])
    for tick, r in zip(ax.get_yticklabels(), rows, strict=True):
        if r["method"] in (JOINT, CONTROL):
            tick.set_fontweight("bold")
    ax.set_xlim(0, width_max * 1.55)  # room for the labels right of the longest bar
    ax.set_xlabel((xlabel or "Mean step time (<unit>)").replace("<unit>", tunit))
    drawn_interval = None
    if interval is not None and JOINT in [r["method"] for r in rows]:
        y = ypos[[r["method"] for r in rows].index(JOINT)]
        low, high = interval[0] / tscale, interval[1] / tscale
        whisker = ax.errorbar(
            (low + high) / 2, y, xerr=[[(high - low) / 2]], fmt="none", ecolor="black", capsize=4, elinewidth=1.2
        )
        segments = whisker.lines[2][0].get_segments()[0]
        drawn_interval = (float(segments[0][0]), float(segments[1][0]))
    drawn_headline = None
    if headline:
        # A row of its own below the last bar: no bar or bar label can sit under it.
        ax.set_ylim(-1.5, n - 0.5)
        drawn_headline = ax.text(
            0.01 * width_max,
            -1.0,
            headline,
            ha="left",
            va="center",
            fontsize=9,
            fontweight="bold",
            bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": colour(JOINT)},
        )
    budget_label = f"{_num(budget_bytes / mscale, 1)} {munit} logical budget"
    # The hatch key goes in the title rather than a legend: a legend box would sit on the
    # bar labels whichever corner it took.
    ax.set_title(title or f"Mean step time per method; hatched bars exceed the {budget_label}", fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path = _save(fig, canvas, path)

    bars = sorted(  # the bars, not the whisker's container
        (bar for container in ax.containers if hasattr(container, "patches") for bar in container.patches),
        key=lambda b: -b.get_y(),
    )
    return Figure1(
        path=path,
        methods=tuple(t.get_text() for t in sorted(ax.get_yticklabels(), key=lambda t: -t.get_position()[1])),
        times=tuple(float(b.get_width()) for b in bars),
        time_unit=tunit,
        hatched=tuple(bool(b.get_hatch()) for b in bars),
        labels=tuple(
            t.get_text() for t in sorted(ax.texts, key=lambda t: -t.get_position()[1]) if t is not drawn_headline
        ),
        budget_label=budget_label,
        pixels=_pixels(fig),
        xlabel=ax.get_xlabel(),
        headline=drawn_headline.get_text() if drawn_headline is not None else None,
        interval=drawn_interval,
    )


def figure3(
    summary: Sequence[Any],
    budget_bytes: int,
    path: Path | str,
    *,
    title: str | None = None,
    ylabel: str | None = None,
) -> Figure3:
    """Draw Figure 3 to ``path`` (PNG): peak allocated vs mean step time, one point per method.

    ``ylabel`` defaults to "Mean step time (<unit>)", ``<unit>`` replaced as in ``figure1``.

    Allocation above ``budget_bytes`` is shaded: above a *logical*, unenforced budget, not
    a device out-of-memory event. The joint planner is orange, the correctly costed
    eager/whole control blue, every other method grey.
    """
    rows = _rows(summary)
    tscale, tunit = _time_unit(r["mean_ms"] for r in rows)
    mscale, munit = _memory_unit([r["peak_bytes"] for r in rows] + [budget_bytes])
    xs = [r["peak_bytes"] / mscale for r in rows]
    ys = [r["mean_ms"] / tscale for r in rows]
    budget = budget_bytes / mscale

    fig, canvas = _figure()
    ax = fig.add_subplot()
    lo, hi = min(xs + [budget]), max(xs + [budget])
    pad = 0.08 * (hi - lo or hi or 1.0)
    xmin, xmax = max(0.0, lo - pad), hi + 3 * pad  # labels sit right of the points
    ax.axvspan(budget, xmax, color="#F3D3D3", alpha=0.6, lw=0, zorder=0)
    ax.axvline(budget, color="#B03030", ls="--", lw=1, zorder=1)
    note = ax.text(
        budget,
        0.99,
        f" shaded: above the\n {_num(budget, 1)} {munit} logical budget",
        transform=ax.get_xaxis_transform(),
        va="top",
        ha="left",
        fontsize=8,
        color="#B03030",
    )
    for r, x, y in zip(rows, xs, ys, strict=True):
        color = colour(r["method"])
        emphasis = r["method"] in (JOINT, CONTROL)
        ax.scatter(
            [x],
            [y],
            s=70 if emphasis else 36,
            color=color,
            edgecolor="black" if emphasis else color,
            zorder=3 if emphasis else 2,
            label=r["label"],
        )
    ax.set_xlim(xmin, xmax)
    ylo, yhi = min(ys), max(ys)
    ypad = 0.1 * (yhi - ylo or yhi or 1.0)
    ax.set_ylim(max(0.0, ylo - ypad), yhi + ypad)
    ax.set_xlabel(f"Peak allocated ({munit})")
    ax.set_ylabel((ylabel or "Mean step time (<unit>)").replace("<unit>", tunit))
    ax.set_title(title or "Peak allocation vs mean step time per method", fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    _place_labels(canvas, ax, rows, xs, ys, avoid=[note])
    path = _save(fig, canvas, path)

    points = [
        (c.get_label(), c.get_offsets()[0], c.get_facecolor()[0])
        for c in ax.collections
        if c.get_label() and not c.get_label().startswith("_")
    ]
    # lazy: matplotlib (~1.5 s to import) only when a figure is drawn, not for the palette and names the sections import
    from matplotlib.colors import to_hex

    span = next(p for p in ax.patches if p.get_zorder() == 0)
    x0 = span.get_x() if hasattr(span, "get_x") else span.get_xy()[0][0]
    return Figure3(
        path=path,
        methods=tuple(label for label, _xy, _c in points),
        peaks=tuple(float(xy[0]) for _l, xy, _c in points),
        times=tuple(float(xy[1]) for _l, xy, _c in points),
        memory_unit=munit,
        time_unit=tunit,
        shaded=(float(x0), float(ax.get_xlim()[1])),
        colors={label: to_hex(c) for label, _xy, c in points},
        annotations=tuple(sorted(t.get_text() for t in ax.texts if t is not note)),
        pixels=_pixels(fig),
        ylabel=ax.get_ylabel(),
    )


#: Where a point's label may go, in offset points from the point: right, left, above,
#: below, then further out. The first spot free of other labels and points wins.
_LABEL_SPOTS = (
    ((7, 0), "left", "center"),
    ((-7, 0), "right", "center"),
    ((0, 8), "center", "bottom"),
    ((0, -8), "center", "top"),
    ((7, 11), "left", "bottom"),
    ((7, -11), "left", "top"),
    ((-7, 11), "right", "bottom"),
    ((-7, -11), "right", "top"),
)


def _place_labels(canvas, ax, rows, xs, ys, avoid=()) -> None:
    """Label every point without labels overlapping each other or other points.

    Methods at the same spot (e.g. whole snapshots and functional, whose peaks are
    identical) share one label, "A / B"; every other label takes the first free spot of
    ``_LABEL_SPOTS``, judged on the rendered text extents.
    """
    renderer = canvas.get_renderer()
    display = ax.transData.transform(list(zip(xs, ys, strict=True)))
    groups: list[list[int]] = []
    for i, (px, py) in enumerate(display):
        for g in groups:
            gx, gy = display[g[0]]
            if abs(px - gx) < 6 and abs(py - gy) < 6:  # within a marker's radius on screen
                g.append(i)
                break
        else:
            groups.append([i])
    markers = [(px - 6, py - 6, px + 6, py + 6) for px, py in display]
    taken = [(b.x0, b.y0, b.x1, b.y1) for b in (a.get_window_extent(renderer) for a in avoid)]
    frame = ax.get_window_extent(renderer)
    # Emphasised methods choose first, so the joint and control labels get the best spots.
    order = sorted(groups, key=lambda g: not any(rows[i]["method"] in (JOINT, CONTROL) for i in g))
    for g in order:
        i = g[0]
        emphasis = any(rows[j]["method"] in (JOINT, CONTROL) for j in g)
        color = colour(rows[i]["method"]) if emphasis else "#333333"
        text = " / ".join(rows[j]["label"] for j in g)
        best, best_cost = None, None
        for offset, ha, va in _LABEL_SPOTS:
            ann = ax.annotate(
                text,
                (xs[i], ys[i]),
                xytext=offset,
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize=8,
                color=color,
                fontweight="bold" if emphasis else "normal",
            )
            box = ann.get_window_extent(renderer)
            extent = (box.x0, box.y0, box.x1, box.y1)
            own = set(g)
            cost = (
                sum(_overlap(extent, t) for t in taken)
                + sum(_overlap(extent, m) for k, m in enumerate(markers) if k not in own)
                + _outside(extent, (frame.x0, frame.y0, frame.x1, frame.y1))
            )
            if best_cost is None or cost < best_cost:
                if best is not None:
                    best[0].remove()
                best, best_cost = (ann, extent), cost
            else:
                ann.remove()
            if cost == 0:
                break
        taken.append(best[1])


def _overlap(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _outside(box, frame) -> float:
    area = (box[2] - box[0]) * (box[3] - box[1])
    return area - _overlap(box, frame)


@dataclass(frozen=True)
class StepTimes:
    """What a kind's step-time figure shows, top bar first: names, bar lengths, their labels
    (each bar's value to four significant figures, so it reads as the table beside it)."""

    path: Path
    methods: tuple[str, ...]
    times: tuple[float, ...]  # bar lengths, in ``time_unit``
    time_unit: str  # "s" | "ms"
    labels: tuple[str, ...]  # the value written beside each bar
    xlabel: str = ""


def step_times(times_ms: Mapping[str, float], path: Path | str, *, title: str, xlabel: str) -> StepTimes:
    """Draw one bar per method (``{method: step time in ms}``, drawn in the given order, the
    first on top) to ``path`` (PNG), each labelled with its value: the figure of a cohort kind
    without a section of its own, which has step times but no budget or plan to draw.

    ``xlabel``'s ``<unit>`` is replaced by the axis's unit. Raises ``ValueError`` for no
    methods or a time that is not positive.
    """
    if not times_ms or not all(v > 0 for v in times_ms.values()):
        raise ValueError(f"step_times needs at least one method, each with a positive time; got {dict(times_ms)}")
    tscale, tunit = _time_unit(times_ms.values())
    fig, canvas = _figure()
    ax = fig.add_subplot()
    methods = list(times_ms)
    ypos = list(range(len(methods) - 1, -1, -1))
    widest = max(times_ms.values()) / tscale
    for y, method in zip(ypos, methods, strict=True):
        width = times_ms[method] / tscale
        ax.barh(y, width, height=0.62, color=colour(method))
        ax.text(width + 0.015 * widest, y, f"{width:.4g} {tunit}", va="center", fontsize=9)
    ax.set_yticks(ypos)
    ax.set_yticklabels([METHOD_LABELS.get(m, m) for m in methods])
    ax.set_xlim(0, widest * 1.3)  # room for the labels right of the longest bar
    ax.set_xlabel(xlabel.replace("<unit>", tunit))
    ax.set_title(title, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path = _save(fig, canvas, path)
    bars = sorted((bar for container in ax.containers for bar in container.patches), key=lambda b: -b.get_y())
    return StepTimes(
        path=path,
        methods=tuple(t.get_text() for t in sorted(ax.get_yticklabels(), key=lambda t: -t.get_position()[1])),
        times=tuple(float(b.get_width()) for b in bars),
        time_unit=tunit,
        labels=tuple(t.get_text() for t in sorted(ax.texts, key=lambda t: -t.get_position()[1])),
        xlabel=ax.get_xlabel(),
    )


def _rows(summary: Sequence[Any]) -> list[dict[str, Any]]:
    rows = []
    for i, row in enumerate(summary):
        get = row.get if isinstance(row, Mapping) else (lambda k, d=None, _r=row: getattr(_r, k, d))
        missing = [k for k in ("method", "mean_ms", "peak_bytes") if get(k) is None]
        if missing:
            raise ValueError(
                f"summary row {i} lacks {missing}; each row needs method, mean_ms, peak_bytes (label optional)"
            )
        method = str(get("method"))
        mean_ms, peak = float(get("mean_ms")), int(get("peak_bytes"))
        if not mean_ms > 0 or peak < 0:
            raise ValueError(
                f"summary row {i} ({method}): mean_ms must be > 0 and peak_bytes >= 0; got {mean_ms}, {peak}"
            )
        rows.append(
            {
                "method": method,
                "mean_ms": mean_ms,
                "peak_bytes": peak,
                "label": str(get("label") or METHOD_LABELS.get(method, method)),
            }
        )
    if not rows:
        raise ValueError("summary is empty: a figure needs at least one method")
    return rows


def _time_unit(values_ms) -> tuple[float, str]:
    return (1000.0, "s") if max(values_ms) >= 1000.0 else (1.0, "ms")


def _memory_unit(values: Sequence[int]) -> tuple[float, str]:
    return (float(_GIB), "GiB") if max(values) >= _GIB else (float(_MIB), "MiB")


def _num(x: float, digits: int | None = None) -> str:
    """``3.06``, ``38.4``, ``2882``: three significant figures without exponent notation."""
    if digits is not None:
        return f"{x:.{digits}f}"
    if abs(x) < 10:
        return f"{x:.2f}"
    if abs(x) < 100:
        return f"{x:.1f}"
    return f"{x:.0f}"


def _figure():
    # lazy: matplotlib (~1.5 s to import) only when a figure is drawn, not for the palette and names the sections import
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=_SIZE, dpi=_DPI)
    return fig, FigureCanvasAgg(fig)


def _save(fig, canvas, path: Path | str) -> Path:
    # Through a temporary name and a rename, like every part file: a report directory
    # never holds half a PNG (and a full disk says how many bytes the PNG needed).
    png = io.BytesIO()
    canvas.print_png(png)
    return write_bytes_atomic(png.getvalue(), Path(path))


def _pixels(fig) -> tuple[int, int]:
    w, h = fig.get_size_inches() * fig.dpi
    return int(round(w)), int(round(h))
