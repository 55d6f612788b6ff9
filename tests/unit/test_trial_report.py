"""A trial's reports travel through Ray Tune as dicts: `TrialReport` is the one place their keys
are spelled. What a trial sends reads back as the same report, and a recorded trial replayed on
resume becomes the same record again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.report import TrialReport, constraint_values, final_report, oom_report, progress_report
from elastune.workloads.quality import LOGLOSS, QualityMetric

LIMITS = {"ceiling": 1000, "tolerance": 0.02, "reference_quality": 0.5, "report_every": 1, "estimate": 900}


def result(peak: int = 800, logloss: float = 0.505) -> SimpleNamespace:
    metrics = {"logloss": logloss, "auc": 0.7, "baseline_logloss": 0.69}
    return SimpleNamespace(
        samples=4096,
        steps=8,
        samples_per_s=1234.5,
        window_samples_per_s=[0.8, 1.0, 1.1, 1.3, 0.9],
        warmup_windows=0,
        units_per_s=None,
        units=None,
        peak_memory_bytes=peak,
        peak_memory_kind="cpu_rss_hwm",
        metrics=metrics,
        quality_metric="logloss",
        quality_direction="min",
        quality=logloss,
        oom_retries=1,
        train_loss=0.498,
    )


def ranked_result(recall: float) -> SimpleNamespace:
    """A workload that declares a higher-is-better quality metric."""
    return SimpleNamespace(
        samples=4096, steps=8, samples_per_s=1.0, units_per_s=40.0, units="tokens", peak_memory_bytes=800,
        peak_memory_kind="cpu_rss_hwm",
        metrics={"recall": recall}, quality_metric="recall", quality_direction="max", quality=recall,
        oom_retries=0, window_samples_per_s=[], warmup_windows=0, train_loss=2.5,
    )  # fmt: skip


def test_a_final_report_reads_back_as_itself_among_tunes_own_keys() -> None:
    sent = final_report(result(), LIMITS)
    tune_result = {**sent.to_metrics(), "training_iteration": 3, "time_total_s": 1.5, "done": True, "pid": 7}
    assert TrialReport.from_metrics(tune_result) == sent
    assert sent.final and sent.status == "ok" and sent.quality_ok is True
    assert (sent.samples_per_s_quartiles, sent.windows) == ([0.9, 1.0, 1.1], 5)  # the windows' spread
    assert sent.loss == 0.498  # the run's training loss: the sweep's unlearned-reference warning reads it
    assert sent.constraints is not None and sent.constraints.memory < 0 and sent.constraints.quality < 0


def test_the_sweeps_metric_and_ashas_clock_are_in_every_report() -> None:
    # Tune refuses a result without the sweep's metric; ASHA reads its time attribute from each.
    progress = SimpleNamespace(samples=512, step=2, steps=8, loss=0.6, samples_per_s=None)
    for report in (progress_report(progress), final_report(result(), LIMITS), oom_report("out of memory")):
        metrics = report.to_metrics()
        assert "samples_per_s" in metrics and "progress_pct" in metrics
    assert progress_report(progress).to_metrics()["samples_per_s"] == 0.0  # warm-up: no rate yet
    assert progress_report(SimpleNamespace(samples=1, step=8, steps=8, loss=0.1, samples_per_s=1.0)).progress_pct == 99


def test_constraints_flattened_by_tune_are_read() -> None:
    sent = final_report(result(peak=1500), LIMITS)
    flat = {k: v for k, v in sent.to_metrics().items() if k != "elastune_constraints"}
    assert sent.constraints is not None
    flat |= {f"elastune_constraints/{k}": v for k, v in sent.constraints.model_dump().items()}
    back = TrialReport.from_metrics(flat)
    assert back.constraints == sent.constraints and back.status == "infeasible"


@pytest.mark.parametrize(
    ("last", "status"),
    [
        (final_report(result(), LIMITS), "ok"),
        (final_report(result(peak=2000), LIMITS), "infeasible"),
        (oom_report("out of memory"), "oom"),
        (progress_report(SimpleNamespace(samples=512, step=2, steps=8, loss=0.6, samples_per_s=10.0)), "pruned"),
        (TrialReport(), "failed"),
    ],
)
def test_the_last_report_decides_the_records_status(last: TrialReport, status: str) -> None:
    record = TrialReport.from_metrics(last.to_metrics()).to_record("t1", 3, {"batch.micro": 8}, {})
    assert record.status == status
    assert TrialRecord.from_dict(record.to_dict()) == record  # every field of the type the store reads back
    assert (record.error == "the trial reported nothing") is (status == "failed")


@pytest.mark.parametrize(
    "last",
    [
        final_report(result(), LIMITS),
        final_report(result(peak=2000), LIMITS),
        final_report(result(logloss=0.9), LIMITS),
        oom_report("out of memory"),
        progress_report(SimpleNamespace(samples=512, step=2, steps=8, loss=0.6, samples_per_s=10.0)),
    ],
)
def test_a_replayed_trial_is_recorded_and_told_as_before(last: TrialReport) -> None:
    recorded = last.to_record("t1", 3, {"batch.micro": 8}, {"steps": 8})
    again = TrialReport.replay(recorded, LIMITS["ceiling"], LIMITS["tolerance"], LIMITS["reference_quality"])
    assert again.to_record("t1", 3, {"batch.micro": 8}, {"steps": 8}) == recorded
    # the searcher hears the same constraint values and metric; ASHA the same clock for a trial that
    # ended (a record keeps no clock: a pruned one is replayed just short of the end, at 99)
    assert again.constraints == last.constraints
    assert (again.final, again.samples_per_s) == (last.final, last.samples_per_s)
    assert again.progress_pct == (last.progress_pct if last.final else 99)


def test_a_report_with_a_wrong_type_is_refused() -> None:
    with pytest.raises(ValueError, match="peak_memory_bytes"):
        TrialReport.from_metrics({"elastune_final": True, "peak_memory_bytes": "lots"})


def test_constraint_values_without_a_reference_leave_quality_open() -> None:
    assert constraint_values(500, 0.7, LOGLOSS, 1000, 0.02, None) == (-0.5, 0.0, None)
    assert constraint_values(500, 0.7, LOGLOSS, None, None, None) == (0.0, 0.0, None)


@pytest.mark.parametrize(
    ("metric", "value", "reference", "ok"),
    [
        (LOGLOSS, 0.509, 0.5, True),  # 1.8% worse: within 2%
        (LOGLOSS, 0.511, 0.5, False),
        (QualityMetric("recall", "max"), 0.791, 0.8, True),  # 1.1% lower: within 2%
        (QualityMetric("recall", "max"), 0.783, 0.8, False),
        (QualityMetric("recall", "max"), 0.95, 0.8, True),  # better is always fine
        (QualityMetric("loglik", "max"), -1.01, -1.0, True),  # a negative metric: 2% of |ref|
        (QualityMetric("loglik", "max"), -1.03, -1.0, False),
        (LOGLOSS, float("nan"), 0.5, False),  # a diverged model
    ],
)
def test_the_tolerance_follows_the_metrics_direction(
    metric: QualityMetric, value: float, reference: float, ok: bool
) -> None:
    _, over, held = constraint_values(500, value, metric, 1000, 0.02, reference)
    assert held is ok
    assert (over <= 0) is ok  # the searcher's constraint agrees with the verdict


def test_a_higher_is_better_metric_decides_quality_and_reads_back_flattened() -> None:
    good, bad = (final_report(ranked_result(r), {**LIMITS, "reference_quality": 0.8}) for r in (0.81, 0.7))
    assert good.quality_ok is True and bad.quality_ok is False
    assert (good.quality_metric, good.quality_direction, good.metrics) == ("recall", "max", {"recall": 0.81})
    flat = {k: v for k, v in bad.to_metrics().items() if k != "metrics"} | {"metrics/recall": 0.7}
    back = TrialReport.from_metrics(flat)
    assert back == bad
    record = back.to_record("t1", 0, {}, {})
    replayed = TrialReport.replay(record, 1000, 0.02, 0.8, QualityMetric("recall", "max"))
    assert replayed.constraints == bad.constraints and record.quality == 0.7


def test_a_sweep_record_from_before_declared_metrics_reads_as_log_loss() -> None:
    old_trial = {"trial_id": "t1", "number": 0, "status": "ok", "params": {}, "config": {}, "val_logloss": 0.52}
    old = {"sweep_id": "s", "spec": {}, "status": "finished", "reference_logloss": 0.5, "trials": [old_trial]}
    record = SweepRecord.from_dict(old)
    assert (record.quality_metric, record.quality_direction, record.reference_quality) == ("logloss", "min", 0.5)


def test_the_figures_copied_between_report_and_record_exist_on_both() -> None:
    from dataclasses import fields

    from elastune.tracking.records import TrialRecord
    from elastune.tuning.report import _AS_RECORDED

    assert set(_AS_RECORDED) <= set(TrialReport.model_fields) & {f.name for f in fields(TrialRecord)}


def test_warm_up_windows_are_left_out_of_the_reported_spread() -> None:
    """The loop marks its leading slow windows as warm-up (`warmup_windows`); the report's
    quartiles and window count cover the rest only."""
    warm = result()
    warm.warmup_windows = 1  # the 0.8 window
    sent = final_report(warm, LIMITS)
    assert sent.windows == 4
    assert sent.samples_per_s_quartiles == pytest.approx([0.975, 1.05, 1.15])  # of [1.0, 1.1, 1.3, 0.9]
