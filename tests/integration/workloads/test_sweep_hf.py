"""The quick Hugging Face sweep (search_spaces/hf_quick.yaml), shrunk to seconds, on the shared local
Ray: trials build a transformers GPT-2 from its config in Ray's workers, offline, with the word table
in the proposed strategy, and are judged by eval perplexity, lower is better."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep

pytestmark = pytest.mark.integration
pytest.importorskip("transformers")  # `make install` installs it (the `hf` extra)

SPEC = Path(__file__).resolve().parents[3] / "search_spaces" / "hf_quick.yaml"


def test_the_quick_hf_sweep_searches_the_word_table_and_micro_batch(ray_local: Any, tmp_path: Path) -> None:
    raw = yaml.safe_load(SPEC.read_text())
    raw["base"]["workload_options"].update(
        {"config": {"n_layer": 1, "n_embd": 32, "n_head": 2}, "context": 32, "vocab": 256, "mean_length": 10}
    )
    raw["base"]["eval"] = {"samples": 256}
    raw["parameters"] = {
        "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
        "batch.micro": {"type": "choice", "values": [16, 32]},
    }
    raw["budget"] = {"max_trials": 3, "max_concurrent": 2, "trial_samples": 320}
    raw["confirm"] = {"top": 0}
    raw["search"] = {"algorithm": "grid", "scheduler": "none", "seed": 0}
    record = run_sweep(
        SweepSpec.model_validate(raw), SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", home=tmp_path)
    )
    assert record.status == "finished"
    assert (record.quality_metric, record.quality_direction) == ("perplexity", "min")
    assert record.reference_quality is not None and 1 < record.reference_quality < 256  # below a uniform guess
    searched = [t for t in record.trials if t.trial_id != "reference" and t.status == "ok"]
    assert len(searched) >= 2
    assert {t.params["embedding.strategy"] for t in searched} == {"full", "hashed"}
    assert all(t.quality == pytest.approx(t.metrics["perplexity"]) and t.quality < 256 for t in searched)
    # throughput in real tokens too (padding excluded): several per sequence, fewer than the context
    assert all(t.units == "tokens" and t.samples_per_s and 2 < t.units_per_s / t.samples_per_s < 32 for t in searched)
    # each trial was priced before it ran: the estimator traced the transformers model
    assert all(t.estimated_peak_bytes for t in searched)
