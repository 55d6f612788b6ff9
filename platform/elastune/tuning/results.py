"""What a finished sweep says: the top configs against the reference, as rows a table or a script
can use. Shared by `elastune sweep` (its closing summary), `elastune results` (read back from
MLflow) and the web UI (its legend, its quality words and its next step).

Every figure says what it is: the table ranks by the confirmed ratio where the confirmation stage
ran (tracking/ranking.py), and shows it beside the search's measured one, in columns named so,
with `legend` saying how each was measured; quality against the reference reads "better" or
"worse" in the metric's own direction; a trial stopped early shows the running mean it reported
(not a steady rate) and says so; a workload that counts its own units (an LM's tokens) shows
their rate too; and searched floats are shown to three significant digits (`shown_value`).

A record read back from the store holds whatever its writers put there: the rows carry its text
(ids, statuses, parameters) through `printable`, so a stored line break or escape sequence neither
stacks a cell nor reaches the terminal; the console still escapes rich's markup when it prints.
"""

from __future__ import annotations

import shlex
from typing import Any

from elastune.text import printable
from elastune.tracking.ranking import Ranking, has_interval, same_as_reference
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front, shown_value, trial_label
from elastune.units import human_bytes, short_bytes

__all__ = [
    "COMPACT_COLUMNS",
    "SUMMARY_COLUMNS",
    "compact_rows",
    "legend",
    "next_step",
    "quality_change",
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
    "measured ×ref",
    "confirmed ×ref",
    "peak (measured)",
    "predicted",
    "quality vs ref",
    "other metrics",
)
# the default: fits a 100-column terminal, figures stacked in a cell (a trial takes a few lines)
# (two-line headers keep narrow figures' columns narrow): the search's measured samples/s and its
# ratio to the reference's, beside the confirmed ratio
COMPACT_COLUMNS = ("#", "trial", "config", "measured\nsamples/s", "confirmed\n×ref", "peak", "quality\nvs ref")
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
RUNNING_MEAN = "running mean"  # what a trial stopped early reported: its mean since warm-up, not a steady rate


def ranked(record: SweepRecord) -> list[TrialRecord]:
    """Feasible trials in rank order (`SweepRecord.ranking`), then the rest (so a reader sees why
    they lost)."""
    rest = sorted((t for t in record.trials if not t.feasible), key=lambda t: (t.status, t.number))
    return record.ranking().order + rest


def legend(record: SweepRecord) -> str:
    """One line under the table: which figure ranks, and how each speed-up was measured."""
    ranking = record.ranking()
    measured = "measured ×ref: the search's single run ÷ the reference's"
    if ranking.by == "measured":
        return f"ranked by measured samples/s (no confirmation ran) · {measured}"
    counted = [t.confirmed_rounds for t in record.trials if t.confirmed_rounds]
    rounds = "the rounds" if not counted else "one round" if max(counted) == 1 else f"{max(counted)} rounds"
    said = (
        f"ranked by confirmed ×ref: median over {rounds} of a run ÷ the reference's run just before it "
        f"(under it: lowest-highest) · {measured}"
    )
    if ranking.tied:
        said += " · tie: ranges overlap, not told apart on this machine; lower peak memory ranks first"
    return said


def next_step(record: SweepRecord) -> tuple[str, str | None] | None:
    """What to do with the sweep in its state, and the command (quoted for a shell), if one works:
    train its best config once it finished (best_config.yaml exists then), resume it where it was
    interrupted or its driver is gone, wait while it runs (its artifacts come at its end)."""
    sweep_id = shlex.quote(printable(record.sweep_id))
    if record.status == "finished" and record.best() is not None:
        return "best config (MLflow artifact best_config.yaml):", f"elastune train --from-sweep {sweep_id}"
    if record.status in {"interrupted", "stale"}:
        gone = "was interrupted" if record.status == "interrupted" else "stopped without a word (its driver is gone)"
        return (
            f"the sweep {gone}: no best_config.yaml until it finishes; resume it where its state folder is:",
            f"elastune sweep --resume {sweep_id}",
        )
    if record.status == "running":
        return "still running: these are its figures so far; best_config.yaml is written when it finishes", None
    return None


