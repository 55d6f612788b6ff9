"""Numbers that explain themselves (issue 37, points 2, 3 and 9): which figure ranks and how each
was measured, ties the machine cannot break, a proposal of the reference's own config, quality in
words that carry the metric's direction, running means said so, an LM's tokens/s, parameters to
three significant digits, MLflow statuses and names a reader does not mistake, and no pointer to
a best_config.yaml that does not exist yet. Every expected value here is worked out by hand."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.errors import InputError
from elastune.tracking.artifacts import best_config_yaml
from elastune.tracking.mlflow import SweepTracker, artifact_path, load_sweep, trial_run_name
from elastune.tracking.ranking import has_interval, overlaps, rank, same_as_reference
from elastune.tracking.records import SweepRecord, TrialRecord, shown_value
from elastune.tuning.confirm import confirm_best
from elastune.tuning.display import step_line
from elastune.tuning.outcome import outcome
from elastune.tuning.progress import trial_line
from elastune.tuning.results import compact_rows, legend, next_step, quality_change, results_json, summary_rows
from elastune.tuning.spec import Confirm
from elastune.tuning.sweep import reference_report
from elastune.ui import UISettings, create_app
from fastapi.testclient import TestClient
from mlflow import MlflowClient

from tests.unit.test_tracking_mlflow import child_runs

MIB = 2**20
REFERENCE_CONFIG = {"batch": {"micro": 128}, "embedding": {"strategy": "full"}, "threads": 1}


def trial(
    number: int,
    sps: float | None = 1000.0,
    *,
    status: str = "ok",
    confirmed: list[float] | None = None,
    rounds: int | None = None,
    peak_mib: float | None = 100.0,
    params: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    **figures: Any,
) -> TrialRecord:
    micro = 16 * (number + 1)
    record = TrialRecord(
        trial_id="reference" if number < 0 else f"t{number}",
        number=number,
        status=status,  # type: ignore[arg-type]
        params={"batch.micro": micro} if params is None else params,
        config={"batch": {"micro": micro}, "embedding": {"strategy": "full"}, "threads": 1}
        if config is None
        else config,
        samples_per_s=sps,
        confirmed_speedup=confirmed,
        confirmed_rounds=rounds,
        peak_memory_bytes=None if peak_mib is None else int(peak_mib * MIB),
        quality_ok=None if number < 0 else True,
    )
    for key, value in figures.items():
        setattr(record, key, value)
    return record


def reference(sps: float | None = 1000.0, **kwargs: Any) -> TrialRecord:
    kwargs.setdefault("config", dict(REFERENCE_CONFIG))
    return trial(-1, sps, params={"batch.micro": 128}, **kwargs)


def twin(number: int, sps: float, **kwargs: Any) -> TrialRecord:
    """A proposal whose resolved config is the reference's own."""
    return trial(
        number, sps, params={"batch.micro": 128, "embedding.strategy": "full"}, config=dict(REFERENCE_CONFIG), **kwargs
    )


def sweep(*trials: TrialRecord, status: str = "finished", **fields: Any) -> SweepRecord:
    record = SweepRecord(sweep_id="sw-37", spec={}, status=status, trials=list(trials))  # type: ignore[arg-type]
    record.reference_samples_per_s = next((t.samples_per_s for t in trials if t.trial_id == "reference"), None)
    for key, value in fields.items():
        setattr(record, key, value)
    return record


# ---- what ranks: the ranking policy (tracking/ranking.py) ----------------------------------------


def test_overlapping_confirmed_ranges_are_a_tie_broken_by_lower_peak_memory() -> None:
    # the case: trial 0 at 2.08-3.43x, trial 2 at 1.95-2.23x; 0 has the higher median but
    # the ranges overlap, so the machine told them nowhere apart: the leaner one (2) ranks first
    ranking = rank(
        [
            reference(confirmed=[1.0, 1.0, 1.0]),
            trial(0, 2200.0, confirmed=[2.08, 2.60, 3.43], rounds=3, peak_mib=60),
            trial(1, 2100.0, confirmed=[1.10, 1.20, 1.30], rounds=3, peak_mib=10),
            trial(2, 1900.0, confirmed=[1.95, 2.10, 2.23], rounds=3, peak_mib=51),
        ]
    )
    assert [t.trial_id for t in ranking.tied] == ["t2", "t0"]
    assert [t.trial_id for t in ranking.order] == ["t2", "t0", "t1", "reference"]
    assert ranking.by == "confirmed" and ranking.best is not None and ranking.best.trial_id == "t2"


