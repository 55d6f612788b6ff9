"""pareto.png: a sweep's trials as throughput against peak memory, drawn from its `SweepRecord`.

Every outcome with figures is a point, each kind with its own marker and colour in the legend:
- completed (ok) trials at their measured peak and samples/s; hollow when their quality is outside
  the sweep's tolerance (they ran, but cannot be the best);
- trials stopped early (pruned: they ended without their final report, e.g. ASHA stopped them at
  a rung) at the last samples/s they reported (the windows they ran) and their measured peak, or,
  where none was measured (a progress report carries no peak), the peak the estimator predicted: a
  square, hollow when the peak is the predicted one;
- trials that ran and measured a peak over the memory ceiling, at that peak and their samples/s;
- trials that never produced a throughput sit at 0 samples/s, at the peak the estimator predicted:
  those it screened out (predicted over the ceiling, never launched) and those that ran out of memory.
A trial with no figure to place (running, interrupted, failed before reporting samples/s, stopped
before its first timed window) is counted in the title with the reason (`_why_not_plotted`). The
memory ceiling is a dashed line with the region beyond it shaded.

The Pareto front (`pareto_front`) is a staircase of stars. Its points, the best trial
(`SweepRecord.best`, which prefers a confirmed one: ringed) and the reference (a diamond) are
labelled with their trial number, as the console and the results table name them (records.py's
`trial_label`: the proposal's number, `ref` for the reference); the key under the plot names each
labelled config by strategy · precision · micro×accum, then any other searched parameter on which
they differ.

The axes' limits come from the data and the ceiling, widened by a fixed number of pixels on every
side, so no marker or label is clipped; memory spanning more than `LOG_RATIO` is drawn on a log axis.
The figure is 800 px wide, the width MLflow's artifact viewer shows without scaling it down.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from elastune.dotted import flatten
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front, shown_value, trial_label
from elastune.units import human_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox

__all__ = ["LOG_RATIO", "config_label", "outcome", "pareto_figure", "pareto_png", "trial_label"]

LOG_RATIO = 30  # memory figures spanning more than this ratio get a log axis: a linear one squashes the small
_WIDTH_IN, _DPI = 8.0, 100
_PLOT_IN = (0.8, 6.95, 4.4)  # the plot's left margin, width and height, in inches
_ROOM_PX = 32  # free pixels beyond the data on every side: a marker's radius and a number beside it
_FONT = 9  # points: about 12 px at 100 dpi, the smallest that stays legible at 800 px
_MIB, _GIB = 1024**2, 1024**3
_LABEL_CHARS = 72  # a key line's config, so the line fits 800 px
_TITLE_CHARS = 90

# Each outcome's legend entry, its name in the title's counts and its marker, in legend order.
_OUTCOMES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "completed": ("completed", "completed", {"marker": "o", "color": "tab:blue", "alpha": 0.8}),
    "off_quality": (
        "completed, quality out of tolerance",
        "quality out of tolerance",
        {"marker": "o", "facecolors": "none", "edgecolors": "tab:blue", "linewidths": 1.5},
    ),
    "pruned": (
        "stopped early (last samples/s), measured peak",
        "stopped early (pruned)",
        {"marker": "s", "s": 40, "color": "tab:purple", "alpha": 0.85},
    ),
    "pruned_predicted": (
        "stopped early (last samples/s), predicted peak",
        "stopped early (pruned)",
        {"marker": "s", "s": 40, "facecolors": "none", "edgecolors": "tab:purple", "linewidths": 1.5},
    ),
    "over_ceiling": (
        "ran over the ceiling (measured)",
        "over the ceiling",
        {"marker": "X", "s": 60, "color": "tab:red"},
    ),
    "screened": (
        "screened out, not run (predicted peak)",
        "screened out",
        {"marker": "^", "s": 50, "facecolors": "none", "edgecolors": "tab:red", "linewidths": 1.5},
    ),
    "oom": ("out of memory (predicted peak)", "out of memory", {"marker": "v", "s": 50, "color": "darkred"}),
}


class _Point(NamedTuple):
    trial: TrialRecord
    x: float  # memory, in the plot's unit
    y: float  # samples/s
    memory_bytes: int  # the peak drawn: measured, or predicted (`predicted`)
    predicted: bool


def outcome(trial: TrialRecord) -> str | None:
    """The legend entry (a key of the outcomes above) a trial is drawn under; None: nothing to draw
    (`_why_not_plotted` says why)."""
    measured = trial.peak_memory_bytes is not None and trial.samples_per_s is not None
    if trial.status == "ok" and measured:
        return "completed" if trial.quality_ok is not False else "off_quality"
    if trial.status == "pruned" and trial.samples_per_s:  # 0: stopped while still warming up, nothing timed
        if trial.peak_memory_bytes is not None:
            return "pruned"
        return "pruned_predicted" if trial.estimated_peak_bytes is not None else None
    if trial.status == "infeasible" and measured:
        return "over_ceiling"
    if trial.status == "infeasible" and trial.estimated_peak_bytes is not None:
        return "screened"
    if trial.status == "oom" and trial.estimated_peak_bytes is not None:
        return "oom"
    return None


def config_label(trial: TrialRecord, extra_keys: Iterable[str] = ()) -> str:
    """`int8 · bf16 · 1024×2`: the trial's strategy, precision and micro-batch × accumulation, then
    `leaf=value` for each of `extra_keys` (dotted); cut to a line's length."""
    values = flatten(trial.config) | trial.params
    parts = [str(values[k]) for k in ("embedding.strategy", "precision") if k in values]
    if "batch.micro" in values:
        parts.append(f"{values['batch.micro']}×{values.get('batch.accum', 1)}")
    parts += [f"{key.rsplit('.', 1)[-1]}={_text(values.get(key))}" for key in extra_keys]
    label = " · ".join(parts) or trial.trial_id
    return label if len(label) <= _LABEL_CHARS else label[: _LABEL_CHARS - 1] + "…"


