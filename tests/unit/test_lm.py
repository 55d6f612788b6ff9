"""`workload: lm`: the language model learns, and each sequence knob changes what it claims:
dynamic padding computes on shorter sequences with the same loss, tied tables are one storage,
activation checkpointing lowers the step's activation peak with the same gradients."""

from __future__ import annotations

import json
import math

import pytest
import torch
from elastune.cli import main
from elastune.memory.estimate import estimate
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from elastune.workloads.lm import first_fit, seen_shapes

SMALL = [
    "workload=lm",
    "workload_options={vocab: 256, context: 32, mean_length: 10, layers: 2, heads: 2}",
    "model.embedding_dim=32",
    "batch.micro=32",
    "eval.samples=512",
    "device=cpu",
]


def _sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def _model(*sets: str) -> tuple[object, torch.nn.Module]:
    workload = build_workload(load_run_config(None, [*SMALL, *sets]))
    torch.manual_seed(0)
    return workload, workload.build_model()


def test_it_learns_and_is_judged_by_perplexity(capsys: pytest.CaptureFixture[str]) -> None:
    """It learns the text's rule, beyond token frequencies: perplexity well under a unigram model's."""
    sets = [*SMALL, "steps=150", "warmup_steps=5", "optimizer.lr=0.01"]
    assert main(["train", "--format", "json", *_sets(*sets)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["quality_metric"], result["quality_direction"]) == ("perplexity", "min")
    assert result["quality"] == pytest.approx(math.exp(result["metrics"]["loss"]))
    # real tokens/s, padding excluded: the sequences' mean length (about 10 of a 32-token context) per sequence
    assert result["units"] == "tokens"
    assert 6 < result["units_per_s"] / result["samples_per_s"] < 14
    workload, _ = _model()
    held_out = torch.cat([b.tokens[:, 1:].flatten() for b in workload.data_source().eval_batches(512, 512)])
    p = torch.bincount(held_out[held_out != 0]).double()
    p = p[p > 0] / p.sum()
    unigram = math.exp(float(-(p * p.log()).sum()))
    assert result["quality"] < unigram / 3, (result["quality"], unigram)


def test_the_stream_is_a_pure_function_of_position_with_real_lengths() -> None:
    workload, _ = _model()
    source = workload.data_source()
    whole = source.read(1000, 100)  # crosses a chunk (1024 sequences)
    parts = [source.read(1000, 30), source.read(1030, 70)]
    assert torch.equal(whole.tokens, torch.cat([p.tokens for p in parts]))
    lengths = source.read(0, 1024).lengths
    assert 7 < float(lengths.float().mean()) < 13 and int(lengths.max()) <= 32 and int(lengths.min()) >= 2
    tokens = source.read(0, 4).tokens
    for row, n in zip(tokens, source.read(0, 4).lengths, strict=True):
        assert (row[:n] != 0).all() and (row[n:] == 0).all()  # real tokens, then padding


def test_dynamic_padding_computes_less_for_the_same_loss() -> None:
    static, model = _model()
    dynamic = build_workload(load_run_config(None, [*SMALL, "workload_options.padding=dynamic"]))
    batch = static.data_source().read(0, 32)
    seen: list[int] = []
    model.blocks[0].register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    model.eval()
    with torch.no_grad():
        assert float(dynamic.loss(model, batch)) == pytest.approx(float(static.loss(model, batch)), abs=1e-5)
    assert seen[0] == int(batch.lengths.max()) - 1 < seen[1] == 31  # dynamic first, then the full context
    # priced at the longest batch it can see: a full context
    assert estimate(load_run_config(None, [*SMALL, "workload_options.padding=dynamic"])).peak_bytes == pytest.approx(
        estimate(load_run_config(None, SMALL)).peak_bytes, rel=0.01
    )


def test_the_estimator_prices_the_longest_micro_batch_the_run_reads() -> None:
    """Dynamic padding is priced at the longest sequence, packing at the most rows, of the run's own
    micro-batches, not at the worst case (a full context per sequence)."""
    short = "workload_options={vocab: 256, context: 128, mean_length: 6, layers: 2, heads: 2}"
    static = load_run_config(None, [*SMALL, short, "steps=20", "warmup_steps=2"])
    source = build_workload(static).data_source()
    assert source.lengths(1000, 100).tolist() == source.read(1000, 100).lengths.tolist()
    reads = [source.read(step * 32, 32) for step in range(20)]
    longest = max(int(b.lengths.max()) for b in reads)
    packer = build_workload(load_run_config(None, [*SMALL, short, "workload_options.padding=packed"]))
    rows = max(packer.pack(b)[0].shape[0] for b in reads)
    assert longest < 64 and rows < 16  # short documents: far from the worst case (128 tokens, 32 rows)
    for padding, seen in (("dynamic", longest), ("packed", rows)):
        cfg = load_run_config(
            None, [*SMALL, short, "steps=20", "warmup_steps=2", f"workload_options.padding={padding}"]
        )
        shapes = {size: (n, r) for size, n, r in seen_shapes(cfg.model_dump_json())}
        assert shapes[32][0 if padding == "dynamic" else 1] >= seen  # every training micro-batch is covered
        # ... and by the traced peak: far below a full-context row per sequence
        assert estimate(cfg).traced_peak_bytes < 0.7 * estimate(static).traced_peak_bytes
    assert shapes[32][1] == max(rows, max(first_fit(b.lengths.tolist(), 128)[2] for b in source.eval_batches(512, 32)))


def test_tied_embeddings_share_one_table() -> None:
    _, untied = _model()
    _, tied = _model("workload_options.tie_embeddings=true")
    assert tied.output_weight() is tied.embeddings.bag.weight
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(untied) - count(tied) == 256 * 32


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["workload_options.tie_embeddings=true", "embedding.strategy=hashed"], "needs embedding.strategy=full"),
        (["workload_options.tie_embeddings=true", "optimizer.sparse=rowwise_adagrad"], "needs optimizer.sparse=adam"),
        (["model.embedding_dim=33"], "does not divide into workload_options.heads=2"),
    ],
)
def test_impossible_lm_settings_are_config_errors(sets: list[str], says: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["estimate", *_sets(*SMALL, *sets)]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("model.tie_embeddings=true", "tie_embeddings"),
        ("model.activation_checkpointing=every_block", "activation_checkpointing"),
        ("model.checkpoint_every=3", "checkpoint_every"),
        ("data.padding=dynamic", "padding"),
        ("data.bucket_by_length=true", "bucket_by_length"),
    ],
)
def test_a_moved_knob_is_refused_naming_its_new_key(old: str, new: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The sequence knobs are the LM's options now: a config that still sets one at its old key is
    told where it went (not an alias, not silently dropped)."""
    assert main(["estimate", *_sets(*SMALL, old)]) == 2
    key = old.split("=")[0]
    assert f"{key}: moved to workload_options.{new} (workload lm)" in capsys.readouterr().err


def test_dlrm_refuses_the_sequence_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    """They are the LM's options, not DLRM's (whose options are its MLPs)."""
    assert main(["estimate", "--set", "workload_options.padding=dynamic"]) == 2
    assert "workload_options.padding: not an option of workload 'dlrm'" in capsys.readouterr().err


def test_checkpointing_lowers_the_activation_peak_with_the_same_gradients() -> None:
    peaks = {}
    for mode in ("none", "every_n", "every_block"):
        sets = [*SMALL, "workload_options={vocab: 256, context: 32, layers: 4, heads: 2}", "batch.micro=64"]
        peaks[mode] = estimate(load_run_config(None, [*sets, f"workload_options.activation_checkpointing={mode}"]))
    assert (
        peaks["every_block"].transient_peak_bytes
        < peaks["every_n"].transient_peak_bytes
        < peaks["none"].transient_peak_bytes
    )
    grads = []
    for mode in ("none", "every_block"):
        workload, model = _model(f"workload_options.activation_checkpointing={mode}")
        model.train()
        workload.loss(model, workload.data_source().read(0, 16)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_packing_fills_rows_and_never_lets_attention_cross_documents() -> None:
    packed = build_workload(load_run_config(None, [*SMALL, "workload_options.padding=packed"]))
    _, model = _model()
    model.eval()
    batch = packed.data_source().read(0, 32)
    tokens, segments, positions = packed.pack(batch)
    real = int(batch.lengths.sum())
    # fewer rows than sequences: short documents share rows, nearly full
    assert -(-real // 32) <= tokens.shape[0] < 32 and real / tokens.numel() > 0.85
    assert int((segments >= 0).sum()) == real and int(positions.max()) < 32
    # no document is cut across rows: each lies in one row, its positions 0..n-1 in order
    for doc in range(len(batch)):
        rows, cols = (segments == doc).nonzero(as_tuple=True)
        assert len(set(rows.tolist())) == 1
        assert torch.equal(positions[rows, cols], torch.arange(int(batch.lengths[doc])))
    # each document's tokens, in order, and positions that restart at each document
    first = int(batch.lengths[0])
    assert torch.equal(tokens[0, :first], batch.tokens[0, :first]) and int(positions[0, first]) == 0
    # change the first document's tokens: no other document's logits move
    with torch.no_grad():
        before = model(tokens, segments, positions)
        changed = tokens.clone()
        changed[segments == 0] = (changed[segments == 0] % 200) + 5
        after = model(changed, segments, positions)
    others = segments > 0
    assert torch.allclose(before[others], after[others], atol=1e-5)
    assert not torch.allclose(before[segments == 0], after[segments == 0], atol=1e-3)
    # a document that fits in one row scores as it does alone (static), up to float error
    with torch.no_grad():
        alone = model(batch.tokens[:1, :first])
    assert torch.allclose(before[0, :first], alone[0], atol=1e-4)
    # so packing changes the work, not the loss: every document scores as it does alone
    static, _ = _model()
    with torch.no_grad():
        assert float(packed.loss(model, batch)) == pytest.approx(float(static.loss(model, batch)), rel=1e-5)


@pytest.mark.parametrize("padding", ["static", "dynamic", "packed"])
def test_micro_times_accum_is_exact_over_tokens(padding: str) -> None:
    """A step's gradient is the same whether its 16 sequences go in one pass or in 4 micro-batches:
    each micro-batch is weighted by its real next-token targets, not its share of the sequences
    (which would over-weigh the tokens of micro-batches of short sequences)."""
    from contextlib import nullcontext

    from elastune.training.step import forward_backward

    workload, model = _model(f"workload_options.padding={padding}")
    batch = workload.data_source().read(0, 16)
    lengths = batch.lengths
    assert len(set(lengths[i : i + 4].sum().item() for i in range(0, 16, 4))) > 1  # micro-batches differ
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    grads, losses = [], []
    for micro in (16, 4):
        model.zero_grad()
        losses.append(float(forward_backward(model, workload, batch, micro, nullcontext, scaler)))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_length_buckets_pad_less_for_the_same_step() -> None:
    """Sorting a step's sequences by length before the micro-batch split cuts dynamic padding's
    padded tokens, and the step's gradient is unchanged."""
    from contextlib import nullcontext

    from elastune.training.step import forward_backward

    plain, model = _model("workload_options.padding=dynamic")
    bucketed = build_workload(
        load_run_config(None, [*SMALL, "workload_options.padding=dynamic", "workload_options.bucket_by_length=true"])
    )
    batch = plain.data_source().read(0, 32)
    sorted_batch = bucketed.arrange_step(batch)
    assert plain.arrange_step(batch) is batch

    def padded(b: object, micro: int = 8) -> int:  # tokens computed: each micro-batch padded to its longest
        return sum(len(b.lengths[i : i + micro]) * int(b.lengths[i : i + micro].max()) for i in range(0, len(b), micro))

    assert padded(sorted_batch) < 0.8 * padded(batch)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    grads = []
    for workload, step in ((plain, batch), (bucketed, sorted_batch)):
        model.zero_grad()
        forward_backward(model, workload, step, 8, nullcontext, scaler)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_length_buckets_need_dynamic_padding(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *_sets(*SMALL, "workload_options.bucket_by_length=true")]) == 2
    assert "workload_options.bucket_by_length sorts sequences" in capsys.readouterr().err