def test_ranges_that_do_not_overlap_rank_by_the_median_whatever_the_memory() -> None:
    ranking = rank(
        [
            reference(confirmed=[1.0, 1.0, 1.0]),
            trial(0, 900.0, confirmed=[2.30, 2.40, 2.60], rounds=3, peak_mib=90),
            trial(1, 5000.0, confirmed=[1.50, 1.70, 2.29], rounds=3, peak_mib=10),
            trial(2, 9000.0),  # the search's fastest, never confirmed: after the confirmed ones
        ]
    )
    assert [t.trial_id for t in ranking.order] == ["t0", "t1", "reference", "t2"] and ranking.tied == []
    assert overlaps([1.0, 2.0, 3.0], [3.0, 3.5, 4.0]) and not overlaps([1.0, 2.0, 2.99], [3.0, 3.5, 4.0])


def test_the_references_own_config_is_never_crowned_over_the_reference() -> None:
    ref = reference(sps=1000.0)
    noisy_twin = twin(4, 1060.0)  # measured 6% "faster" than itself: noise
    assert same_as_reference(noisy_twin, ref) and not same_as_reference(trial(1), ref)
    assert not same_as_reference(trial(4, config={}, params={}), reference(config={}))  # nothing to compare
    ranking = rank([ref, noisy_twin, trial(1, 900.0)])
    assert [t.trial_id for t in ranking.order] == ["reference", "t4", "t1"]
    assert [t.trial_id for t in ranking.twins] == ["t4"]
    # confirmed against itself by an older release: still not a gain, and never a confirmed candidate
    ranking = rank([reference(confirmed=[1.0, 1.0, 1.0]), twin(4, 1060.0, confirmed=[1.06, 1.06, 1.06], rounds=1)])
    assert ranking.best is not None and ranking.best.trial_id == "reference"


def test_a_range_needs_two_rounds() -> None:
    assert not has_interval(trial(0, confirmed=[1.3, 1.3, 1.3], rounds=1))
    assert has_interval(trial(0, confirmed=[1.2, 1.3, 1.4], rounds=3))
    assert not has_interval(reference(confirmed=[1.0, 1.0, 1.0]))  # 1 by definition
    assert has_interval(trial(0, confirmed=[1.2, 1.3, 1.4]))  # a record from before rounds were counted
    assert not has_interval(trial(0, confirmed=[1.3, 1.3, 1.3]))


# ---- the confirmation stage says so (tuning/confirm.py) ------------------------------------------


class Replay:
    """Each config's samples/s in every round, by its micro-batch; records who was measured."""

    def __init__(self, speeds: dict[int, list[float]]) -> None:
        self.speeds, self.calls = speeds, []  # type: ignore[var-annotated]

    def __call__(self, params: Mapping[str, Any], name: str) -> float | None:
        micro = int(params["batch.micro"])
        self.calls.append(name)
        return self.speeds[micro][int(name.split("-")[1]) - 1]


def test_the_references_own_config_is_not_confirmed_against_itself() -> None:
    record = sweep(reference(1000.0), twin(4, 1060.0), trial(1, 1200.0))
    lines: list[str] = []
    replay = Replay({128: [1000.0, 1000.0], 32: [1300.0, 1200.0]})
    confirm_best(record, Confirm(top=2, rounds=2), {"batch.micro": 128}, replay, echo=lines.append)
    assert replay.calls == ["confirm-1-reference", "confirm-1-t1", "confirm-2-reference", "confirm-2-t1"]
    assert "confirmation: trial 4 is the reference's own config; not measured against itself (1.00x)" in lines
    by_id = {t.trial_id: t for t in record.trials}
    assert by_id["t4"].confirmed_speedup is None
    assert by_id["t1"].confirmed_speedup == [1.2, 1.25, 1.3] and by_id["t1"].confirmed_rounds == 2
    assert lines[-1] == "confirmed best: trial 1, 1.25x the reference (rounds 1.20x-1.30x)"