def pareto_png(record: SweepRecord) -> bytes:
    """`pareto_figure` as PNG bytes."""
    buffer = io.BytesIO()
    # tight: the figure is made tall enough for any key; the unused height below it is cut
    pareto_figure(record).savefig(buffer, format="png", bbox_inches="tight", pad_inches=0.1)
    return buffer.getvalue()


def pareto_figure(record: SweepRecord) -> Figure:
    """samples/s against peak memory on a matplotlib Figure with its own Agg canvas (no display, no
    pyplot state), laid out as the module docstring says."""
    # Imported here: matplotlib costs a few hundred ms and only finish_sweep (or the UI) draws.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = {kind: _points(record, kind) for kind in _OUTCOMES}
    every = [p for kind_points in points.values() for p in kind_points]
    labelled = _labelled(record, every)
    extra = _differing(record, [p.trial for p in labelled])
    key_lines = [_key_line(p, record, extra) for p in labelled]
    title = _title(record, points)
    left, width, height = _PLOT_IN
    top = 0.15 + 0.2 * title.count("\n")  # the title's lines, about 0.2 in each at its size
    figure_height = top + height + 1.6 + 0.2 * len(key_lines)  # tall enough for the key; savefig cuts the rest
    figure = Figure(figsize=(_WIDTH_IN, figure_height), dpi=_DPI)
    FigureCanvasAgg(figure)
    ax = figure.add_axes(
        (left / _WIDTH_IN, 1 - (top + height) / figure_height, width / _WIDTH_IN, height / figure_height)
    )
    _draw_points(ax, record, points, labelled)
    _set_limits(ax, record, every)
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's, for text extents
    _label_points(ax, renderer, labelled, every)
    _decorate(ax, record, title, every)
    _add_key(figure, ax, renderer, key_lines)
    return figure


def _points(record: SweepRecord, kind: str) -> list[_Point]:
    scale = _memory_unit(record)[0]
    out = []
    for trial in record.trials:
        if outcome(trial) == kind:
            predicted = kind in {"pruned_predicted", "screened", "oom"}
            memory = (trial.estimated_peak_bytes if predicted else trial.peak_memory_bytes) or 0
            out.append(_Point(trial, memory / scale, trial.samples_per_s or 0.0, memory, predicted))
    return out


def _labelled(record: SweepRecord, every: list[_Point]) -> list[_Point]:
    """The points that get a label: the Pareto front, the best and the reference, left to right."""
    best = record.best()
    wanted = {t.trial_id for t in pareto_front(record.trials)} | {"reference"}
    wanted |= {best.trial_id} if best else set()
    return sorted((p for p in every if p.trial.trial_id in wanted), key=lambda p: (p.x, -p.y))


