"""The quick LM sweep (search_spaces/lm_quick.yaml), shrunk to seconds, on the shared local Ray: the
tuner searches the sequence knobs and judges trials by eval perplexity, lower is better."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep

pytestmark = pytest.mark.integration

SPEC = Path(__file__).resolve().parents[3] / "search_spaces" / "lm_quick.yaml"


def test_the_quick_lm_sweep_searches_the_sequence_knobs(ray_local: Any, tmp_path: Path) -> None:
    raw = yaml.safe_load(SPEC.read_text())
    raw["base"]["workload_options"] = {"layers": 1, "heads": 2, "context": 32, "vocab": 256, "mean_length": 10}
    raw["base"]["model"] = {"embedding_dim": 32}
    raw["base"]["eval"] = {"samples": 256}
    raw["budget"] = {"max_trials": 3, "max_concurrent": 2, "trial_samples": 320}
    record = run_sweep(
        SweepSpec.model_validate(raw), SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", home=tmp_path)
    )
    assert record.status == "finished"
    assert (record.quality_metric, record.quality_direction) == ("perplexity", "min")
    assert record.reference_quality is not None and 1 < record.reference_quality < 256
    searched = [t for t in record.trials if t.trial_id != "reference" and t.status in ("ok", "pruned")]
    assert len(searched) >= 2
    assert all({"data.padding", "model.activation_checkpointing", "batch.micro"} <= set(t.params) for t in searched)
    finished = [t for t in searched if t.status == "ok"]
    assert all(t.quality == pytest.approx(t.metrics["perplexity"]) and t.metrics["tokens"] > 0 for t in finished)
    # throughput in real tokens too (padding excluded): several per sequence, fewer than the context
    assert all(t.units == "tokens" and t.samples_per_s and 2 < t.units_per_s / t.samples_per_s < 32 for t in finished)
