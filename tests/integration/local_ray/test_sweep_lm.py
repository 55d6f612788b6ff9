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
    raw["confirm"] = {"top": 0}
    record = run_sweep(
        SweepSpec.model_validate(raw), SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", home=tmp_path)
    )
    assert record.status == "finished"
    assert (record.quality_metric, record.quality_direction) == ("perplexity", "min")
    assert record.reference_quality is not None and 1 < record.reference_quality < 256
    searched = [t for t in record.trials if t.trial_id != "reference" and t.status in ("ok", "pruned")]
    assert len(searched) >= 2
    knobs = {"workload_options.padding", "workload_options.activation_checkpointing", "batch.micro"}
    assert all(knobs <= set(t.params) for t in searched)
    # the searched options reach each trial's resolved config, beside the base's
    for t in searched:
        options = t.config["workload_options"]
        assert options["padding"] == t.params["workload_options.padding"] and options["context"] == 32
    finished = [t for t in searched if t.status == "ok"]
    assert all(t.quality == pytest.approx(t.metrics["perplexity"]) and t.metrics["tokens"] > 0 for t in finished)
    # throughput in real tokens too (padding excluded): several per sequence, fewer than the context
    assert all(t.units == "tokens" and t.samples_per_s and 2 < t.units_per_s / t.samples_per_s < 32 for t in finished)


def test_an_lm_sweep_on_your_own_text(ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """data.source=text through the whole sweep: validation trains the tokenizer once (cached under
    the sweep's home), the trials on Ray read it, and MLflow keeps it on the sweep's parent run."""
    import mlflow

    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "red", "big", "house"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(4 + i % 9)) for i in range(600)) + "\n"
    )
    raw = yaml.safe_load(SPEC.read_text())
    raw["base"]["workload_options"] = {"layers": 1, "heads": 2, "context": 32, "vocab": 300}
    raw["base"]["model"] = {"embedding_dim": 32}
    raw["base"]["eval"] = {"samples": 256}
    raw["base"]["data"] = {"source": "text", "path": str(corpus)}
    raw["parameters"] = {"workload_options.padding": {"type": "choice", "values": ["static", "packed"]}}
    raw["budget"] = {"max_trials": 2, "max_concurrent": 2, "trial_samples": 320}
    raw["confirm"] = {"top": 0}
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    record = run_sweep(SweepSpec.model_validate(raw), SweepOptions(tracking_uri=uri, home=tmp_path))
    assert record.status == "finished"
    finished = [t for t in record.trials if t.status == "ok"]
    assert len(finished) >= 2 and all(t.quality < 300 for t in finished)  # below a uniform guess over the vocabulary
    said = capsys.readouterr()
    assert "warning: the reference's" not in said.out + said.err  # it learned
    client = mlflow.tracking.MlflowClient(uri)
    names = [a.path for a in client.list_artifacts(record.mlflow_run_id, "tokenizer")]
    assert names == ["tokenizer/tokenizer.json"]


def test_a_reference_that_learned_nothing_is_warned_about_on_the_sweep_console(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Twenty documents of random letters, half held out, 80 steps (tests/unit/test_text_stats.py's
    case): the reference memorizes its ten and guesses the held-out ones worse than uniformly, and the
    sweep says so under the reference's figures, since every quality check compares with it."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("\n".join(" ".join(rng.sample(words, 12)) for _ in range(20)) + "\n")
    raw = yaml.safe_load(SPEC.read_text())
    raw["base"]["workload_options"] = {"layers": 1, "heads": 2, "context": 32}
    raw["base"]["model"] = {"embedding_dim": 32}
    raw["base"]["eval"] = {"samples": 256}
    raw["base"]["warmup_steps"] = 1
    raw["base"]["data"] = {"source": "text", "path": str(corpus)}
    raw["parameters"] = {"workload_options.padding": {"type": "choice", "values": ["static", "packed"]}}
    raw["budget"] = {"max_trials": 1, "max_concurrent": 1, "trial_steps": 80}
    raw["confirm"] = {"top": 0}
    record = run_sweep(
        SweepSpec.model_validate(raw), SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", home=tmp_path)
    )
    assert record.status == "finished"
    (reference,) = [t for t in record.trials if t.trial_id == "reference"]
    assert reference.metrics["perplexity"] > reference.metrics["baseline_perplexity"]
    said = capsys.readouterr()
    warned = [line for line in (said.out + said.err).splitlines() if line.startswith("warning: the reference's")]
    assert len(warned) == 1, said.out + said.err
    assert "eval perplexity" in warned[0] and "worse than guessing uniformly" in warned[0], warned[0]