def quality_change(trial: TrialRecord, record: SweepRecord) -> str | None:
    """The trial's quality metric against the reference's, in words that carry the metric's
    direction: `1.4% better`, `2.0% worse`, `same` (under 0.05% apart); None without both figures."""
    if trial.quality is None or not record.reference_quality:
        return None
    delta = (trial.quality - record.reference_quality) / abs(record.reference_quality)
    gain = -delta if record.quality_direction == "min" else delta
    if round(abs(gain), 3) == 0:
        return "same"
    return f"{abs(gain):.1%} {'better' if gain > 0 else 'worse'}"


def summary_rows(record: SweepRecord, top: int | None = None) -> list[tuple[str, ...]]:
    """One row per trial (the `top` first of `ranked`; None: all), every figure in its column."""
    ranking = record.ranking()
    rows: list[tuple[str, ...]] = []
    for rank, trial in enumerate(ranked(record)[:top], start=1):
        rows.append(
            (
                _rank(rank, trial, ranking),
                printable(trial.trial_id),
                printable(trial.status),
                ", ".join(printable(f"{k.split('.')[-1]}={shown_value(v)}") for k, v in trial.params.items())
                or "(reference)",
                _throughput(trial) + _units(trial),
                _speedup(trial, record),
                _inline(_confirmed(trial, record)),
                human_bytes(trial.peak_memory_bytes) if trial.peak_memory_bytes else "-",
                human_bytes(trial.estimated_peak_bytes) if trial.estimated_peak_bytes else "-",
                _quality(trial, record),
                _other_metrics(trial, record),
            )
        )
    return rows


def compact_rows(record: SweepRecord, top: int | None = None) -> list[tuple[str, ...]]:
    """The same trials as `summary_rows`, stacked to fit 100 columns: the rank (or why a trial lost),
    its config one parameter a line, the search's measured samples/s with its ratio to the
    reference's and its windows' middle half (a workload's own units/s under it) beside the
    confirmed ratio, measured over predicted peak, and its quality against the reference's."""
    ranking = record.ranking()
    rows: list[tuple[str, ...]] = []
    for rank, trial in enumerate(ranked(record)[:top], start=1):
        rate = [f"{trial.samples_per_s:,.0f}" if trial.samples_per_s else "-"]
        ratio = speedup(trial, record)
        if trial.samples_per_s and trial.status == "pruned":
            rate += RUNNING_MEAN.split()  # what it reported when stopped; the others' are steady rates
        if ratio is not None:
            rate.append(f"{ratio:.2f}× ref")
        if trial.status != "pruned" and trial.samples_per_s_quartiles and (trial.windows or 0) >= 3:
            low, _, high = trial.samples_per_s_quartiles
            rate.append(f"{_k(low)}-{_k(high)}")
        if trial.units and trial.units_per_s is not None:  # an LM's real tokens/s: the rate, then its unit
            rate += [_k(trial.units_per_s), f"{printable(trial.units)}/s"]
        peak = short_bytes(trial.peak_memory_bytes) if trial.peak_memory_bytes else "-"
        predicted = f"\npred. {short_bytes(trial.estimated_peak_bytes)}" if trial.estimated_peak_bytes else ""
        rows.append(
            (
                _rank(rank, trial, ranking, lost=printable(trial.status)),
                printable(trial_label(trial)),
                "\n".join(printable(f"{short_name(k)}={shown_value(v)}") for k, v in trial.params.items())
                or "(reference)",
                "\n".join(rate),
                _stacked(_confirmed(trial, record)),
                peak + predicted,
                _quality(trial, record).replace(" ", "\n"),  # `1.4%` over `better`
            )
        )
    return rows


