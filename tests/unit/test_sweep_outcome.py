"""A sweep that ends without a config to recommend says so with its exit code: 1 where no trial
completed, 2 where nothing was feasible (naming the space's cheapest config and a ceiling that fits
it); a reference predicted over the ceiling is refused at preflight unless the spec allows it; and
when the ceiling binds, the searcher proposes the space's cheapest config early."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from elastune.cli import main
from elastune.errors import ConfigError
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.outcome import NO_TRIAL_COMPLETED, NOTHING_FEASIBLE, outcome
from elastune.tuning.pricing import cheapest_estimate, predicted_peak
from elastune.tuning.search import CHEAPEST_AFTER, ScreeningSearch, param_key
from elastune.tuning.spec import validate_sweep_spec
from elastune.tuning.sweep import check_ceiling

from tests.unit.test_tracking_mlflow import make_sweep, record_sweep

BASE = {"data": {"rows_scale": 0.001}, "model": {"embedding_dim": 8}, "steps": 6, "warmup_steps": 1}
PARAMETERS = {
    "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
    "batch.micro": {"type": "choice", "values": [64, 128]},
}


def _spec(**constraints: Any) -> Any:
    return validate_sweep_spec({"name": "t", "base": dict(BASE), "parameters": PARAMETERS, "constraints": constraints})


def _trial(number: int, status: str, **fields: Any) -> TrialRecord:
    params = {"embedding.strategy": "full", "batch.micro": 64 * (number + 1)}
    return TrialRecord(trial_id=f"t{number}", number=number, status=status, params=params, config={}, **fields)  # type: ignore[arg-type]


def _record(*trials: TrialRecord, status: str = "finished") -> SweepRecord:
    return SweepRecord(sweep_id="t-1", spec={}, status=status, trials=list(trials), reference_quality=0.5)  # type: ignore[arg-type]


def test_a_sweep_with_a_feasible_trial_exits_0() -> None:
    ok = _trial(0, "ok", samples_per_s=100.0, quality_ok=True)
    assert outcome(_record(ok, _trial(1, "failed", error="boom")), _spec()).exit_code == 0


def test_a_sweep_whose_every_trial_failed_exits_1_with_the_first_error() -> None:
    said = outcome(_record(_trial(0, "failed", error="data file has 3 rows"), _trial(1, "failed")), _spec())
    assert said.exit_code == NO_TRIAL_COMPLETED
    assert "no trial completed" in said.message and "data file has 3 rows" in said.message


def test_nothing_under_the_ceiling_exits_2_naming_the_cheapest_config_and_a_ceiling_that_fits_it() -> None:
    spec = _spec(memory_ceiling="40MiB")
    trials = [_trial(0, "infeasible", estimated_peak_bytes=90 * 2**20)]
    trials.append(_trial(1, "oom", estimated_peak_bytes=70 * 2**20))
    said = outcome(_record(*trials), spec)
    assert said.exit_code == NOTHING_FEASIBLE
    bound, cheapest = cheapest_estimate(spec)
    assert "70.00 MiB predicted" in said.message  # the cheapest proposal tried
    assert ", ".join(f"{key}={value}" for key, value in cheapest.items()) in said.message
    assert "the cheapest tried: embedding.strategy=full, batch.micro=128, 70.00 MiB predicted" in said.message
    (suggested,) = re.findall(r"--memory-ceiling (\d+)MiB", said.message)
    assert int(suggested) * 2**20 >= bound > (int(suggested) - 1) * 2**20


def test_trials_that_all_missed_the_quality_tolerance_exit_2() -> None:
    said = outcome(_record(_trial(0, "ok", samples_per_s=5.0, quality_ok=False)), _spec())
    assert said.exit_code == NOTHING_FEASIBLE and "quality_tolerance" in said.message


def test_an_interrupted_sweep_is_not_judged_here() -> None:
    assert outcome(_record(_trial(0, "failed"), status="interrupted"), _spec()).exit_code == 0


def test_a_reference_over_the_ceiling_is_refused_at_preflight_unless_allowed() -> None:
    loose = _spec()
    reference = {"batch.micro": 4096}
    peak = predicted_peak(loose, reference)
    ceiling = f"{(peak - 2**20) // 2**20}MiB"  # the space's configs fit, the reference does not
    with pytest.raises(ConfigError) as info:
        check_ceiling(_spec(memory_ceiling=ceiling, reference=reference))
    (only,) = [str(p) for p in info.value.problems]
    assert only.startswith("constraints.reference") and "reference_over_ceiling: allow" in only
    check_ceiling(_spec(memory_ceiling=ceiling, reference=reference, reference_over_ceiling="allow"))


def test_when_the_ceiling_binds_the_cheapest_config_is_proposed_next() -> None:
    micro = {"type": "choice", "values": [64, 128, 256, 512, 1024, 2048, 4096, 8192]}
    raw = {"name": "t", "base": dict(BASE), "parameters": {**PARAMETERS, "batch.micro": micro}}
    spec = validate_sweep_spec(raw | {"constraints": {"memory_ceiling": "1GiB"}, "search": {"seed": 7}})
    cheapest = {"embedding.strategy": "hashed", "batch.micro": 64}
    priced: list[dict[str, Any]] = []

    def screener(spec: Any, params: Any) -> tuple[bool, int | None, str]:
        priced.append(dict(params))
        fits = param_key(params) == param_key(cheapest)
        return fits, 1, "" if fits else "over"

    search = ScreeningSearch(spec, "t", "samples_per_s", "max", screener=screener, cheapest=lambda s: (1, cheapest))
    config = search.suggest("trial-1")
    # screened out CHEAPEST_AFTER times in a row, then the cheapest config, which fits and is launched
    assert len(priced) == CHEAPEST_AFTER + 1 and priced[-1] == cheapest
    assert config is not None and {k: config[k] for k in cheapest} == cheapest


def test_results_print_only_the_hint_that_works_for_the_sweeps_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri)
    for sweep_id, status in (("st-fin", "finished"), ("st-int", "interrupted"), ("st-run", "running")):
        record = make_sweep(sweep_id, started_at=1_700_000_000.0 + len(status))
        record.status = status  # type: ignore[assignment]
        if status == "running":  # a live driver: started, not finished (no beat yet: not stale)
            tracker.start_sweep(record)
        else:
            record_sweep(tracker, record)

    def shown(*args: str) -> str:
        assert main(["results", *args, "--tracking-uri", uri]) == 0
        said = capsys.readouterr()
        return " ".join((said.out + said.err).split())

    newest = shown()  # the newest finished one, though a running one is newer
    assert "the newest finished sweep: st-fin" in newest and "elastune train --from-sweep st-fin" in newest
    interrupted = shown("st-int")
    assert "elastune sweep --resume st-int" in interrupted and "--from-sweep" not in interrupted
    running = shown("st-run")
    assert "still running" in running and "--from-sweep" not in running and "--resume" not in running


def test_results_say_when_the_newest_sweep_has_not_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = make_sweep("st-alone")
    record.status = "running"  # type: ignore[assignment]
    SweepTracker(uri).start_sweep(record)
    assert main(["results", "--tracking-uri", uri]) == 0
    said = capsys.readouterr()
    assert "the newest sweep (running; none has finished): st-alone" in " ".join((said.out + said.err).split())