def _differing(record: SweepRecord, trials: list[TrialRecord]) -> list[str]:
    """The searched parameters, beyond strategy, precision and batch, on which `trials` differ."""
    shown = {"embedding.strategy", "precision", "batch.micro", "batch.accum"}
    searched = [key for key in dict.fromkeys(k for t in record.trials for k in t.params) if key not in shown]
    values = [flatten(t.config) | t.params for t in trials]
    return [key for key in searched if len({_text(v.get(key)) for v in values}) > 1]


def _key_line(point: _Point, record: SweepRecord, extra: list[str]) -> str:
    trial, best = point.trial, record.best()
    peak = human_bytes(point.memory_bytes) + (" predicted" if point.predicted else "")
    notes = [f"{point.y:,.0f} samples/s", peak]
    if trial.trial_id == "reference":
        notes.append("reference")
    if best is not None and trial.trial_id == best.trial_id:
        confirmed = trial.confirmed_speedup
        notes.append(f"best, confirmed {confirmed[1]:.2f}× ref" if confirmed else "best")
    if trial.quality_ok is False:
        notes.append("quality out of tolerance")
    name = "ref" if trial.trial_id == "reference" else f"trial {trial_label(trial)}"
    return f"{name}:  {config_label(trial, extra)}  ({', '.join(notes)})"


def _draw_points(ax: Axes, record: SweepRecord, points: dict[str, list[_Point]], labelled: list[_Point]) -> None:
    front_ids = {t.trial_id for t in pareto_front(record.trials)}
    on_own = front_ids | {"reference"}  # drawn by their own markers below
    for kind, (label, _, style) in _OUTCOMES.items():
        drawn = [p for p in points[kind] if p.trial.trial_id not in on_own]
        if drawn:
            ax.scatter([p.x for p in drawn], [p.y for p in drawn], label=label, zorder=3, **style)
    front = [p for p in labelled if p.trial.trial_id in front_ids]
    if front:
        # A staircase: between two front points the best reachable throughput is the cheaper one's.
        ax.plot([p.x for p in front], [p.y for p in front], color="tab:orange", drawstyle="steps-post", zorder=2)
        stars = [p for p in front if p.trial.trial_id != "reference"]
        if stars:
            xs, ys = [p.x for p in stars], [p.y for p in stars]
            ax.scatter(
                xs, ys, marker="*", s=180, color="tab:orange", edgecolors="black", zorder=4, label="Pareto front"
            )
    by_id = {p.trial.trial_id: p for p in labelled}
    if "reference" in by_id:
        reference = by_id["reference"]
        ax.scatter([reference.x], [reference.y], marker="D", s=60, color="black", zorder=4, label="reference")
    best = record.best()
    if best is not None and best.trial_id in by_id:
        label = "best (confirmed)" if best.confirmed_speedup else "best"
        at = by_id[best.trial_id]
        ax.scatter(
            [at.x],
            [at.y],
            marker="o",
            s=400,
            facecolors="none",
            edgecolors="tab:green",
            linewidths=2.5,
            zorder=5,
            label=label,
        )


def _set_limits(ax: Axes, record: SweepRecord, every: list[_Point]) -> None:
    """Limits holding every point and the ceiling, with `_ROOM_PX` pixels to spare on every side."""
    scale = _memory_unit(record)[0]
    xs = [p.x for p in every] + ([record.memory_ceiling_bytes / scale] if record.memory_ceiling_bytes else [])
    # 0 always: the trials that never ran sit there, and ratios read true; 1 when nothing ran at all
    ys = [0.0] + [p.y for p in every] if any(p.y > 0 for p in every) else [0.0, 1.0]
    if not xs:
        return
    log = min(xs) > 0 and max(xs) / min(xs) > LOG_RATIO
    if log:
        ax.set_xscale("log")
        low, high = _padded(math.log10(min(xs)), math.log10(max(xs)), ax.bbox.width)
        ax.set_xlim(10**low, 10**high)
    else:
        ax.set_xlim(*_padded(min(xs), max(xs), ax.bbox.width))
    ax.set_ylim(*_padded(min(ys), max(ys), ax.bbox.height))


