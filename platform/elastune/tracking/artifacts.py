"""The files a finished sweep leaves on its MLflow parent run, rendered from a `SweepRecord`.

No mlflow here (tracking/mlflow.py is the only module that imports it): these functions turn
records into text or PNG bytes, so they can be tested and reused (the web UI can draw the same
plot) without a store.

- best_config.yaml: the best trial's resolved RunConfig, runnable as `elastune train best_config.yaml`.
- trials.csv: one row per trial (id, status, searched params, metrics).
- pareto.png: samples/s against peak memory for every outcome, the Pareto front numbered and named,
  the best, the reference and the memory ceiling marked (drawn by pareto_plot.py).
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import yaml

from elastune.dotted import flatten
from elastune.tracking.pareto_plot import pareto_png
from elastune.tracking.records import SweepRecord
from elastune.units import human_bytes

__all__ = ["best_config_yaml", "flatten", "pareto_png", "trials_csv"]

# The per-trial figures, in the order trials.csv shows them after the searched params.
_CSV_FIGURES = (
    "samples_per_s",
    "peak_memory_bytes",
    "peak_memory_kind",
    "estimated_peak_bytes",
    "quality",
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
    """The best trial's resolved config as RunConfig YAML, every value as it ran (floats whole),
    with a comment saying where it came from and by which figure it ranks; of a sweep that has not
    finished (the UI offers it), that it is the best so far."""
    best = record.best()
    if best is None:
        return None
    confirmed = ""
    if best.confirmed_speedup and best.trial_id != "reference":
        confirmed = f", confirmed {best.confirmed_speedup[1]:.2f}x the reference (median of the rounds)"
    so_far = ""
    if record.status != "finished":
        so_far = f"# The sweep is {record.status}: this is its best so far, not its result.\n"
    header = (
        f"# Best configuration of sweep {record.sweep_id}: trial {best.trial_id} (#{best.number}),\n"
        f"# {best.samples_per_s:.1f} samples/s measured in the search{confirmed}, measured peak "
        f"{human_bytes(best.peak_memory_bytes) if best.peak_memory_bytes is not None else 'unknown'}.\n"
        f"{so_far}"
        "# Run it with: elastune train best_config.yaml\n"
    )
    return header + yaml.safe_dump(best.config, sort_keys=False)


def trials_csv(record: SweepRecord) -> str:
    """One row per trial, in proposal order; searched params as `param.<key>` columns, the
    workload's eval metrics as `metric.<name>` columns."""
    trials = sorted(record.trials, key=lambda t: (t.number, t.trial_id))
    param_keys = sorted({key for t in trials for key in flatten(t.params)})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    metric_keys = sorted({name for t in trials for name in t.metrics})  # each eval metric the workload has
    header = ["trial_id", "number", "status", *(f"param.{k}" for k in param_keys), *_CSV_FIGURES]
    writer.writerow([*header, *(f"metric.{name}" for name in metric_keys)])
    for trial in trials:
        params = flatten(trial.params)
        row: list[Any] = [trial.trial_id, trial.number, trial.status]
        row += [as_text(params[k]) if k in params else "" for k in param_keys]
        row += ["" if getattr(trial, name) is None else getattr(trial, name) for name in _CSV_FIGURES]
        row += [trial.metrics.get(name, "") for name in metric_keys]
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
