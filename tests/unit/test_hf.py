"""`workload: hf`: Hugging Face transformers models, built from a config or read from a local folder,
offline: both tasks learn and are judged by their metric, the estimator traces them, every
embedding strategy becomes the word table, and a folder (a path the run reads) is the command
line's alone, never a remote client's."""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from elastune.cli import main
from elastune.config import RunConfig
from elastune.data.sequences import IGNORE
from elastune.embeddings import get_strategy, strategies
from elastune.embeddings.swap import SwappedEmbedding, strategy_modules
from elastune.memory.estimate import estimate
from elastune.memory.trace import distinct_rows
from elastune.training.loop import train
from elastune.untrusted import CLIENT_OPTIONS, limit_problems, override_problems, stored_config_problems
from elastune.validate import load_run_config
from elastune.workloads import build_workload

transformers = pytest.importorskip("transformers")  # `make install` installs it (the `hf` extra)

GPT2 = "{n_layer: 1, n_embd: 32, n_head: 2}"
CAUSAL = [
    "workload=hf",
    f"workload_options={{model_type: gpt2, config: {GPT2}, vocab: 256, context: 16, mean_length: 8}}",
    "batch.micro=16",
    "eval.samples=256",
    "device=cpu",
    "threads=1",  # the 2-core machine is shared: fewer threads, less time lost to contention
    "optimizer.lr=0.01",
]
BERT = "{num_hidden_layers: 1, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64}"
CLASSIFY = [
    "workload=hf",
    "workload_options={task: sequence_classification, model_type: bert, config: " + BERT + ", vocab: 64, "
    "context: 16, mean_length: 12, num_labels: 2}",
    "batch.micro=32",
    "eval.samples=256",
    "device=cpu",
    "threads=1",  # the 2-core machine is shared: fewer threads, less time lost to contention
    "optimizer.lr=0.01",
]
ROW_OPTIMIZER = "optimizer.sparse=rowwise_adagrad"  # what the self-updating strategies need


def _sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def _untrained(sets: list[str]) -> dict[str, float]:
    """The eval metrics of the run's model before any step (same seed, same held-out set)."""
    cfg = load_run_config(None, sets)
    workload = build_workload(cfg)
    torch.manual_seed(cfg.seed)
    model = workload.build_model().eval()
    with torch.no_grad():
        return workload.evaluate(model, workload.data_source().eval_batches(cfg.eval.samples, cfg.batch.micro))