def test_a_single_round_says_it_has_no_range_and_a_reference_best_is_no_gain() -> None:
    record = sweep(reference(1000.0), trial(1, 1200.0))
    lines: list[str] = []
    confirm_best(
        record, Confirm(top=1, rounds=1), {"batch.micro": 128}, Replay({128: [800.0], 32: [1040.0]}), echo=lines.append
    )
    assert lines[-1] == "confirmed best: trial 1, 1.30x the reference (one round: a single ratio, no range)"
    slower = sweep(reference(1000.0), trial(1, 1200.0))
    lines = []
    confirm_best(
        slower,
        Confirm(top=1, rounds=2),
        {"batch.micro": 128},
        Replay({128: [1000.0] * 2, 32: [900.0] * 2}),
        echo=lines.append,
    )
    assert lines[-1] == "confirmed best: the reference itself; no config was faster in the rounds"


def test_overlapping_ranges_are_said_not_distinguishable_and_the_leaner_config_wins() -> None:
    record = sweep(reference(1000.0, peak_mib=200), trial(0, 2000.0, peak_mib=60), trial(2, 1900.0, peak_mib=51.1))
    lines: list[str] = []
    # per round, reference 1000: trial 0 at 2.08x, 2.60x, 3.43x; trial 2 at 1.95x, 2.10x, 2.23x
    replay = Replay({128: [1000.0] * 3, 16: [2080.0, 2600.0, 3430.0], 48: [1950.0, 2100.0, 2230.0]})
    confirm_best(record, Confirm(top=2, rounds=3), {"batch.micro": 128}, replay, echo=lines.append)
    assert lines[-2] == "confirmed best: trial 2, 2.10x the reference (rounds 1.95x-2.23x)"
    assert lines[-1] == (
        "not distinguishable on this machine: trial 2 1.95x-2.23x, trial 0 2.08x-3.43x overlap; "
        "the tie goes to the lower peak memory, trial 2 (51.1 MiB)"
    )
    assert record.best() is not None and record.best().trial_id == "t2"  # type: ignore[union-attr]
    # a config whose range reaches down to the reference's 1, and more memory: the reference stays
    close = sweep(reference(1000.0, peak_mib=50), trial(0, 2000.0, peak_mib=60))
    lines = []
    confirm_best(
        close,
        Confirm(top=1, rounds=3),
        {"batch.micro": 128},
        Replay({128: [1000.0] * 3, 16: [900.0, 1300.0, 1500.0]}),
        echo=lines.append,
    )
    assert lines[-2:] == [
        "confirmed best: the reference itself; no config was told apart from it in the rounds",
        "not distinguishable on this machine: the reference 1.00x, trial 0 0.90x-1.50x overlap; "
        "the tie goes to the lower peak memory, the reference (50 MiB)",
    ]
    # and best_config.yaml is that config, every value whole
    assert yaml.safe_load(best_config_yaml(record) or "") == record.trials[2].config


# ---- the table: what ranks, measured and confirmed side by side, quality in words ----------------