def _padded(low: float, high: float, length_px: float) -> tuple[float, float]:
    """[low, high] widened so that `_ROOM_PX` of the axis' `length_px` pixels lie beyond each end."""
    if high - low <= 1e-9 * max(abs(low), abs(high), 1.0):  # one value (or equal ones): a range around it
        half = abs(high) * 0.1 or 1.0
        low, high = low - half, high + half
    per_px = (high - low) / max(length_px - 2 * _ROOM_PX, 1.0)
    return low - _ROOM_PX * per_px, high + _ROOM_PX * per_px


# Where a number goes beside its point: offset in points, then its alignment; tried in this order.
_Place = tuple[float, float, Literal["left", "right"], Literal["bottom", "top"]]
_PLACES: tuple[_Place, ...] = (
    (8, 7, "left", "bottom"),
    (8, -7, "left", "top"),
    (-8, 7, "right", "bottom"),
    (-8, -7, "right", "top"),
)


def _label_points(ax: Axes, renderer: RendererBase, labelled: list[_Point], every: list[_Point]) -> None:
    """Each labelled point's trial number beside it, where it stays inside the axes and covers the
    fewest other labels and markers (points at the same place share one: `3,ref`)."""
    from matplotlib import patheffects

    at: dict[tuple[float, float], list[str]] = {}
    for p in labelled:
        at.setdefault((p.x, p.y), []).append(trial_label(p.trial))
    inside = ax.get_window_extent(renderer).padded(-2)
    markers = [_box(ax, p.x, p.y, 6) for p in every]
    placed: list[Bbox] = []
    halo = [patheffects.withStroke(linewidth=3, foreground="white")]  # legible over lines and markers
    for (x, y), labels in at.items():
        text = ax.annotate(
            ",".join(labels),
            (x, y),
            xytext=_PLACES[0][:2],
            textcoords="offset points",
            fontsize=_FONT + 1,
            fontweight="bold",
            path_effects=halo,
            zorder=6,
        )
        _place(text, _best_place(text, renderer, inside, placed + markers))
        placed.append(text.get_window_extent(renderer))


def _best_place(text: Annotation, renderer: RendererBase, inside: Bbox, others: list[Bbox]) -> _Place:
    """The first of `_PLACES` that keeps `text` inside the axes and covers the fewest of `others`."""

    def cost(place: _Place) -> tuple[bool, int]:
        _place(text, place)
        extent = text.get_window_extent(renderer)
        return not _within(extent, inside), sum(extent.overlaps(other) for other in others)

    return min(_PLACES, key=cost)


def _place(text: Annotation, place: _Place) -> None:
    dx, dy, ha, va = place
    text.xyann = (dx, dy)
    text.set_horizontalalignment(ha)
    text.set_verticalalignment(va)


def _within(inner: Bbox, outer: Bbox) -> bool:
    return outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1


def _box(ax: Axes, x: float, y: float, radius_px: float) -> Bbox:
    from matplotlib.transforms import Bbox

    cx, cy = ax.transData.transform((x, y))
    return Bbox.from_extents(cx - radius_px, cy - radius_px, cx + radius_px, cy + radius_px)


