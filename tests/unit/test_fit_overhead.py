"""bench/fit_overhead.py refits the estimator's constants from the zoo's records: on synthetic rows
made by known constants it must recover them, and it must refuse a record whose halves moved."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fit_overhead
from elastune.memory.overhead import VIRTUAL_ONEDNN, CpuFit, CpuInputs, VirtualFit, cpu_other, virtual_other_parts

MiB = 2**20
KNOWN = CpuFit(fixed=20 * MiB, row_optimizer=-8 * MiB, activation_share=0.6, traced_share=0.02, gradient_share=0.5)


def _inputs(rng: random.Random) -> CpuInputs:
    traced = rng.randint(20, 600) * MiB
    return CpuInputs(
        traced=traced,
        train_peak=traced - rng.randint(0, 5) * MiB,
        heap_activations=rng.randint(0, 40) * MiB,
        heap_gradients=rng.randint(0, 20) * MiB,
        row_optimizer=rng.random() < 0.4,
    )


def test_the_cpu_heap_model_is_recovered_from_rows_it_made() -> None:
    rng = random.Random(3)
    rows = []
    for i in range(30):
        x = _inputs(rng)
        rows.append(fit_overhead.Row(f"w{i % 5}: c{i}", f"w{i % 5}", x.traced + cpu_other(x, KNOWN), x, False))
    fitted = fit_overhead.fit_cpu(rows)
    assert fitted.activation_share == pytest.approx(KNOWN.activation_share, abs=0.011)
    assert fitted.fixed == pytest.approx(KNOWN.fixed, rel=0.02)
    assert fitted.row_optimizer == pytest.approx(KNOWN.row_optimizer, rel=0.05)
    assert fitted.gradient_share == pytest.approx(KNOWN.gradient_share, rel=0.05)


def test_the_virtual_model_is_recovered_and_the_margin_is_the_worst_under_prediction() -> None:
    rng = random.Random(4)
    known = VirtualFit(runtime=6 * MiB, churn_share=0.4, churn_cap=30 * MiB)
    rows = []
    for i in range(12):
        x = _inputs(rng)
        churn = rng.randint(1, 30) * MiB
        onednn = i % 3 == 0
        extra = sum(virtual_other_parts(churn, known).values()) + rng.choice([-1, 1]) * MiB  # +-1 MiB of noise
        rows.append(fit_overhead.Row(f"w: c{i}", "w", x.traced + extra + VIRTUAL_ONEDNN * onednn, x, onednn, churn))
    fitted = fit_overhead.fit_virtual(rows)
    assert fitted.churn_cap == max(r.churn for r in rows)  # the fit half's range, not fitted
    assert fitted.runtime == pytest.approx(known.runtime, abs=1.5 * MiB)
    assert fitted.churn_share == pytest.approx(known.churn_share, abs=0.08)
    predicted = fit_overhead.predict_virtual(rows, fitted)
    worst = max(r.measured / p for r, p in zip(rows, predicted, strict=True))
    assert worst > 1.0 and fit_overhead.margin(rows, predicted) == pytest.approx(worst)
    # a model that never under-predicts needs no margin
    assert fit_overhead.margin(rows, predicted * 2) == 1.0


def test_the_virtual_runtime_is_fitted_on_relative_error_so_small_configs_count_as_much_as_large() -> None:
    """Two configs that churn nothing: a small one holding 3 MiB beyond its tensors, a large one 8.
    The runtime minimising the squared relative error is sum(r / m^2) / sum(1 / m^2) (m measured,
    r its residual): 3.05 MiB here, where a fit in bytes would split the difference (5.5 MiB) and
    over-price the small config by 12.5%."""
    small, large = (20 * MiB, 3 * MiB), (200 * MiB, 8 * MiB)
    rows = [
        fit_overhead.Row(f"w: c{i}", "w", float(m), CpuInputs(m - r, m - r, 0, 0, False), False, 0)
        for i, (m, r) in enumerate([small, large])
    ]
    fitted = fit_overhead.fit_virtual(rows)
    expected = (3 / 20**2 + 8 / 200**2) / (1 / 20**2 + 1 / 200**2) * MiB
    assert fitted.runtime == pytest.approx(expected, rel=1e-6)
    errors = fit_overhead.predict_virtual(rows, fitted) / [m for m, _ in (small, large)] - 1
    assert abs(errors[0]) < 0.01 and abs(errors[1]) < 0.03


def test_a_record_whose_halves_moved_is_refused(tmp_path: Path) -> None:
    record = tmp_path / "estimator-zoo-cpu-x.json"
    moved = ["sasrec", *fit_overhead.ZOO_FIT[1:]]
    record.write_text(json.dumps({"settings": {"fit_set": moved}, "table": {"columns": [], "rows": []}}))
    with pytest.raises(SystemExit, match="halves never move"):
        fit_overhead.rows_of(record)


def test_the_newest_record_of_a_day_is_the_one_made_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records carry a day, not a time: of one day's, the newest is the one whose name's time is
    latest, whatever order the folder lists them in."""
    names = ["20261127-211004-8fb65b2", "20261127-171413-269be50", "20261126-235959-aaaaaaa"]
    for name, day in zip(names, ["2026-11-27", "2026-11-27", "2026-11-26"], strict=True):
        (tmp_path / f"estimator-zoo_check-virtual-{name}.json").write_text(json.dumps({"date": day}))
    monkeypatch.setattr(fit_overhead, "RECORDS", tmp_path)
    newest = fit_overhead.newest_extra("check")
    assert newest is not None and newest.name == "estimator-zoo_check-virtual-20261127-211004-8fb65b2.json"
    assert fit_overhead.newest_extra("blind") is None  # a set without a record: not scored
    assert [p.name[-28:-5] for p in fit_overhead._by_date("estimator-zoo_check-*.json")] == [
        "20261126-235959-aaaaaaa", "20261127-171413-269be50", "20261127-211004-8fb65b2"
    ]  # fmt: skip