def test_the_legend_says_what_ranks_and_how_each_figure_was_measured() -> None:
    confirmed = sweep(reference(confirmed=[1.0, 1.0, 1.0]), trial(0, confirmed=[1.1, 1.2, 1.3], rounds=3))
    assert legend(confirmed) == (
        "ranked by confirmed ×ref: median over 3 rounds of a run ÷ the reference's run just before it "
        "(under it: lowest-highest) · measured ×ref: the search's single run ÷ the reference's"
    )
    searched = sweep(reference(), trial(0))
    assert legend(searched) == (
        "ranked by measured samples/s (no confirmation ran) · measured ×ref: the search's single run ÷ the reference's"
    )
    tied = sweep(
        reference(confirmed=[1.0, 1.0, 1.0]),
        trial(0, confirmed=[2.08, 2.6, 3.43], rounds=3, peak_mib=60),
        trial(2, confirmed=[1.95, 2.1, 2.23], rounds=3, peak_mib=51),
    )
    assert legend(tied).endswith("· tie: ranges overlap, not told apart on this machine; lower peak memory ranks first")
    assert results_json(tied)["ranked_by"] == "confirmed" and results_json(tied)["tied_with_best"] == ["t2", "t0"]


def test_row_one_is_the_ranked_best_with_its_measured_and_confirmed_figures_side_by_side() -> None:
    # the table: #1 has fewer samples/s than #2, because the confirmation re-ranked
    record = sweep(
        reference(20_000.0, confirmed=[1.0, 1.0, 1.0]),
        trial(0, 45_365.0, confirmed=[5.0, 5.52, 6.1], rounds=3, peak_mib=90),
        trial(1, 86_469.0, confirmed=[1.9, 2.2, 2.4], rounds=3, peak_mib=90),
    )
    rows = compact_rows(record)
    assert [row[1] for row in rows] == ["0", "1", "ref"]
    rank_, _, _, measured, confirmed, _, _ = rows[0]
    assert rank_ == "1"
    assert measured.split("\n")[:2] == ["45,365", "2.27× ref"]  # 45,365 / 20,000
    assert confirmed == "5.52×\n5.00-6.10"
    assert rows[2][4] == "1.00×\nref"  # the reference's 1 is exact by definition
    wide = summary_rows(record)
    assert wide[0][:2] == ("1", "t0") and wide[0][5:7] == ("2.27×", "5.52× (5.00-6.10)")
    assert wide[2][6] == "1.00× (ref)"
    one_round = sweep(reference(confirmed=[1.0, 1.0, 1.0]), trial(0, confirmed=[1.3, 1.3, 1.3], rounds=1))
    assert compact_rows(one_round)[0][4] == "1.30×\n1 round"
    with_twin = sweep(reference(), twin(4, 1060.0))
    assert compact_rows(with_twin)[1][4] == "= ref\nits config" and compact_rows(with_twin)[0][1] == "ref"
    said = trial_line(with_twin.trials[1], with_twin.reference())
    assert said.startswith("trial 4 ok: the reference's own config, its figures: 1,060 samples/s, peak 100 MiB · ")


def test_ties_are_marked_in_the_rank_column() -> None:
    record = sweep(
        reference(confirmed=[1.0, 1.0, 1.0]),
        trial(0, confirmed=[2.08, 2.6, 3.43], rounds=3, peak_mib=60),
        trial(2, confirmed=[1.95, 2.1, 2.23], rounds=3, peak_mib=51),
    )
    assert [(row[0], row[1]) for row in compact_rows(record)] == [("1 tie", "2"), ("2 tie", "0"), ("3", "ref")]


@pytest.mark.parametrize(
    ("direction", "quality", "said"),
    [
        ("min", 0.493, "1.4% better"),  # log loss 0.493 against 0.5: 1.4% lower, which is better
        ("max", 0.493, "1.4% worse"),  # recall@10 0.493 against 0.5: 1.4% lower, which is worse
        ("min", 0.51, "2.0% worse"),
        ("max", 0.51, "2.0% better"),
        ("max", 0.5002, "same"),  # under 0.05% apart
    ],
)
def test_quality_says_better_or_worse_in_the_metrics_direction(direction: str, quality: float, said: str) -> None:
    record = sweep(reference(), quality_direction=direction, reference_quality=0.5)
    assert quality_change(trial(0, quality=quality), record) == said