def test_a_causal_lm_learns_and_is_judged_by_perplexity(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [*CAUSAL, "steps=40", "warmup_steps=2"]
    assert main(["train", "--format", "json", *_sets(*sets)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["quality_metric"], result["quality_direction"]) == ("perplexity", "min")
    assert result["quality"] == pytest.approx(math.exp(result["metrics"]["loss"]))
    before = _untrained(sets)
    assert result["metrics"]["loss"] < before["loss"] - 1.0, (result["metrics"], before)
    # real tokens counted, padding not: the sequences' mean length (about 8 of 16) per sequence
    assert result["units"] == "tokens" and 4 < result["units_per_s"] / result["samples_per_s"] < 12


def test_a_sequence_classifier_learns_and_is_judged_by_accuracy(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [*CLASSIFY, "steps=30", "warmup_steps=2"]
    assert main(["train", "--format", "json", *_sets(*sets)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["quality_metric"], result["quality_direction"]) == ("accuracy", "max")
    assert result["quality"] == result["metrics"]["accuracy"]
    before = _untrained(sets)
    assert result["metrics"]["loss"] < before["loss"] and result["quality"] > max(0.8, before["accuracy"] + 0.2)


def test_the_synthetic_sequences_are_pure_functions_of_position_with_learnable_labels() -> None:
    for sets in (CAUSAL, CLASSIFY):
        source = build_workload(load_run_config(None, sets)).data_source()
        whole = source.read(1000, 100)  # crosses a chunk (1024 sequences)
        parts = [source.read(1000, 30), source.read(1030, 70)]
        for key in ("input_ids", "attention_mask", "labels"):
            assert torch.equal(whole[key], torch.cat([p[key] for p in parts])), key
        ids, mask = whole["input_ids"], whole["attention_mask"].bool()
        assert (ids[mask] != 0).all() and (ids[~mask] == 0).all()  # real ids, then padding (id 0)
        held_out = next(iter(source.eval_batches(100, 100)))
        assert not torch.equal(held_out["input_ids"], source.read(0, 100)["input_ids"])
    # causal: the targets are the ids, padding ignored; classification: the class most real ids fall in
    causal = build_workload(load_run_config(None, CAUSAL)).data_source().read(0, 64)
    assert torch.equal(causal["labels"], causal["input_ids"].masked_fill(causal["attention_mask"] == 0, IGNORE))
    batch = build_workload(load_run_config(None, CLASSIFY)).data_source().read(0, 512)
    real = batch["attention_mask"].bool()
    odd = ((batch["input_ids"] % 2 == 1) & real).sum(1)
    even = ((batch["input_ids"] % 2 == 0) & real).sum(1)
    assert torch.equal(batch["labels"], (odd > even).long())
    assert 0.3 < float(batch["labels"].float().mean()) < 0.7  # both classes, about as often


def test_micro_batches_weigh_into_the_step_exactly() -> None:
    """The loss of a batch is the mean over what `loss_weight` counts: two micro-batches weighted by
    it give the whole batch's loss, as gradient accumulation assumes."""
    for sets in (CAUSAL, CLASSIFY):
        workload = build_workload(load_run_config(None, sets))
        torch.manual_seed(0)
        model = workload.build_model().eval()
        batch = workload.data_source().read(0, 24)
        halves = [{k: v[:10] for k, v in batch.items()}, {k: v[10:] for k, v in batch.items()}]
        with torch.no_grad():
            whole = float(workload.loss(model, batch))
            weights = [float(workload.loss_weight(h)) for h in halves]
            parts = [float(workload.loss(model, h)) for h in halves]
        assert whole == pytest.approx(sum(w * p for w, p in zip(weights, parts, strict=True)) / sum(weights), rel=1e-5)


@pytest.mark.parametrize("strategy", strategies())
def test_every_strategy_becomes_the_word_table(strategy: str) -> None:
    sets = [*CAUSAL, f"embedding.strategy={strategy}"]
    if get_strategy(strategy).self_updating:
        sets.append(ROW_OPTIMIZER)
    workload = build_workload(load_run_config(None, sets))
    model = workload.build_model()
    words = model.get_input_embeddings()
    assert isinstance(words, SwappedEmbedding) and (words.num_embeddings, words.embedding_dim) == (256, 32)
    expected = type(get_strategy(strategy).build((256,), 32, load_run_config(None, sets).embedding, "rowwise_adagrad"))
    assert [type(m) for m in strategy_modules(model)] == [expected]  # the word table alone: positions stay dense
    assert isinstance(model.transformer.wpe, torch.nn.Embedding)
    # untied: the output projection keeps its own matrix, whatever the table stores
    assert model.lm_head.weight.shape == (256, 32) and not model.config.tie_word_embeddings
    out = model(input_ids=workload.data_source().read(0, 2)["input_ids"]).logits
    assert out.shape == (2, 16, 256)


@pytest.mark.parametrize("strategy", ["hashed", "int8"])
def test_a_compressed_word_table_trains(strategy: str) -> None:
    sets = [*CAUSAL, f"embedding.strategy={strategy}", "steps=30", "warmup_steps=2"]
    if get_strategy(strategy).self_updating:
        sets.append(ROW_OPTIMIZER)
    result = train(load_run_config(None, sets), progress_every=1000)
    assert result.metrics["loss"] < _untrained(sets)["loss"] - 0.5


def test_both_tasks_are_estimated_from_a_fake_trace_of_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    for sets in (CAUSAL, CLASSIFY):
        assert main(["estimate", "--format", "json", *_sets(*sets)]) == 0
        predicted = json.loads(capsys.readouterr().out)
        cfg = load_run_config(None, sets)
        params = sum(p.numel() * p.element_size() for p in build_workload(cfg).build_model().parameters())
        # the weights, their gradients and Adam's two moments are all alive at the traced peak
        assert predicted["traced_peak_bytes"] >= 4 * params
    # the distinct rows come from the run's own ids (table_ids): Zipf-skewed text repeats its tokens
    counted = distinct_rows(load_run_config(None, CAUSAL))
    assert counted and all(rows < lookups for lookups, rows in counted.items())


def test_gradient_checkpointing_keeps_the_gradients_and_lowers_the_traced_activations() -> None:
    long = "workload_options={config: {n_layer: 4, n_embd: 32, n_head: 2}, vocab: 256, context: 128, mean_length: 100}"
    sets = [*CAUSAL, long, "batch.micro=16"]
    grads = []
    for checkpointing in ("none", "every_block"):
        workload = build_workload(
            load_run_config(None, [*sets, f"workload_options.activation_checkpointing={checkpointing}"])
        )
        torch.manual_seed(0)
        model = workload.build_model().train()
        workload.loss(model, workload.data_source().read(0, 4)).backward()
        grads.append(model.lm_head.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    kept, recomputed = (
        estimate(load_run_config(None, [*sets, f"workload_options.activation_checkpointing={c}"])).transient_peak_bytes
        for c in ("none", "every_block")
    )
    assert recomputed < 0.8 * kept, (recomputed, kept)


def _save_tiny_gpt2(folder: Path) -> Any:
    config = transformers.AutoConfig.for_model(
        "gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=300, n_positions=64, bos_token_id=2, eos_token_id=2
    )
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    return model


def test_a_local_model_folder_loads_offline_with_its_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = _save_tiny_gpt2(tmp_path / "model")
    attempts: list[Any] = []

    def no_network(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    sets = [*CAUSAL, f"workload_options={{model_path: {tmp_path / 'model'}, vocab: 256, context: 16, mean_length: 8}}"]
    workload = build_workload(load_run_config(None, sets))
    model = workload.build_model()
    # a full table starts from the folder's rows; the untied output projection keeps them too
    words = model.get_input_embeddings().table.bag.weight
    assert torch.equal(words, saved.transformer.wte.weight) and torch.equal(model.lm_head.weight, words)
    assert model.lm_head.weight is not words
    assert torch.equal(model.transformer.h[0].mlp.c_fc.weight, saved.transformer.h[0].mlp.c_fc.weight)
    assert workload.tables[0].rows == 300  # the model's own vocabulary; the data's ids stay below 256
    cfg = load_run_config(None, [*sets, "steps=4", "warmup_steps=1"])
    assert math.isfinite(train(cfg, progress_every=1000).metrics["loss"]) and estimate(cfg).peak_bytes > 0
    assert attempts == []


@pytest.mark.parametrize(
    ("option", "field", "says"),
    [
        ("workload_options.config={n_layr: 2}", "workload_options.config", "did you mean 'n_layer'"),
        ("workload_options.config={vocab_size: 99}", "workload_options.config", "workload_options.vocab"),
        ("workload_options.config={n_embd: 33}", "workload_options.config", "must be divisible by num_heads"),
        ("workload_options.model_type=gpt3", "workload_options.model_type", "not a model type"),
        ("workload_options.task=translation", "workload_options.task", "causal_lm"),
        ("workload_options.model_path=/nonexistent/model", "workload_options.model_path", "config.json"),
        ("workload_options.layers=2", "workload_options.layers", "not an option of workload 'hf'"),
        ("workload_options.num_labels=3", "workload_options", "sequence_classification only"),
        ("workload_options={model_type: t5, config: {}}", "workload_options", "no AutoModelForCausalLM"),
        ("workload_options.context=2048", "workload", "longer than the model's 1024 positions"),
        ("model.embedding_dim=64", "workload", "n_embd or hidden_size"),
        (f"data.source=criteo_tsv;data.path={__file__}", "workload", "data.source='criteo_tsv': workload hf reads"),
    ],
)
def test_bad_options_are_input_errors_naming_the_key(
    option: str, field: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [s for s in CAUSAL if not s.startswith("workload_options=")] if "model_type: t5" in option else CAUSAL
    assert main(["estimate", *_sets(*base, *option.split(";"))]) == 2
    err = capsys.readouterr().err
    assert f"{field}" in err and says in err, err


def test_a_remote_client_can_never_name_a_model_folder_or_its_config(tmp_path: Path) -> None:
    assert "model_path" not in CLIENT_OPTIONS.get("hf", ()) and "config" not in CLIENT_OPTIONS.get("hf", ())
    asked = override_problems(["workload=hf", f"workload_options.model_path={tmp_path}"])
    assert [p.path for p in asked] == ["sets.workload_options.model_path"]
    asked = override_problems(["workload=hf", "workload_options={config: {n_layer: 2}}"])
    assert [p.path for p in asked] == ["sets.workload_options.config.n_layer"]
    stored = {"workload": "hf", "workload_options": {"model_path": str(tmp_path)}}
    assert "from_sweep.workload_options.model_path" in {p.path for p in stored_config_problems(stored)}
    cfg = RunConfig.model_validate(stored)  # a config the client's overrides met (the run, checked whole)
    assert "workload_options.model_path" in {p.path for p in limit_problems(cfg)}


def test_the_train_job_refuses_a_client_model_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save_tiny_gpt2(tmp_path / "model")
    sets = ["workload=hf", f"workload_options.model_path={tmp_path / 'model'}"]
    assert main(["train", "--untrusted", *_sets(*sets)]) == 2
    assert "workload_options.model_path" in capsys.readouterr().err


def test_text_trains_a_tokenizer_and_feeds_the_causal_lm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data.source=text: a byte-level BPE from the `tokenizers` library trained on the documents; the
    word table has the tokenizer's real size. (Built as a trial builds a checked config.)"""
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "red", "big", "house"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(4 + i % 9)) for i in range(400)) + "\n"
    )
    raw = {
        "workload": "hf",
        "workload_options": {"config": {"n_layer": 1, "n_embd": 32, "n_head": 2}, "vocab": 300, "context": 16},
        "data": {"source": "text", "path": str(corpus)},
        "eval": {"samples": 256},
        "device": "cpu",
    }
    workload = build_workload(RunConfig.model_validate(raw))
    rows = workload.tables[0].rows
    assert 259 <= rows <= 300
    batch = workload.data_source().read(0, 8)
    assert int(batch["input_ids"].max()) < rows and set(batch) == {"input_ids", "attention_mask", "labels"}
    torch.manual_seed(0)
    model = workload.build_model()
    assert model.get_input_embeddings().num_embeddings == rows
    loss = workload.loss(model, batch)
    loss.backward()
    assert math.log(rows) - 1 < loss.item() < math.log(rows) + 1  # an untrained model: about a uniform guess


def test_your_documents_train_the_causal_lm_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "red", "big", "house"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(4 + i % 9)) for i in range(400)) + "\n"
    )
    text = ["data.source=text", f"data.path={corpus}", "workload_options.vocab=300", "steps=30", "warmup_steps=2"]
    assert main(["train", "--format", "json", *_sets(*CAUSAL, *text)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["quality_metric"] == "perplexity" and result["quality"] < 30  # a uniform guess: about 300
    assert main(["estimate", *_sets(*CAUSAL, *text, "workload_options.task=sequence_classification")]) == 2
    assert "causal_lm only" in capsys.readouterr().err
