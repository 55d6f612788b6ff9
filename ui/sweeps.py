"""Sweeps as the pages show them, read back from MLflow through elastune.tracking.mlflow.

Everything a page needs is derived here once (Pareto front, best trial, the peak each trial is drawn
at, MLflow links), so the browser only draws, and a script calling the API gets the same figures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from elastune.errors import InputError
from elastune.tracking.artifacts import best_config_yaml, trials_csv
from elastune.tracking.ranking import Ranking, has_interval
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front, shown_params
from elastune.tuning.results import legend, next_step, quality_change, speedup

__all__ = ["StoreUnavailable", "SweepReader", "UnknownSweep", "best_config_yaml", "plotted_peak", "trials_csv"]


FULL_SUMMARIES = 30  # sweeps listed with their trial counts


class UnknownSweep(Exception):
    """No sweep with this id in the store (HTTP 404)."""


class StoreUnavailable(Exception):
    """The MLflow store cannot be read (HTTP 503 with this message)."""


class SweepReader:
    def __init__(self, tracking_uri: str | None) -> None:
        self.tracking_uri = tracking_uri

    def _mlflow(self) -> Any:
        from elastune.tracking import mlflow as tracking

        return tracking

    def resolved_uri(self) -> str:
        return str(self._mlflow().resolve_tracking_uri(self.tracking_uri))

    def _guard(self, exc: Exception) -> StoreUnavailable:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return StoreUnavailable(
            f"Cannot read the MLflow store at {self.tracking_uri or 'the default location'} ({first[:300]}). "
            "Check --tracking-uri, or start the MLflow server it names."
        )

    def list(self) -> list[dict[str, Any]]:
        try:
            records = self._mlflow().list_sweeps(self.tracking_uri)
        except InputError as exc:
            raise StoreUnavailable(str(exc)) from exc
        except Exception as exc:  # mlflow's own errors: server down, bad URI, unreadable store
            raise self._guard(exc) from exc
        # list_sweeps leaves trials out (one query); counts and the best figure need them, so the
        # newest sweeps are read in full and older ones listed without (null counts).
        out = []
        for index, record in enumerate(records):
            if index < FULL_SUMMARIES and not record.trials:
                with contextlib.suppress(UnknownSweep):  # deleted between the two reads: list what we have
                    record = self.load(record.sweep_id)
            out.append(self.summary(record, complete=index < FULL_SUMMARIES))
        return out

    def load(self, sweep_id: str) -> SweepRecord:
        try:
            record: SweepRecord = self._mlflow().load_sweep(sweep_id, self.tracking_uri)
        except InputError as exc:
            raise UnknownSweep(str(exc)) from exc
        except Exception as exc:
            raise self._guard(exc) from exc
        return record

    def run_url(self, run_id: str | None) -> str | None:
        if not run_id:
            return None
        try:
            url = self._mlflow().mlflow_run_url(self.tracking_uri, run_id)
        except Exception:  # a link is a convenience: no link beats a failed page
            return None
        return str(url) if url else None

    def summary(self, record: SweepRecord, complete: bool = True) -> dict[str, Any]:
        ranking = record.ranking()
        best = ranking.best
        return {
            "sweep_id": record.sweep_id,
            "name": str(record.spec.get("name") or record.sweep_id),
            "description": str(record.spec.get("description") or ""),
            "status": record.status,
            "started_at": record.started_at,
            "ended_at": record.ended_at,
            "memory_ceiling_bytes": record.memory_ceiling_bytes,
            "trial_count": len(record.trials) if complete else None,
            "counts": record.counts() if complete else None,
            "best_samples_per_s": best.samples_per_s if best else None,
            # a workload that also counts its own units (an LM's real tokens): their name and best rate
            "units": next((t.units for t in record.trials if t.units), None),
            "best_units_per_s": best.units_per_s if best else None,
            "best_trial_id": best.trial_id if best else None,
            "best_number": best.number if best else None,
            # what ranks the best, and its figures: the confirmed ratio where the confirmation ran
            # (the headline shows it then), else the search's measured samples/s
            "ranked_by": ranking.by,
            "best_confirmed_speedup": best.confirmed_speedup if best else None,
            "best_measured_speedup": speedup(best, record) if best else None,
            "job_id": record.job_id,
            "mlflow_run_id": record.mlflow_run_id,
        }

    def detail(self, sweep_id: str) -> dict[str, Any]:
        record = self.load(sweep_id)
        front = {t.trial_id for t in pareto_front(record.trials)}
        ranking = record.ranking()
        best = ranking.best
        trials = [self._trial(t, front, record, ranking) for t in sorted(record.trials, key=lambda t: t.number)]
        step = next_step(record)
        return {
            **self.summary(record),
            "spec": record.spec,
            "quality_tolerance": record.quality_tolerance,
            "quality_metric": record.quality_metric,
            "quality_direction": record.quality_direction,
            "reference_quality": record.reference_quality,
            "reference_samples_per_s": record.reference_samples_per_s,
            "mlflow_url": self.run_url(record.mlflow_run_id),
            "tracking_uri": self.tracking_uri,
            "parameters": _param_names(record.spec, record.trials),
            "pareto_trial_ids": [t.trial_id for t in pareto_front(record.trials)],
            "best": self._trial(best, front, record, ranking) if best else None,
            "best_config": best.config if best else None,
            # the table's legend (which figure ranks, how each was measured), the trials the
            # confirmation could not tell from the best, and what to do next in the sweep's state
            "legend": legend(record),
            "tied_with_best": [t.trial_id for t in ranking.tied],
            "next_step": {"said": step[0], "command": step[1]} if step else None,
            "trials": trials,
        }

    def _trial(self, trial: TrialRecord, front: set[str], record: SweepRecord, ranking: Ranking) -> dict[str, Any]:
        peak, source = plotted_peak(trial)
        order = [t.trial_id for t in ranking.order]
        quality = quality_change(trial, record) if trial.trial_id != "reference" else None
        return {
            **trial.to_dict(),
            "feasible": trial.feasible,
            "plot_peak_bytes": peak,
            "plot_peak_source": source,
            "pareto": trial.trial_id in front,
            "best": ranking.best is not None and trial.trial_id == ranking.best.trial_id,
            # its place in the ranking (None: not feasible), and whether it ties with the best
            "rank": order.index(trial.trial_id) + 1 if trial.trial_id in order else None,
            "tie": any(t.trial_id == trial.trial_id for t in ranking.tied),
            "measured_speedup": speedup(trial, record),
            "confirmed_range": has_interval(trial),  # a range of two rounds or more to show
            "same_as_reference": any(t.trial_id == trial.trial_id for t in ranking.twins),
            "running_mean": trial.status == "pruned",  # its samples/s: the mean of its steps so far
            "params_shown": shown_params(trial.params),  # floats to three significant digits
            "quality_change": quality,  # "1.4% better": in the metric's own direction
            "quality_better": None if quality in (None, "same") else quality.endswith("better"),
            "mlflow_url": self.run_url(trial.mlflow_run_id),
        }


def plotted_peak(trial: TrialRecord) -> tuple[int | None, str | None]:
    """The peak memory the charts draw a trial at, and where it comes from: the measured peak, or,
    for a trial that has none (ASHA stopped it before its peak was read), the estimator's prediction,
    so a trial with a throughput is never left out of the plot. (None, None): no figure at all."""
    if trial.peak_memory_bytes is not None:
        return trial.peak_memory_bytes, "measured"
    if trial.estimated_peak_bytes is not None:
        return trial.estimated_peak_bytes, "predicted"
    return None, None


def _param_names(spec: Mapping[str, Any], trials: Iterable[TrialRecord]) -> list[str]:
    """The searched parameters in the spec's order, then any other a trial carries (sorted)."""
    declared = spec.get("parameters")
    names = list(declared) if isinstance(declared, Mapping) else []
    extra = sorted({key for trial in trials for key in trial.params} - set(names))
    return names + extra