def _cuda_record(folder: Path, rows: list[tuple[str, float, float]]) -> Path:
    """An estimator-zoo-cuda record as bench/estimator.py writes one: (config, measured, predicted MiB)."""
    table = {
        "columns": ["#", "config", "measured MiB", "spread MiB", "predicted MiB", "error"],
        "rows": [
            [i, f"{label} ({'fit' if label.split(':')[0] in fit_overhead.ZOO_FIT else 'held-out'})", m, "-", p, "-"]
            for i, (label, m, p) in enumerate(rows)
        ],
    }
    path = folder / "estimator-zoo-cuda-20261201-120000-0000000.json"
    path.write_text(
        json.dumps({"date": "2026-12-01", "settings": {"fit_set": list(fit_overhead.ZOO_FIT)}, "table": table})
    )
    return path


CUDA_ROWS = [
    ("dlrm: default", 100.0, 95.0),  # fit: measured 5.3% above its prediction, the fit half's most
    ("lm: static", 50.0, 52.0),  # fit: below
    ("sasrec: micro 64", 80.0, 70.0),  # held-out: measured 14.3% above (-12.5% error)
    ("deepfm: default", 30.0, 31.0),  # held-out: +3.3%
]


def test_a_cuda_record_is_scored_as_predicted_there_with_its_margin_from_the_fit_half(tmp_path: Path) -> None:
    scored = fit_overhead.score_recorded(_cuda_record(tmp_path, CUDA_ROWS))
    assert scored is not None
    results, (fitted, bound) = scored
    assert fitted is None and bound == pytest.approx(100 / 95)
    assert results["fit"]["configs"] == 2 and results["fit"]["within"] == 2 and results["fit"]["under"] == []
    held = results["held-out"]
    assert held["configs"] == 2 and held["within"] == 1 and held["band"] == 0.10
    assert held["under"] == [("sasrec: micro 64", pytest.approx(70 / 80 - 1))]
    assert held["over_bound"] == ["sasrec: micro 64"]  # 80 > 70 x 1.053


def test_the_refit_prints_the_cuda_margin_or_says_there_is_no_cuda_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(fit_overhead, "RECORDS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["fit_overhead.py", "--probes", "cuda"])
    fit_overhead.main()
    out = capsys.readouterr().out
    assert "cuda: no estimator-zoo-cuda record" in out and "SCREEN_MARGIN" not in out
    _cuda_record(tmp_path, CUDA_ROWS)
    fit_overhead.main()
    out = capsys.readouterr().out
    assert 'SCREEN_MARGIN["cuda_reserved"] = 1.05' in out
    assert "held-out: 1/2 within ±10%" in out and "sasrec: micro 64 -12.5%" in out


def test_a_cuda_record_missing_a_half_is_not_scored(tmp_path: Path) -> None:
    assert fit_overhead.score_recorded(_cuda_record(tmp_path, CUDA_ROWS[:2])) is None


def test_a_record_of_some_probes_only_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/RESULTS.md shows the newest refit record: one without the CPU or virtual figures would drop them."""
    monkeypatch.setattr(sys, "argv", ["fit_overhead.py", "--probes", "cuda", "--record"])
    with pytest.raises(SystemExit, match="leave --probes out"):
        fit_overhead.main()
