"""The files a finished sweep leaves on its MLflow parent run, rendered from a `SweepRecord`.

No mlflow here (tracking/mlflow.py is the only module that imports it): these functions turn
records into text or PNG bytes, so they can be tested and reused (the web UI can draw the same
plot) without a store.

- best_config.yaml: the best trial's resolved RunConfig, runnable as `elastune train best_config.yaml`.
- trials.csv: one row per trial (id, status, searched params, metrics).
- pareto.png: samples/s against measured peak memory, the Pareto front, infeasible trials at their
  estimated peak, the memory ceiling.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import yaml

from elastune.dotted import flatten
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front
from elastune.units import human_bytes

__all__ = ["best_config_yaml", "flatten", "pareto_png", "trials_csv"]

_MIB = 1024**2
_GIB = 1024**3

# The per-trial figures, in the order trials.csv shows them after the searched params.
_CSV_FIGURES = (
    "samples_per_s",
    "peak_memory_bytes",
    "peak_memory_kind",
    "estimated_peak_bytes",
    "val_logloss",
    "val_auc",
    "oom_retries",
    "steps",
    "quality_ok",
    "node",
    "error",
    "mlflow_run_id",
)


def as_text(value: Any) -> str:
    """One leaf as text: strings as they are, everything else as JSON (`null`, `true`, `[64, 32]`)."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def best_config_yaml(record: SweepRecord) -> str | None:
    """The best trial's resolved config as RunConfig YAML, with a comment saying where it came from."""
    best = record.best()
    if best is None:
        return None
    header = (
        f"# Best configuration of sweep {record.sweep_id}: trial {best.trial_id} (#{best.number}),\n"
        f"# {best.samples_per_s:.1f} samples/s, measured peak "
        f"{human_bytes(best.peak_memory_bytes) if best.peak_memory_bytes is not None else 'unknown'}.\n"
        "# Run it with: elastune train best_config.yaml\n"
    )
    return header + yaml.safe_dump(best.config, sort_keys=False)


def trials_csv(record: SweepRecord) -> str:
    """One row per trial, in proposal order; searched params as `param.<key>` columns."""
    trials = sorted(record.trials, key=lambda t: (t.number, t.trial_id))
    param_keys = sorted({key for t in trials for key in flatten(t.params)})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["trial_id", "number", "status", *(f"param.{k}" for k in param_keys), *_CSV_FIGURES])
    for trial in trials:
        params = flatten(trial.params)
        row: list[Any] = [trial.trial_id, trial.number, trial.status]
        row += [as_text(params[k]) if k in params else "" for k in param_keys]
        row += ["" if getattr(trial, name) is None else getattr(trial, name) for name in _CSV_FIGURES]
        writer.writerow([_inert(cell) for cell in row])
    return buffer.getvalue()


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def _inert(cell: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, CR first) gets a
    leading apostrophe (OWASP's CSV-injection rule); numbers, negative ones too, stay numbers."""
    if isinstance(cell, str) and cell.startswith(_FORMULA_START) and not _NUMBER.match(cell):
        return "'" + cell
    return cell


def pareto_png(record: SweepRecord) -> bytes:
    """samples/s against peak memory as PNG bytes (matplotlib's Agg canvas: no display, no pyplot state)."""
    # Imported here: matplotlib costs a few hundred ms and only finish_sweep (or the UI) draws.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), dpi=110)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    scale, unit = _memory_unit(record)
    front = pareto_front(record.trials)
    front_ids = {t.trial_id for t in front}

    def plot(trials: list[TrialRecord], x_of: str, **style: Any) -> None:
        points = [(getattr(t, x_of) / scale, t.samples_per_s or 0.0) for t in trials if getattr(t, x_of) is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(xs, ys, clip_on=False, **style)  # unclipped: trials without throughput sit on y=0

    ok = [t for t in record.trials if t.status == "ok" and t.trial_id not in front_ids]
    plot(ok, "peak_memory_bytes", marker="o", color="tab:blue", alpha=0.6, label="ok")
    pruned = [t for t in record.trials if t.status == "pruned"]
    plot(pruned, "peak_memory_bytes", marker="s", facecolors="none", edgecolors="tab:gray", label="pruned (partial)")
    if front:
        xs = [(t.peak_memory_bytes or 0) / scale for t in front]
        ys = [t.samples_per_s or 0.0 for t in front]
        # A staircase: between two front points the best reachable throughput is the cheaper one's.
        ax.plot(xs, ys, color="tab:orange", linewidth=1.5, drawstyle="steps-post", zorder=2)
        ax.scatter(xs, ys, marker="*", s=160, color="tab:orange", edgecolors="black", zorder=3, label="Pareto front")
    # Trials that never produced a throughput sit on the x axis, at the memory that ruled them out.
    infeasible = [t for t in record.trials if t.status == "infeasible"]
    plot(infeasible, "estimated_peak_bytes", marker="x", s=60, color="tab:red", label="infeasible (estimated peak)")
    oom = [t for t in record.trials if t.status == "oom"]
    plot(oom, "estimated_peak_bytes", marker="v", s=50, color="darkred", label="out of memory (estimated peak)")
    if record.memory_ceiling_bytes is not None:
        ax.axvline(
            record.memory_ceiling_bytes / scale,
            color="tab:red",
            linestyle="--",
            label=f"memory ceiling ({human_bytes(record.memory_ceiling_bytes)})",
        )
    ax.set_xlabel(f"peak memory ({unit}): measured; infeasible and OOM trials: estimated")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title(f"sweep {record.sweep_id}: throughput against peak memory")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no trial has figures yet", ha="center", va="center", transform=ax.transAxes)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _memory_unit(record: SweepRecord) -> tuple[float, str]:
    """GiB when anything plotted reaches 1 GiB, MiB otherwise."""
    sizes = [record.memory_ceiling_bytes or 0]
    for t in record.trials:
        sizes += [t.peak_memory_bytes or 0, t.estimated_peak_bytes or 0]
    return (_GIB, "GiB") if max(sizes) >= _GIB else (_MIB, "MiB")
