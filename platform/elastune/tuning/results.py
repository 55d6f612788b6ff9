"""What a finished sweep says: the top configs against the reference, as rows a table or a script
can use. Shared by `elastune sweep` (its closing summary) and `elastune results` (read back from
MLflow).

A record read back from the store holds whatever its writers put there: the rows carry its text
(ids, statuses, parameters) through `printable`, so a stored line break or escape sequence neither
stacks a cell nor reaches the terminal; the console still escapes rich's markup when it prints.
"""

from __future__ import annotations

from typing import Any

from elastune.text import printable
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front, trial_label
from elastune.units import human_bytes, short_bytes

__all__ = [
    "COMPACT_COLUMNS",
    "SUMMARY_COLUMNS",
    "compact_rows",
    "results_json",
    "short_bytes",
    "short_name",
    "summary_rows",
    "trial_label",
]

# `--wide`: every figure in its own column, one line per trial
SUMMARY_COLUMNS = (
    "rank",
    "trial",
    "status",
    "parameters",
    "samples/s (windows p25-p75)",
    "speed-up",
    "confirmed",
    "peak (measured)",
    "predicted",
    "quality vs ref",
    "other metrics",
)
# the default: fits a 100-column terminal, figures stacked in a cell (a trial takes a few lines)
COMPACT_COLUMNS = ("#", "trial", "config", "samples/s", "vs ref", "peak", "quality")
# searched keys as the compact table names them (others by their last dotted part)
SHORT_NAMES = {
    "embedding.strategy": "strategy",
    "optimizer.sparse": "sparse opt",
    "optimizer.dense": "dense opt",
    "workload_options.activation_checkpointing": "checkpointing",
    "workload_options.bucket_by_length": "buckets",
    "model.embedding_dim": "dim",
    "data.loader_workers": "workers",
}


def ranked(record: SweepRecord) -> list[TrialRecord]:
    """Feasible trials fastest first, then the rest (so a reader sees why they lost)."""
    # confirmed trials first, by their confirmed ratio (the stage ranks them), then the search's order
    feasible = sorted(
        (t for t in record.trials if t.feasible),
        key=lambda t: (-(t.confirmed_speedup[1]) if t.confirmed_speedup else 0.0, -(t.samples_per_s or 0.0)),
    )
    rest = sorted((t for t in record.trials if not t.feasible), key=lambda t: (t.status, t.number))
    return feasible + rest


def summary_rows(record: SweepRecord, top: int | None = None) -> list[tuple[str, ...]]:
    """One row per trial (the `top` first of `ranked`; None: all), every figure in its column."""
    rows: list[tuple[str, ...]] = []
    for rank, trial in enumerate(ranked(record)[:top], start=1):
        rows.append(
            (
                str(rank) if trial.feasible else "-",
                printable(trial.trial_id),
                printable(trial.status),
                ", ".join(printable(f"{k.split('.')[-1]}={v}") for k, v in trial.params.items()) or "(reference)",
                _throughput(trial),
                _speedup(trial, record),
                _confirmed(trial),
                human_bytes(trial.peak_memory_bytes) if trial.peak_memory_bytes else "-",
                human_bytes(trial.estimated_peak_bytes) if trial.estimated_peak_bytes else "-",
                _quality(trial, record),
                _other_metrics(trial, record),
            )
        )
    return rows