def test_quality_in_the_table_reads_better_or_worse() -> None:
    record = sweep(
        reference(quality=0.5), trial(0, 2000.0, quality=0.493), quality_metric="recall@10", quality_direction="max"
    )
    record.reference_quality = 0.5
    assert compact_rows(record)[0][6] == "1.4%\nworse" and summary_rows(record)[0][9] == "1.4% worse"
    assert compact_rows(record)[1][6] == "ref"


# ---- running means, an LM's tokens/s, parameters to three significant digits ----------------------


def test_a_trial_stopped_early_shows_its_running_mean_as_one() -> None:
    pruned = trial(3, 501.0, status="pruned", peak_mib=None, quality_ok=None)
    record = sweep(reference(1325.0), pruned)
    row = next(r for r in compact_rows(record) if r[1] == "3")
    assert row[3].split("\n")[:3] == ["501", "running", "mean"]
    assert next(r for r in summary_rows(record) if r[1] == "t3")[4] == "501 (running mean)"
    assert trial_line(pruned).startswith("trial 3 pruned: 501 samples/s (running mean), peak n/a · ")
    assert step_line(12, 40, 0.51234, 501.4) == "  step    12/40  loss 0.5123  501 samples/s running mean"
    assert step_line(1, 40, 0.7, None).endswith("warming up")


def test_an_lm_table_shows_tokens_per_second() -> None:
    lm = trial(0, 300.0, units="tokens", units_per_s=11_234.0)
    record = sweep(reference(250.0), lm)
    assert compact_rows(record)[0][3].split("\n")[-2:] == ["11.2k", "tokens/s"]
    assert summary_rows(record)[0][4] == "300; 11,234 tokens/s" and summary_rows(record)[1][4] == "250"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.18249340522238752, "0.182"),
        (1234.5, "1230"),
        (3.14159e-05, "3.14e-05"),
        (0.5, "0.5"),
        (1024, "1024"),  # an int stays whole
        (True, "True"),
        ("rowwise_adagrad", "rowwise_adagrad"),
        ([0.123456, 2], "[0.123, 2]"),
    ],
)
def test_searched_values_show_three_significant_digits(value: Any, shown: str) -> None:
    assert shown_value(value) == shown


def test_parameters_are_rounded_where_shown_and_whole_in_the_config_file(tmp_path: Path) -> None:
    params = {"embedding.cache_ratio": 0.18249340522238752, "batch.micro": 128}
    config = {"embedding": {"strategy": "cached", "cache_ratio": 0.18249340522238752}, "batch": {"micro": 128}}
    cached = trial(7, 2000.0, params=params, config=config)
    record = sweep(reference(), cached)
    assert "cache_ratio=0.182" in compact_rows(record)[0][2] and "cache_ratio=0.182" in summary_rows(record)[0][3]
    assert "cache_ratio=0.182, micro=128" in trial_line(cached)
    assert "0.18249340522238752" not in trial_line(cached) + str(compact_rows(record)) + str(summary_rows(record))
    assert yaml.safe_load(best_config_yaml(record) or "")["embedding"]["cache_ratio"] == 0.18249340522238752


def test_an_outcome_message_shows_parameters_rounded() -> None:
    from tests.unit.test_sweep_outcome import _spec

    screened = trial(
        0,
        None,
        status="infeasible",
        params={"embedding.strategy": "full", "optimizer.lr": 0.0031234567},
        estimated_peak_bytes=90 * MIB,
        quality_ok=None,
    )
    said = outcome(sweep(screened), _spec(memory_ceiling="1MiB")).message
    assert "the cheapest tried: embedding.strategy=full, optimizer.lr=0.00312, 90.00 MiB predicted" in said
    assert "0.0031234567" not in said


# ---- the reference's own config repeats the reference's report (tuning/trial.py) -----------------