def short_name(key: str) -> str:
    """A searched key as the console names it: `SHORT_NAMES`, else its last dotted part."""
    return SHORT_NAMES.get(key, key.split(".")[-1])


def _rank(rank: int, trial: TrialRecord, ranking: Ranking, lost: str = "-") -> str:
    """The rank, `2 tie` for one the confirmation could not tell from the best, or why it lost."""
    if not trial.feasible:
        return lost
    return f"{rank} tie" if any(t.trial_id == trial.trial_id for t in ranking.tied) else str(rank)


def _k(rate: float) -> str:
    """A rate to three significant digits or so: 123k, 45.7k, 9,876."""
    if rate >= 100_000:
        return f"{rate / 1000:,.0f}k"
    return f"{rate / 1000:.1f}k" if rate >= 10_000 else f"{rate:,.0f}"


def _confirmed(trial: TrialRecord, record: SweepRecord) -> tuple[str, str]:
    """The confirmation stage's ratio to the reference, its median, and what stands under it: the
    lowest-highest round, or why there is no range (the reference: 1 by definition; one round; the
    reference's own config, never measured against itself)."""
    if trial.trial_id != "reference" and same_as_reference(trial, record.reference()):
        return "= ref", "its config"
    if not trial.confirmed_speedup:
        return "-", ""
    low, median, high = trial.confirmed_speedup
    if trial.trial_id == "reference":
        return f"{median:.2f}×", "ref"
    if has_interval(trial):
        return f"{median:.2f}×", f"{low:.2f}-{high:.2f}"
    return f"{median:.2f}×", "1 round" if trial.confirmed_rounds == 1 else ""


def _stacked(figure: tuple[str, str]) -> str:
    return f"{figure[0]}\n{figure[1]}" if figure[1] else figure[0]


def _inline(figure: tuple[str, str]) -> str:
    return f"{figure[0]} ({figure[1]})" if figure[1] else figure[0]


def _throughput(trial: TrialRecord) -> str:
    """samples/s over the timed stretch, and the middle half of its windows' rates: two trials whose
    ranges overlap were not told apart by this measurement. A trial stopped early reported the
    running mean of its steps so far, and is shown so."""
    if not trial.samples_per_s:
        return "-"
    if trial.status == "pruned":
        return f"{trial.samples_per_s:,.0f} ({RUNNING_MEAN})"
    if not trial.samples_per_s_quartiles or (trial.windows or 0) < 3:
        return f"{trial.samples_per_s:,.0f}"
    low, _, high = trial.samples_per_s_quartiles
    return f"{trial.samples_per_s:,.0f} ({low:,.0f}-{high:,.0f})"


def _units(trial: TrialRecord) -> str:
    """A workload's own throughput (an LM's real tokens/s) after its samples/s, where it counts units."""
    if not trial.units or trial.units_per_s is None:
        return ""
    return f"; {trial.units_per_s:,.0f} {printable(trial.units)}/s"


def results_json(record: SweepRecord) -> dict[str, Any]:
    ranking = record.ranking()
    best = ranking.best
    step = next_step(record)
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
        "ranked_by": ranking.by,  # confirmed: the confirmation's median ratio; measured: the search's samples/s
        "legend": legend(record),
        # the trials the confirmation could not tell from the best (the best first); the reference's twins
        "tied_with_best": [t.trial_id for t in ranking.tied],
        "same_as_reference": [t.trial_id for t in ranking.twins],
        "next_step": {"said": step[0], "command": step[1]} if step else None,
        "pareto_front": [t.trial_id for t in pareto_front(record.trials)],
        "mlflow_run_id": record.mlflow_run_id,
        "trials": [t.to_dict() for t in ranked(record)],
    }


def speedup(trial: TrialRecord, record: SweepRecord) -> float | None:
    """The search's measured samples/s over the reference's (each a single run)."""
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
    """`quality_change`, or `ref` on the reference's own row."""
    if trial.trial_id == "reference":
        return "ref"
    return quality_change(trial, record) or "-"
