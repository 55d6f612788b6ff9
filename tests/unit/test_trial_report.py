"""A trial's reports travel through Ray Tune as dicts: `TrialReport` is the one place their keys
are spelled. What a trial sends reads back as the same report, and a recorded trial replayed on
resume becomes the same record again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from elastune.tuning.report import TrialReport, constraint_values, final_report, oom_report, progress_report

LIMITS = {"ceiling": 1000, "tolerance": 0.02, "reference_logloss": 0.5, "report_every": 1, "estimate": 900}


def result(peak: int = 800, logloss: float = 0.505) -> SimpleNamespace:
    return SimpleNamespace(
        samples=4096,
        steps=8,
        samples_per_s=1234.5,
        peak_memory_bytes=peak,
        peak_memory_kind="cpu_rss_hwm",
        val_logloss=logloss,
        val_auc=0.7,
        oom_retries=1,
    )


def test_a_final_report_reads_back_as_itself_among_tunes_own_keys() -> None:
    sent = final_report(result(), LIMITS)
    tune_result = {**sent.to_metrics(), "training_iteration": 3, "time_total_s": 1.5, "done": True, "pid": 7}
    assert TrialReport.from_metrics(tune_result) == sent
    assert sent.final and sent.status == "ok" and sent.quality_ok is True
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
    again = TrialReport.replay(recorded, LIMITS["ceiling"], LIMITS["tolerance"], LIMITS["reference_logloss"])
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
    assert constraint_values(500, 0.7, 1000, 0.02, None) == (-0.5, 0.0, None)
    assert constraint_values(500, 0.7, None, None, None) == (0.0, 0.0, None)


def test_the_figures_copied_between_report_and_record_exist_on_both() -> None:
    from dataclasses import fields

    from elastune.tracking.records import TrialRecord
    from elastune.tuning.report import _AS_RECORDED

    assert set(_AS_RECORDED) <= set(TrialReport.model_fields) & {f.name for f in fields(TrialRecord)}