def compact_rows(record: SweepRecord, top: int | None = None) -> list[tuple[str, ...]]:
    """The same trials as `summary_rows`, stacked to fit 100 columns: the rank (or why a trial lost),
    its config one parameter a line, samples/s over its windows' middle half, its speed-up (and the
    confirmation's), measured over predicted peak, and its quality against the reference's."""
    rows: list[tuple[str, ...]] = []
    for rank, trial in enumerate(ranked(record)[:top], start=1):
        spread = ""
        if trial.samples_per_s_quartiles and (trial.windows or 0) >= 3:
            low, _, high = trial.samples_per_s_quartiles
            spread = f"\n{_k(low)}-{_k(high)}"
        confirmed = ""
        if trial.confirmed_speedup:
            low, median, high = trial.confirmed_speedup
            confirmed = f"\nconf. {median:.2f}×\n({low:.2f}-{high:.2f})"
        peak = short_bytes(trial.peak_memory_bytes) if trial.peak_memory_bytes else "-"
        predicted = f"\npred. {short_bytes(trial.estimated_peak_bytes)}" if trial.estimated_peak_bytes else ""
        rows.append(
            (
                str(rank) if trial.feasible else printable(trial.status),
                printable(trial_label(trial)),
                "\n".join(printable(f"{short_name(k)}={v}") for k, v in trial.params.items()) or "(reference)",
                (f"{trial.samples_per_s:,.0f}" if trial.samples_per_s else "-") + spread,
                _speedup(trial, record) + confirmed,
                peak + predicted,
                _quality(trial, record),
            )
        )
    return rows


def short_name(key: str) -> str:
    """A searched key as the console names it: `SHORT_NAMES`, else its last dotted part."""
    return SHORT_NAMES.get(key, key.split(".")[-1])


def _k(rate: float) -> str:
    """A rate to three significant digits or so: 123k, 45.7k, 9,876."""
    if rate >= 100_000:
        return f"{rate / 1000:,.0f}k"
    return f"{rate / 1000:.1f}k" if rate >= 10_000 else f"{rate:,.0f}"


def _confirmed(trial: TrialRecord) -> str:
    """The confirmation stage's ratio to the reference: median (lowest-highest round)."""
    if not trial.confirmed_speedup:
        return "-"
    low, median, high = trial.confirmed_speedup
    return f"{median:.2f}x ({low:.2f}-{high:.2f})"


def _throughput(trial: TrialRecord) -> str:
    """samples/s over the timed stretch, and the middle half of its windows' rates: two trials whose
    ranges overlap were not told apart by this measurement."""
    if not trial.samples_per_s:
        return "-"
    if not trial.samples_per_s_quartiles or (trial.windows or 0) < 3:
        return f"{trial.samples_per_s:,.0f}"
    low, _, high = trial.samples_per_s_quartiles
    return f"{trial.samples_per_s:,.0f} ({low:,.0f}-{high:,.0f})"


def results_json(record: SweepRecord) -> dict[str, Any]:
    best = record.best()
    return {
        "sweep_id": record.sweep_id,
        "status": record.status,
        "memory_ceiling_bytes": record.memory_ceiling_bytes,
        "quality_tolerance": record.quality_tolerance,
        "reference_samples_per_s": record.reference_samples_per_s,
        "quality_metric": record.quality_metric,
        "quality_direction": record.quality_direction,
        "reference_quality": record.reference_quality,
        "counts": record.counts(),
        "best": best.to_dict() if best else None,
        "speedup_over_reference": speedup(best, record) if best else None,
        "pareto_front": [t.trial_id for t in pareto_front(record.trials)],
        "mlflow_run_id": record.mlflow_run_id,
        "trials": [t.to_dict() for t in ranked(record)],
    }


def speedup(trial: TrialRecord, record: SweepRecord) -> float | None:
    if trial.samples_per_s and record.reference_samples_per_s:
        return trial.samples_per_s / record.reference_samples_per_s
    return None


def _speedup(trial: TrialRecord, record: SweepRecord) -> str:
    ratio = speedup(trial, record)
    return f"{ratio:.2f}×" if ratio is not None else "-"


def _other_metrics(trial: TrialRecord, record: SweepRecord) -> str:
    """The trial's eval metrics besides the quality metric (a click model's AUC, an LM's loss)."""
    others = [
        f"{printable(name)}={value:.4g}" for name, value in trial.metrics.items() if name != record.quality_metric
    ]
    return ", ".join(others) or "-"


def _quality(trial: TrialRecord, record: SweepRecord) -> str:
    """The trial's quality metric against the reference's: its change as a share of the reference."""
    if trial.quality is None or not record.reference_quality:
        return "-"
    delta = (trial.quality - record.reference_quality) / abs(record.reference_quality)
    return f"{delta:+.1%}"