def test_a_proposal_of_the_references_config_gets_the_references_report() -> None:
    ref = reference(1234.5, quality=0.5, peak_memory_kind="cpu_rss_hwm", steps=40)
    record = sweep(ref, memory_ceiling_bytes=200 * MIB, quality_tolerance=0.02, reference_quality=0.5)
    report = reference_report(record)
    assert report is not None and report.final and report.status == "ok" and report.quality_ok is True
    assert (report.samples_per_s, report.peak_memory_bytes, report.quality) == (1234.5, 100 * MIB, 0.5)
    assert report.constraints is not None and report.constraints.memory < 0 and report.constraints.quality <= 0
    copied = report.to_record("t4", 4, {"batch.micro": 128}, dict(REFERENCE_CONFIG))
    assert copied.samples_per_s == ref.samples_per_s and copied.feasible
    assert reference_report(sweep(reference(None, status="failed"))) is None  # nothing measured: it trains


# ---- what a sweep that has not finished points to ------------------------------------------------


@pytest.mark.parametrize(
    ("status", "said", "command"),
    [
        ("finished", "best config (MLflow artifact best_config.yaml):", "elastune train --from-sweep sw-37"),
        (
            "interrupted",
            "the sweep was interrupted: no best_config.yaml until it finishes; resume it where its state folder is:",
            "elastune sweep --resume sw-37",
        ),
        (
            "stale",
            "the sweep stopped without a word (its driver is gone): no best_config.yaml until it finishes; "
            "resume it where its state folder is:",
            "elastune sweep --resume sw-37",
        ),
        ("running", "still running: these are its figures so far; best_config.yaml is written when it finishes", None),
    ],
)
def test_the_next_step_never_points_to_a_config_file_that_does_not_exist_yet(
    status: str, said: str, command: str | None
) -> None:
    assert next_step(sweep(reference(), trial(0), status=status)) == (said, command)


def test_a_best_so_far_config_says_it_is_one() -> None:
    text = best_config_yaml(sweep(reference(), trial(0, 2000.0), status="interrupted")) or ""
    assert "# The sweep is interrupted: this is its best so far, not its result." in text
    assert "best so far" not in (best_config_yaml(sweep(reference(), trial(0, 2000.0))) or "")


# ---- MLflow: a pruned trial is not a failure, the reference is named so ---------------------------


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def _store_sweep(uri: str, record: SweepRecord, end: bool = True) -> SweepRecord:
    tracker = SweepTracker(uri)
    tracker.start_sweep(record)
    for t in record.trials:
        tracker.log_trial(record, t)
    tracker.update_sweep(record)
    if end:
        tracker.finish_sweep(record)
    return record


def test_a_pruned_trial_finishes_tagged_pruned_and_the_reference_is_named_reference(uri: str) -> None:
    pruned = trial(1, 501.0, status="pruned", peak_mib=None, quality_ok=None)
    record = _store_sweep(uri, sweep(reference(), trial(0), pruned, sweep_id="mlf-1"))
    runs = {r.data.tags["elastune.trial_id"]: r for r in child_runs(uri, record.mlflow_run_id or "")}
    assert runs["t1"].info.status == "FINISHED" and runs["t1"].data.tags["elastune.pruned"] == "true"
    assert "Not a failure" in runs["t1"].data.tags["mlflow.note.content"]
    assert "elastune.pruned" not in runs["t0"].data.tags and runs["t0"].info.status == "FINISHED"
    assert runs["reference"].info.run_name == "reference" and runs["t0"].info.run_name == "trial-000-t0"
    assert trial_run_name(trial(3)) == "trial-003-t3"
    assert load_sweep("mlf-1", uri).trials == record.trials