def test_a_resume_with_other_workload_options_is_refused(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """The LM's stream depends on its options (mean_length, vocab): resuming a checkpoint under
    other options would continue on a different stream, so it is refused."""
    target = tmp_path / "lm.ckpt"
    quick = [*SMALL, "steps=2", "warmup_steps=0", f"checkpoint.path={target}"]
    assert main(["train", *_sets(*quick)]) == 0
    other = "workload_options={vocab: 256, context: 32, mean_length: 12, layers: 2, heads: 2}"
    assert main(["train", *_sets(*quick, other, "checkpoint.resume=true", "steps=4")]) == 2
    assert "different workload_options" in capsys.readouterr().err


def test_oom_recovery_halves_the_lm_micro_batch_and_loses_nothing(tmp_path) -> None:
    """An OOM mid-step re-splits the step's sequences at half the micro-batch: the same weights as a
    clean run, because micro-batches are weighted by their targets whatever their number."""
    from elastune.training.loop import train

    fired: list[int] = []

    def oom_once(step: int, index: int) -> None:
        if (step, index) == (2, 1) and not fired:
            fired.append(step)
            raise torch.OutOfMemoryError("injected: CUDA out of memory")

    weights = []
    for name, fault in (("hit", oom_once), ("clean", None)):
        path = tmp_path / f"{name}.ckpt"
        sets = [*SMALL, "batch.micro=8", "batch.accum=4", "steps=4", "warmup_steps=0", f"checkpoint.path={path}"]
        result = train(load_run_config(None, [*sets, "workload_options.padding=dynamic"]), fault=fault)
        weights.append(torch.load(path, weights_only=False)["model"])
        if fault is not None:
            assert fired == [2] and (result.micro_batch, result.accum, result.oom_retries) == (4, 8, 1)
    # Adam turns float-rounding differences of the re-split into ~1e-4 here; weighting micro-batches
    # by their share of sequences instead of their targets moves weights by ~2e-2
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, atol=1e-3, rtol=0)