def _decorate(ax: Axes, record: SweepRecord, title: str, every: list[_Point]) -> None:
    """Ceiling, axis labels and ticks, the title with the counts, the legend."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    scale, unit = _memory_unit(record)
    if record.memory_ceiling_bytes:
        ceiling = record.memory_ceiling_bytes / scale
        ax.axvline(
            ceiling, color="tab:red", linestyle="--", label=f"memory ceiling {human_bytes(record.memory_ceiling_bytes)}"
        )
        ax.axvspan(ceiling, ax.get_xlim()[1], color="tab:red", alpha=0.06, zorder=0)
    ax.set_xlabel(f"peak memory ({unit}): measured, or predicted where none was measured", fontsize=_FONT + 1)
    ax.set_ylabel("throughput (samples/s)", fontsize=_FONT + 1)
    ax.tick_params(labelsize=_FONT)
    # no label below 0: the band under 0 only keeps the markers at 0 whole
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "" if v < 0 else _number(v)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _number(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=_FONT + 2)
    if not every:
        ax.text(
            0.5, 0.5, "no trial has figures yet", ha="center", va="center", transform=ax.transAxes, fontsize=_FONT + 2
        )


def _add_key(figure: Figure, ax: Axes, renderer: RendererBase, key_lines: list[str]) -> None:
    """The legend under the x axis' label, then one line per labelled config."""
    from matplotlib.collections import PathCollection

    handles, labels = ax.get_legend_handles_labels()
    tight = ax.get_tightbbox(renderer)  # the axes with its tick labels and the axis label
    below = tight.y0 if tight is not None else ax.bbox.y0
    top = below
    if handles:
        legend = figure.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(ax.get_position().x0, below / figure.bbox.height),
            ncols=2,
            fontsize=_FONT,
            frameon=False,
            handletextpad=0.3,
            columnspacing=2.0,
            borderaxespad=0.3,
        )
        for handle in legend.legend_handles:  # the best's ring at the plot's size would crowd the legend
            if isinstance(handle, PathCollection):
                handle.set_sizes([60])
        top = legend.get_window_extent(renderer).y0
    if key_lines:
        figure.text(
            ax.get_position().x0,
            top / figure.bbox.height - 0.01,
            "\n".join(key_lines),
            va="top",
            ha="left",
            fontsize=_FONT,
            linespacing=1.5,
        )


def _title(record: SweepRecord, points: dict[str, list[_Point]]) -> str:
    """The sweep, then its trials by outcome (`9 trials: 6 completed · 3 stopped early (pruned)`),
    wrapped to the figure's width, and those not plotted, each with the reason."""
    plotted: dict[str, int] = {}  # by the title's name: the two kinds of stopped trial count as one
    for kind, ps in points.items():
        if ps:
            plotted[_OUTCOMES[kind][1]] = plotted.get(_OUTCOMES[kind][1], 0) + len(ps)
    ids = {p.trial.trial_id for ps in points.values() for p in ps}
    missing: dict[str, int] = {}
    for trial in record.trials:
        if trial.trial_id not in ids:
            why = f"{trial.status} ({_why_not_plotted(trial)})"
            missing[why] = missing.get(why, 0) + 1
    trials = f"{len(record.trials)} trial" + ("" if len(record.trials) == 1 else "s")
    lines = [f"sweep {record.sweep_id}: throughput against peak memory"]
    _wrap(lines, f"{trials}: ", [f"{n} {name}" for name, n in plotted.items()] or ["none plotted"])
    if missing:
        _wrap(lines, "not plotted: ", [f"{n} {why}" for why, n in sorted(missing.items())])
    return "\n".join(lines)


def _wrap(lines: list[str], head: str, parts: list[str]) -> None:
    """`head` and `parts` joined by ` · ` on a new line, wrapped between parts, never inside one."""
    lines.append(head + parts[0])
    for part in parts[1:]:
        if len(lines[-1]) + len(part) + 3 > _TITLE_CHARS:
            lines.append(part)
        else:
            lines[-1] += " · " + part


def _why_not_plotted(trial: TrialRecord) -> str:
    """Why a trial has no point (`outcome` is None), in a few words for the title."""
    if trial.status == "running":
        return "no figures yet"
    if trial.status == "interrupted":
        return "stopped with the sweep, to run again"
    if trial.status == "pruned" and trial.samples_per_s is not None and not trial.samples_per_s:
        return "stopped before its first timed window"
    if trial.samples_per_s is None and trial.status in {"failed", "pruned", "ok"}:
        return "no samples/s recorded"
    if trial.status in {"infeasible", "oom"} and trial.estimated_peak_bytes is None:
        return "no predicted peak"
    return "no peak memory figure"


def _memory_unit(record: SweepRecord) -> tuple[float, str]:
    """GiB when anything plotted reaches 1 GiB, MiB otherwise."""
    sizes = [record.memory_ceiling_bytes or 0]
    for t in record.trials:
        sizes += [t.peak_memory_bytes or 0, t.estimated_peak_bytes or 0]
    return (_GIB, "GiB") if max(sizes) >= _GIB else (_MIB, "MiB")


def _number(value: float) -> str:
    """Tick text: `12,000`, `850`, `2.5`, `0.01`."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:g}"


def _text(value: Any) -> str:
    """A value in a label: booleans as YAML writes them, floats to three significant digits."""
    return str(value).lower() if isinstance(value, bool) else shown_value(value)