def test_a_sweep_recorded_under_the_old_names_reads_back_and_resumes(uri: str) -> None:
    """Runs are found by their trial-id tag, never by name: a sweep an older release recorded
    (`trial--01-reference`, a pruned trial KILLED) is read back and resumed without a second run."""
    pruned = trial(1, 501.0, status="pruned", peak_mib=None, quality_ok=None)
    record = _store_sweep(uri, sweep(reference(), trial(0), pruned, status="interrupted", sweep_id="mlf-old"))
    client = MlflowClient(uri)
    for run in child_runs(uri, record.mlflow_run_id or ""):
        t = run.data.tags["elastune.trial_id"]
        client.set_tag(run.info.run_id, "mlflow.runName", f"trial-{-1 if t == 'reference' else int(t[1:]):03d}-{t}")
        if t == "t1":
            client.update_run(run.info.run_id, status="KILLED")
            client.delete_tag(run.info.run_id, "elastune.pruned")
    names = {r.info.run_name for r in child_runs(uri, record.mlflow_run_id or "")}
    assert "trial--01-reference" in names
    back = load_sweep("mlf-old", uri)
    assert back.trials == record.trials and back.best() is not None
    # the resume: the same parent, the ended trials left as they were, a new trial beside them
    back.status = "running"
    resumed = SweepTracker(uri)
    assert resumed.start_sweep(back) == record.mlflow_run_id
    for t in back.trials:
        resumed.log_trial(back, t)
    new = trial(2, 1500.0)
    back.trials.append(new)
    resumed.log_trial(back, new)
    runs = child_runs(uri, record.mlflow_run_id or "")
    assert sorted(r.data.tags["elastune.trial_id"] for r in runs) == ["reference", "t0", "t1", "t2"]
    assert {t.trial_id for t in load_sweep("mlf-old", uri).trials} == {"reference", "t0", "t1", "t2"}


def test_an_interrupted_sweeps_missing_config_file_says_resume_not_infeasible(uri: str) -> None:
    _store_sweep(uri, sweep(reference(), trial(0), status="interrupted", sweep_id="mlf-int"))
    with pytest.raises(InputError) as caught:
        artifact_path("mlf-int", "best_config.yaml", uri)
    said = str(caught.value)
    assert "elastune sweep --resume mlf-int" in said and "feasible" not in said


# ---- the web UI: the headline names the ranked figure and matches row #1 --------------------------


def test_the_ui_ranks_by_the_confirmed_ratio_and_its_headline_is_row_one(uri: str) -> None:
    record = sweep(
        reference(20_000.0, confirmed=[1.0, 1.0, 1.0], quality=0.5),
        trial(0, 45_365.0, confirmed=[5.0, 5.52, 6.1], rounds=3, quality=0.493),
        trial(1, 86_469.0, confirmed=[1.9, 2.2, 2.4], rounds=3, quality=0.51),
        trial(2, 30_000.0, params={"batch.micro": 48, "embedding.cache_ratio": 0.18249340522238752}),
        twin(3, 21_000.0),
        sweep_id="ui-37",
        reference_quality=0.5,
        quality_direction="max",
    )
    _store_sweep(uri, record)
    settings = UISettings(tracking_uri=uri, spec_dir=Path(__file__).parent, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as client:
        body = client.get("/api/sweeps/ui-37").json()
        listed = next(s for s in client.get("/api/sweeps").json() if s["sweep_id"] == "ui-37")
    trials = {t["trial_id"]: t for t in body["trials"]}
    row_one = next(t for t in body["trials"] if t["rank"] == 1)
    assert row_one["trial_id"] == body["best"]["trial_id"] == "t0" == listed["best_trial_id"]
    assert body["ranked_by"] == listed["ranked_by"] == "confirmed" and listed["best_confirmed_speedup"][1] == 5.52
    assert body["legend"] == legend(record)
    # the confirmed (the reference at 1 among them), then the search's unconfirmed by samples/s
    assert [trials[i]["rank"] for i in ("t0", "t1", "reference", "t2", "t3")] == [1, 2, 3, 4, 5]
    assert trials["t0"]["measured_speedup"] == pytest.approx(45_365 / 20_000)
    assert trials["t3"]["same_as_reference"] and not trials["t0"]["same_as_reference"]
    assert trials["t0"]["quality_change"] == "1.4% worse" and trials["t0"]["quality_better"] is False
    assert trials["t1"]["quality_change"] == "2.0% better" and trials["t1"]["quality_better"] is True
    assert trials["t2"]["params_shown"] == {"batch.micro": "48", "embedding.cache_ratio": "0.182"}
    assert trials["t0"]["confirmed_range"] and body["next_step"]["command"] == "elastune train --from-sweep ui-37"
