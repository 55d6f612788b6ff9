"""The self-updating strategies (half, int8, cached): their storage is not an autograd parameter, so
they apply the row optimizer themselves at the optimizer step (embeddings/sparse_optim.py).

What each promises: half keeps small updates through stochastic rounding; int8 keeps no fp32 copy
and rounds within a step; cached computes exactly what `full` does, whatever its cache holds.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from elastune.config import EmbeddingConfig, RunConfig
from elastune.data.clicks import table_sizes
from elastune.embeddings import build_embedding, get_strategy
from elastune.embeddings.cached import CachedEmbedding, cache_capacity
from elastune.embeddings.half import HalfEmbedding, stochastic_round
from elastune.embeddings.int8 import Int8Embedding, dequantize_rows, quantize_rows
from elastune.embeddings.self_updating import SelfUpdatingEmbedding
from elastune.embeddings.sparse_optim import RowUpdate, SelfUpdating
from elastune.memory.estimate import estimate
from elastune.training.loop import train
from elastune.validate import load_run_config
from torch._subclasses.fake_tensor import is_fake

MakeCfg = Callable[..., RunConfig]
SIZES = table_sizes(0.0005)
DIM = 8
ROWS = sum(SIZES)
OFFSETS = torch.tensor(SIZES).cumsum(0) - torch.tensor(SIZES)  # first row of each feature's table
NAMES = ["half", "int8", "cached"]
KINDS = ["sgd", "adagrad", "rowwise_adagrad"]


def _build(name: str, kind: str = "rowwise_adagrad", seed: int = 0, **fields: Any) -> SelfUpdatingEmbedding:
    torch.manual_seed(seed)
    module = build_embedding(SIZES, DIM, EmbeddingConfig(strategy=name, **fields), kind)
    assert isinstance(module, SelfUpdatingEmbedding)
    return module


def _ids(batch: int = 64, pooling: int = 2, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randint(0, n, (batch, 1, pooling), generator=g) for n in SIZES], dim=1)


def _table(module: SelfUpdatingEmbedding) -> torch.Tensor:
    """The whole current table in fp32."""
    if isinstance(module, CachedEmbedding):
        return module.full_table().clone()
    if isinstance(module, Int8Embedding):
        return dequantize_rows(module.codes, module.scale, module.zero_point)
    assert isinstance(module, HalfEmbedding)
    return module.weight.float()


def _step(module: SelfUpdatingEmbedding, ids: torch.Tensor, update: RowUpdate) -> None:
    module(ids).square().sum().backward()
    assert module.sparse_step(update, grad_scale=1.0)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=False)["model"]


# -- the interface


def test_registered_as_self_updating() -> None:
    for name in NAMES:
        assert get_strategy(name).self_updating
        module = _build(name)
        assert isinstance(module, SelfUpdating)
        assert module.sparse_parameters() == []
        assert list(module.parameters()) == []  # nothing for a torch optimizer to touch


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_output_is_pooled_fp32(name: str, kind: str) -> None:
    module = _build(name, kind)
    ids = _ids()
    out = module(ids)
    assert out.shape == (64, len(SIZES), DIM) and out.dtype == torch.float32
    # the bags are sums of the stored rows
    rows = ids + OFFSETS.view(1, -1, 1)
    torch.testing.assert_close(out, _table(module)[rows].sum(dim=2), rtol=1e-6, atol=1e-6)


def test_half_bf16_storage() -> None:
    module = _build("half", dtype="bf16")
    assert isinstance(module, HalfEmbedding) and module.weight.dtype == torch.bfloat16
    assert module(_ids()).dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_step_changes_only_touched_rows(name: str, kind: str) -> None:
    module = _build(name, kind)
    ids = _ids()
    before = _table(module)
    _step(module, ids, RowUpdate(kind, lr=0.05))
    changed = (_table(module) != before).any(dim=1).nonzero().squeeze(1)
    touched = torch.unique(ids + OFFSETS.view(1, -1, 1))
    assert set(changed.tolist()) <= set(touched.tolist())
    assert len(changed) >= 0.9 * len(touched)


def test_row_optimizer_mismatch_and_adam_are_refused() -> None:
    module = _build("half", "sgd")
    module(_ids()).sum().backward()
    with pytest.raises(ValueError, match="built for row optimizer 'sgd'"):  # no state for adagrad
        module.sparse_step(RowUpdate("adagrad", lr=0.1), 1.0)
    with pytest.raises(ValueError, match="row-wise sparse optimizer"):
        build_embedding(SIZES, DIM, EmbeddingConfig(strategy="int8"), "adam")


def test_non_finite_gradients_skip_the_step() -> None:
    module = _build("half", "sgd")
    before = module.weight.clone()
    (module(_ids()).sum() * float("inf")).backward()
    assert not module.sparse_step(RowUpdate("sgd", lr=0.1), 1.0)
    assert torch.equal(module.weight, before)
    assert module._pending == []  # dropped with the step


def test_gradients_of_all_micro_batches_are_summed_and_unscaled() -> None:
    # Two forwards (micro-batches) with loss x 8 and grad_scale 8 = one forward of both halves.
    ids = _ids(batch=64)
    split, whole = _build("half", "sgd"), _build("half", "sgd")
    for part in (ids[:32], ids[32:]):
        (split(part).square().sum() * 8).backward()
    assert split.sparse_step(RowUpdate("sgd", lr=0.01), grad_scale=8.0)
    whole(ids).square().sum().backward()
    assert whole.sparse_step(RowUpdate("sgd", lr=0.01), grad_scale=1.0)
    # the same fp32 values, so the same stochastic rounding noise gives the same stored rows
    torch.testing.assert_close(split.weight.float(), whole.weight.float(), rtol=0, atol=2e-3)


def test_eval_forward_records_nothing() -> None:
    module = _build("int8")
    module.eval()
    module(_ids())
    with torch.no_grad():
        module.train()
        module(_ids())
    assert module._pending == []


# -- half: stochastic rounding keeps the updates round-to-nearest loses


@pytest.mark.parametrize(("dtype", "step"), [("fp16", 1e-4), ("bf16", 1e-3)])
def test_half_tiny_updates_move_weights_like_fp32(dtype: str, step: float) -> None:
    # Each update is below half the gap between representable values around 1.0 (fp16: 2^-11,
    # bf16: 2^-8 below 1.0), so round-to-nearest throws every one of them away.
    torch.manual_seed(0)
    module = HalfEmbedding((4,), 256, dtype=dtype, sparse_optimizer="sgd")
    module.weight.fill_(1.0)
    ids = torch.zeros(1, 1, 1, dtype=torch.int64)
    steps = 200
    for _ in range(steps):
        module(ids).sum().backward()  # gradient 1 per element
        assert module.sparse_step(RowUpdate("sgd", lr=step), 1.0)
    fp32 = 1.0 - steps * step
    assert abs(module.weight[0].float().mean().item() - fp32) < 0.1 * steps * step
    assert torch.equal(module.weight[1:].float(), torch.ones(3, 256))  # untouched rows stay
    # ...and round-to-nearest would not have moved at all
    nearest = torch.ones(256, dtype=module.weight.dtype)
    for _ in range(steps):
        nearest = (nearest.float() - step).to(module.weight.dtype)
    assert torch.equal(nearest.float(), torch.ones(256))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 1e-2, 1e-6, 1e-9, 1e4])
def test_stochastic_round_picks_a_neighbour_without_bias(dtype: torch.dtype, scale: float) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2000, generator=g) * scale).clamp(-6e4, 6e4)  # normals and subnormals of both
    near = x.to(dtype)
    other = torch.nextafter(near, torch.where(near.float() > x, -torch.inf, torch.inf).to(dtype))
    low, high = torch.minimum(near.float(), other.float()), torch.maximum(near.float(), other.float())
    draws = torch.stack([stochastic_round(x, dtype, torch.rand(x.shape, generator=g)).float() for _ in range(400)])
    assert ((draws == low) | (draws == high)).all()  # the representable values either side of x
    # unbiased: the mean of 400 draws is within 5 standard errors (a draw's deviation <= the gap / 2)
    error = (draws.double().mean(dim=0) - x.double()).abs()
    assert (error <= 5 * (high - low).double() / 2 / 400**0.5).all()


def test_stochastic_round_keeps_representable_values_and_saturates() -> None:
    exact = torch.tensor([0.5, -0.25, 0.0, 3.0, 2.0**-24])
    assert torch.equal(stochastic_round(exact, torch.float16, torch.rand(5)).float(), exact)
    huge = stochastic_round(torch.tensor([1e6, -1e6]), torch.float16, torch.rand(2))
    assert huge.tolist() == [65504.0, -65504.0]


# -- int8: within a step, no fp32 copy


def test_int8_quantization_error_is_within_a_step() -> None:
    g = torch.Generator().manual_seed(0)
    values = torch.randn(500, 16, generator=g) * torch.rand(500, 1, generator=g)
    for noise in (None, torch.rand(values.shape, generator=g)):
        codes, scale, zero_point = quantize_rows(values, noise)
        step = scale.float()
        error = (dequantize_rows(codes, scale, zero_point) - values).abs()
        assert (error.max(dim=1).values <= step * (1 + 1e-4) + 1e-7).all()  # below one step
        assert (error.mean(dim=1) <= step / 2 + 1e-7).all()  # half a step on average
        # the step is the widened range / 255, rounded up to bf16 and to an integer zero point: ~1% more
        span = values.amax(dim=1).clamp(min=0) - values.amin(dim=1).clamp(max=0)
        assert (step <= span / 255 * 1.015).all()
    constant = torch.full((2, 4), 0.3)
    error = (dequantize_rows(*quantize_rows(constant)) - constant).abs()
    assert (error <= 0.3 / 255 * 1.01).all()


def test_int8_stores_dim_plus_three_bytes_a_row() -> None:
    module = _build("int8", "sgd")  # sgd: no optimizer state
    assert isinstance(module, Int8Embedding)
    stored = [module.codes, module.scale, module.zero_point]
    assert [t.dtype for t in stored] == [torch.uint8, torch.bfloat16, torch.uint8]
    assert sum(t.untyped_storage().nbytes() for t in stored) == ROWS * (DIM + 3)
    cfg = EmbeddingConfig(strategy="int8")
    assert get_strategy("int8").state_bytes(SIZES, DIM, cfg, "sgd") == ROWS * (DIM + 3)
    assert get_strategy("int8").state_bytes(SIZES, DIM, cfg, "rowwise_adagrad") == ROWS * (DIM + 3 + 4)


def test_int8_represents_zero_exactly() -> None:
    g = torch.Generator().manual_seed(0)
    values = torch.randn(300, 16, generator=g) * torch.rand(300, 1, generator=g)
    values[:, ::3] = 0.0
    values[100:200] = values[100:200].abs()  # rows of one sign: the range is widened to reach 0
    values[200:] = -values[200:].abs()
    values[0] = 0.0  # an all-zero row
    for noise in (None, torch.rand(values.shape, generator=g)):
        out = dequantize_rows(*quantize_rows(values, noise))
        assert torch.equal(out[values == 0], torch.zeros(int((values == 0).sum())))
        assert (out[100:200] >= 0).all() and (out[200:] <= 0).all()  # zero is a code: no sign flips


def test_int8_stochastic_rounding_is_unbiased() -> None:
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 16, generator=g) * 0.1
    codes, scale, zero_point = quantize_rows(values)
    trials = 4000
    noise = torch.rand(trials, *values.shape, generator=g)
    rounded = torch.stack([dequantize_rows(*quantize_rows(values, n)) for n in noise])
    step = scale.float().unsqueeze(1)
    # each draw is within a step; their mean is the value (standard error ~ step / 2 / sqrt(trials))
    assert ((rounded - values).abs() <= step * (1 + 1e-4)).all()
    assert ((rounded.mean(dim=0) - values).abs() <= 4 * step / 2 / math.sqrt(trials)).all()
    nearest = dequantize_rows(codes, scale, zero_point)
    assert not torch.equal(rounded.mean(dim=0), nearest)  # not round-to-nearest in disguise


def test_int8_write_back_is_within_a_step_of_the_fp32_update() -> None:
    module = _build("int8", "rowwise_adagrad")
    assert isinstance(module, Int8Embedding)
    before = _table(module)
    ids = _ids()
    module(ids).square().mean().backward()
    pending = module._pending[-1]
    rows, grad = pending.rows, pending.values.grad
    assert grad is not None
    expected, state = before[rows].clone(), module.row_state[rows].clone()
    RowUpdate("rowwise_adagrad", lr=0.05).apply(expected, grad, state)
    assert module.sparse_step(RowUpdate("rowwise_adagrad", lr=0.05), 1.0)
    error = (_table(module)[rows] - expected).abs()
    scale = module.scale[rows]
    assert (error.max(dim=1).values <= scale * (1 + 1e-4) + 1e-7).all()
    assert error.mean().item() <= (scale / 2).mean().item()
    torch.testing.assert_close(module.row_state[rows], state)


def test_int8_holds_no_fp32_table() -> None:
    module = _build("int8", "rowwise_adagrad")
    tensors = [*module.buffers(), *module.parameters(), *(v for v in vars(module).values() if torch.is_tensor(v))]
    assert not [t.shape for t in tensors if t.is_floating_point() and t.numel() >= ROWS * DIM // 2]
    assert module.codes.dtype == torch.uint8 and module.codes.shape == (ROWS, DIM)


# -- cached: the math of full, whatever the cache holds


@pytest.mark.parametrize("kind", KINDS)
def test_cached_training_equals_full(tiny_cfg: MakeCfg, tmp_path: Path, kind: str) -> None:
    common = (f"optimizer.sparse={kind}", "batch.micro=32", "batch.accum=2", "data.pooling=2", "optimizer.lr=0.05")
    train(tiny_cfg(*common, f"checkpoint.path={tmp_path / 'full.ckpt'}"))
    train(tiny_cfg(*common, "embedding.strategy=cached", f"checkpoint.path={tmp_path / 'cached.ckpt'}"))
    full, cached = _weights(tmp_path / "full.ckpt"), _weights(tmp_path / "cached.ckpt")
    _assert_same_model(full, cached)
    if kind != "sgd":  # the row optimizer's state too
        full_state = torch.load(tmp_path / "full.ckpt", weights_only=False)["optimizers"]["sparse"]["state"][0]["sum"]
        torch.testing.assert_close(cached["embeddings.row_state"], full_state.cpu(), rtol=0, atol=1e-6)


def _assert_same_model(full: dict[str, torch.Tensor], cached: dict[str, torch.Tensor]) -> None:
    dense = [k for k in full if not k.startswith("embeddings.")]
    assert dense and all(k in cached for k in dense)
    for key in dense:
        # The two sum a row's lookups in different orders (full: sparse_optim.pooled_sum; cached:
        # embedding_bag's backward), and the float rounding that differs reaches the MLP weights.
        torch.testing.assert_close(cached[key], full[key], rtol=1e-5, atol=1e-6, msg=lambda m, k=key: f"{k}: {m}")
    assert not torch.equal(full["embeddings.bag.weight"].cpu(), _initial_full_table())  # it trained
    # (cached's table is host memory whatever the device)
    torch.testing.assert_close(cached["embeddings.weight"], full["embeddings.bag.weight"].cpu(), rtol=0, atol=1e-6)


def _initial_full_table() -> torch.Tensor:
    torch.manual_seed(0)
    return build_embedding(SIZES, DIM, EmbeddingConfig(strategy="full"), "sgd").bag.weight.detach()  # type: ignore[union-attr]


def test_cached_starts_from_fulls_table() -> None:
    cached = _build("cached", seed=5)
    torch.manual_seed(5)
    full = build_embedding(SIZES, DIM, EmbeddingConfig(strategy="full"), "sgd")
    assert torch.equal(_table(cached), full.bag.weight.detach())  # type: ignore[union-attr]


def test_cached_resize_mid_training_equals_full(
    tiny_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Grow, shrink, empty and refill the cache between steps; the result must not change.
    plan = {2: 4000, 4: 50, 5: 0, 6: 9000, 7: 300}
    seen: list[CachedEmbedding] = []
    capacities: list[int] = []
    step = CachedEmbedding.sparse_step

    def step_then_resize(self: CachedEmbedding, update: RowUpdate, grad_scale: float) -> bool:
        ok = step(self, update, grad_scale)
        if not is_fake(self.cache_weight):  # the estimator's trace builds one too
            if self not in seen:
                seen.append(self)
            if self._steps in plan:
                self.resize(plan[self._steps])
            capacities.append(int((self.slot_to_row >= 0).sum()))
        return ok

    monkeypatch.setattr(CachedEmbedding, "sparse_step", step_then_resize)
    common = ("optimizer.sparse=rowwise_adagrad", "steps=9", "optimizer.lr=0.05", "data.pooling=2")
    train(tiny_cfg(*common, f"checkpoint.path={tmp_path / 'full.ckpt'}"))
    train(tiny_cfg(*common, "embedding.strategy=cached", f"checkpoint.path={tmp_path / 'cached.ckpt'}"))
    _assert_same_model(_weights(tmp_path / "full.ckpt"), _weights(tmp_path / "cached.ckpt"))
    (module,) = seen
    assert capacities[4] == 0 and 0 < capacities[1] <= 4000 and 0 < capacities[3] <= 50
    assert module.capacity == 300 and capacities[-1] == 300  # refilled from the counts
    # every id looked up is counted once: 9 steps x 64 samples x 26 features x 2, and evaluation
    assert module.hits + module.misses == 9 * 64 * 26 * 2 + 512 * 26 * 2
    assert module.hits > 0 and module.misses > 0


def test_cached_warm_up_then_lfu() -> None:
    module = _build("cached", "sgd", cache_rows=40)
    assert isinstance(module, CachedEmbedding) and module.capacity == 40 and module.warmup_steps == 2
    hot = torch.zeros(8, len(SIZES), 1, dtype=torch.int64)  # row 0 of every table, 8 times per step
    update = RowUpdate("sgd", lr=0.01)
    _step(module, hot, update)
    assert module.hits == 0 and int((module.slot_to_row >= 0).sum()) == 0  # warm-up: only counting
    _step(module, hot, update)
    assert int((module.slot_to_row >= 0).sum()) == 26  # warm-up over: the rows seen are admitted
    before = module.hits
    module(hot)
    assert module.hits - before == hot.numel()
    # A cold batch (each row used a few times) fills the free slots but cannot displace hot rows.
    hot_rows = set(OFFSETS.tolist())
    _step(module, _ids(batch=4, pooling=1, seed=7), update)
    cached_rows = set(module.slot_to_row[module.slot_to_row >= 0].tolist())
    assert hot_rows <= cached_rows and len(cached_rows) == 40
    # A row used more often than the least used cached rows takes the place of one of them.
    frequent = hot.repeat(100, 1, 1)
    frequent[:, 2] = 5  # row 5 of feature 2's table
    _step(module, frequent, update)
    after = set(module.slot_to_row[module.slot_to_row >= 0].tolist())
    assert int(OFFSETS[2]) + 5 in after and hot_rows <= after and len(after) == 40
    assert len(cached_rows - after) == 1  # one cold row evicted, written back to the host
    assert module.hit_rate > 0


def test_cached_keeps_host_tensors_on_the_host() -> None:
    module = _build("cached")
    assert isinstance(module, CachedEmbedding)
    assert list(module.state_dict()) == ["step_count", "rounding_seed", "weight", "row_state", "counts"]
    host = module.weight
    module.to("meta")  # any other device: the cache moves, the host table does not
    assert module.weight is host and module.weight.device.type == "cpu"
    assert module.cache_weight.device.type == "meta"


def test_cached_dedupe_is_unique_without_sorting() -> None:
    module = _build("cached")
    assert isinstance(module, CachedEmbedding)
    ids = torch.tensor([7, 3, 7, 7, 0, 3, 9, 0], dtype=torch.int64)
    rows, inverse, counts = module._dedupe(ids)
    assert rows.tolist() == [7, 3, 0, 9]  # distinct, in order of first occurrence
    assert torch.equal(rows[inverse], ids)
    assert counts.tolist() == [3, 2, 2, 1]
    assert bool((module.first_seen == 2**31 - 1).all())  # the scratch is clean for the next batch
    big = torch.randint(0, module.num_rows, (5000,), generator=torch.Generator().manual_seed(1))
    rows, inverse, counts = module._dedupe(big)
    assert torch.equal(rows.sort().values, torch.unique(big)) and torch.equal(rows[inverse], big)
    assert torch.equal(counts, torch.bincount(inverse))


def test_cache_capacity_from_config() -> None:
    assert cache_capacity(1000, EmbeddingConfig(strategy="cached")) == 100
    assert cache_capacity(1000, EmbeddingConfig(strategy="cached", cache_ratio=0.015)) == 15
    assert cache_capacity(1000, EmbeddingConfig(strategy="cached", cache_rows=5000)) == 1000


# -- checkpoints, determinism, the estimator


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_continues_identically(name: str) -> None:
    update = RowUpdate("rowwise_adagrad", lr=0.05)
    a = _build(name)
    for seed in range(3):
        _step(a, _ids(seed=seed), update)
    b = _build(name, seed=9)  # different weights until loaded
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(_table(b), _table(a), rtol=0, atol=0)
    for module in (a, b):
        _step(module, _ids(seed=3), update)
    torch.testing.assert_close(_table(b), _table(a), rtol=0, atol=0)
    for key, value in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[key], value, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_resume_continues_exactly(tiny_cfg: MakeCfg, tmp_path: Path, name: str) -> None:
    args = (f"embedding.strategy={name}", "optimizer.sparse=rowwise_adagrad", "optimizer.lr=0.05")
    straight, resumed = tmp_path / "straight.ckpt", tmp_path / "resumed.ckpt"
    train(tiny_cfg(*args, "steps=8", f"checkpoint.path={straight}"))
    train(tiny_cfg(*args, "steps=4", f"checkpoint.path={resumed}"))
    shutil.copy(resumed, tmp_path / "half_way.ckpt")
    train(tiny_cfg(*args, "steps=8", f"checkpoint.path={resumed}", "checkpoint.resume=true"))
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6, msg=lambda m, k=key: f"{k}: {m}")
    assert not torch.equal(_weights(tmp_path / "half_way.ckpt")["embeddings.step_count"], a["embeddings.step_count"])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_trains_in_low_precision(tiny_cfg: MakeCfg, name: str, precision: str) -> None:
    result = train(tiny_cfg(f"embedding.strategy={name}", "optimizer.sparse=adagrad", f"precision={precision}"))
    assert math.isfinite(result.train_loss) and math.isfinite(result.metrics["logloss"])


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_training(name: str) -> None:
    def run(seed: int) -> torch.Tensor:
        module = _build(name, seed=seed)
        for batch_seed in range(3):
            _step(module, _ids(seed=batch_seed), RowUpdate("rowwise_adagrad", lr=0.05))
        return _table(module)

    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))


@pytest.mark.parametrize("name", NAMES)
def test_the_estimator_traces_each_strategy(name: str) -> None:
    args = ["data.rows_scale=0.0005", f"embedding.strategy={name}", "optimizer.sparse=adagrad"]
    for extra in ([], ["batch.micro=512", "batch.accum=2", "data.pooling=3"]):
        est = estimate(load_run_config(None, [*args, *extra]))
        assert est.peak_bytes > 0 and est.breakdown["parameters"] > 0


def test_formulas_match_the_built_modules() -> None:
    for name in NAMES:
        for kind in KINDS:
            cfg = EmbeddingConfig(strategy=name)
            module = _build(name, kind)
            held = sum(t.numel() * t.element_size() for t in module.buffers())
            formula = get_strategy(name).state_bytes(SIZES, DIM, cfg, kind)
            assert abs(formula - held) <= 0.01 * held, (name, kind, formula, held)
