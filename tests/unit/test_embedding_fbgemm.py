"""embedding.backend=fbgemm: FBGEMM's fused table-batched kernels (optimizer applied in backward).

The contract every strategy keeps (test_embedding_contract.py), for the fbgemm variants; the same
parameters as the torch path after several steps of the same optimizer; and the training loop
wiring: no torch optimizer steps the fused tables, and the run's learning rate reaches the kernel.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from elastune.cli import main
from elastune.config import EmbeddingConfig
from elastune.data.clicks import table_sizes
from elastune.embeddings import build_embedding, spec_for, strategies
from elastune.embeddings.fbgemm import FbgemmEmbedding, fbgemm_import_error
from elastune.embeddings.full import FullEmbedding
from elastune.embeddings.sparse_optim import RowUpdate, SparseRowOptimizer
from elastune.memory.estimate import estimate
from elastune.memory.live_bytes import LiveBytes
from elastune.training.optim import Optimizers
from elastune.training.precision import autocast_for
from elastune.training.step import forward_backward
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.conftest import TINY

pytestmark = pytest.mark.skipif(fbgemm_import_error() is not None, reason=f"fbgemm_gpu {fbgemm_import_error()}")

SIZES = table_sizes(0.0005)  # 26 tables, 3 to ~5k rows
DIM = 8
KINDS = ("sgd", "adagrad", "rowwise_adagrad")
# fp32 on both paths, same math, different summation order (the kernel sums a row's repeated
# gradients in its own order): a few ulp (2^-24 relative) per step, so ~1e-6 after 20 steps. A
# wrong update (another eps, per-element vs row-wise state, repeats not summed, a double step)
# moves rows by ~lr = 1e-2, four orders of magnitude more.
RTOL, ATOL = 1e-5, 2e-6


def _cfg(strategy: str) -> EmbeddingConfig:
    return EmbeddingConfig(strategy=strategy, backend="fbgemm")


def _build(strategy: str, kind: str = "rowwise_adagrad", seed: int = 0, lr: float = 0.1) -> Any:
    torch.manual_seed(seed)
    emb = build_embedding(SIZES, DIM, _cfg(strategy), kind)
    emb.set_row_update(RowUpdate(kind, lr))
    return emb


def _ids(batch: int = 64, pooling: int = 2, seed: int = 1, skew: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # skew: ids from the first few rows only, so rows repeat within a batch (the kernel must sum them)
    cols = [torch.randint(0, min(n, 4) if skew else n, (batch, 1, pooling), generator=g) for n in SIZES]
    return torch.cat(cols, dim=1)


@pytest.fixture(params=strategies("fbgemm"))
def strategy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- the contract (base.py), for the fbgemm variants


def test_output_is_pooled_bags_in_fp32(strategy: str) -> None:
    out = _build(strategy)(_ids())
    assert out.shape == (64, len(SIZES), DIM) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_pooling_sums_the_bag(strategy: str) -> None:
    emb, ids = _build(strategy), _ids(pooling=2)
    with torch.no_grad():
        torch.testing.assert_close(emb(ids), emb(ids[:, :, :1]) + emb(ids[:, :, 1:]), rtol=1e-5, atol=1e-6)


def test_the_backward_updates_the_rows(strategy: str) -> None:
    emb, ids = _build(strategy, "sgd", lr=1.0), _ids()
    with torch.no_grad():
        before = emb(ids)
    emb(ids).square().mean().backward()  # the kernel applies the update here; there is no step
    with torch.no_grad():
        after = emb(ids)
    assert not torch.allclose(before, after)
    assert after.square().sum() < before.square().sum()  # descending on sum(x^2) shrinks the bags


def test_the_same_seed_builds_the_same_tables(strategy: str) -> None:
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(_build(strategy, seed=3)(ids), _build(strategy, seed=3)(ids), rtol=0, atol=0)
        assert not torch.equal(_build(strategy, seed=3)(ids), _build(strategy, seed=4)(ids))


@pytest.mark.parametrize("kind", KINDS)
def test_formula_trace_and_module_agree_on_bytes(strategy: str, kind: str) -> None:
    cfg = _cfg(strategy)
    formula = spec_for(cfg).state_bytes(SIZES, DIM, cfg, kind)
    module = _build(strategy, kind)
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in module.state_dict().values()}
    for t in [*module.parameters(), *module.buffers()]:
        held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    tracker = LiveBytes()
    with FakeTensorMode(), tracker:
        fake = build_embedding(SIZES, DIM, cfg, kind)
        traced = tracker.current
        del fake
    assert abs(formula - sum(held.values())) <= 0.1 * sum(held.values()), (formula, held)
    assert abs(traced - sum(held.values())) <= 0.1 * sum(held.values()), (traced, held)


def test_the_estimator_prices_a_whole_run(strategy: str) -> None:
    cfg = load_run_config(
        None,
        [
            "data.rows_scale=0.0005",
            "embedding.backend=fbgemm",
            f"embedding.strategy={strategy}",
            "optimizer.sparse=sgd",
        ],
    )
    est = estimate(cfg)
    assert est.breakdown["parameters"] > 0 and est.peak_bytes > est.breakdown["parameters"]
    assert est.breakdown["gradients"] < est.breakdown["parameters"] / 10  # no table gradient, ever


# -- the same parameters as the torch path


def _torch_and_fbgemm(kind: str, lr: float) -> tuple[FullEmbedding, torch.optim.Optimizer, FbgemmEmbedding]:
    torch.manual_seed(0)
    ref = FullEmbedding(SIZES, DIM, sparse_grad=True)
    fused = FbgemmEmbedding(SIZES, DIM, kind)
    fused.set_row_update(RowUpdate(kind, lr))
    with torch.no_grad():  # the same starting rows
        parts = torch.split(ref.bag.weight, list(SIZES))
        for w, part in zip(fused.tbe.split_embedding_weights(), parts, strict=True):
            w.copy_(part)
    return ref, SparseRowOptimizer(ref.sparse_parameters(), kind, lr=lr), fused


@pytest.mark.parametrize("kind", KINDS)
def test_same_rows_as_the_torch_path_after_20_steps(kind: str) -> None:
    ref, opt, fused = _torch_and_fbgemm(kind, lr=0.01)
    torch.testing.assert_close(fused.weights(), ref.bag.weight.detach(), rtol=0, atol=0)
    target = torch.randn(64, len(SIZES), DIM, generator=torch.Generator().manual_seed(5))
    for step in range(20):
        ids = _ids(seed=10 + step, skew=step % 2 == 0)
        (ref(ids) - target).square().sum().backward()
        opt.step()
        opt.zero_grad()
        (fused(ids) - target).square().sum().backward()
    moved = (ref.bag.weight.detach() - fused.weights()).abs().max()
    torch.testing.assert_close(fused.weights(), ref.bag.weight.detach(), rtol=RTOL, atol=ATOL, msg=f"{moved}")
    assert not torch.equal(ref.bag.weight.detach(), FullEmbedding(SIZES, DIM).bag.weight)  # it did train


def test_half_stays_within_fp16_rounding_of_fp32() -> None:
    # fp16 rows: the start is rounded to nearest (half a gap off), then each stochastically rounded
    # write is off by under one gap between fp16 values, zero on average; the gradients, computed
    # from the fp16 rows of a bag, carry those errors into other rows' updates. So the bound is in
    # gaps at the table's largest magnitude (at most 2^-10 of it): 4 of them (1.5 measured).
    ref, opt, _ = _torch_and_fbgemm("rowwise_adagrad", lr=0.01)
    half = FbgemmEmbedding(SIZES, DIM, "rowwise_adagrad", torch.float16)
    half.set_row_update(RowUpdate("rowwise_adagrad", 0.01))
    start_rows = ref.bag.weight.detach().clone()
    with torch.no_grad():
        for w, part in zip(half.tbe.split_embedding_weights(), torch.split(start_rows, list(SIZES)), strict=True):
            w.copy_(part)
    for step in range(10):
        ids = _ids(seed=10 + step)
        ref(ids).square().sum().backward()
        opt.step()
        opt.zero_grad()
        half(ids).square().sum().backward()
    full_rows = ref.bag.weight.detach()
    parts = zip(torch.split(half.weights() - full_rows, list(SIZES)), torch.split(full_rows, list(SIZES)), strict=True)
    for err, rows in parts:
        assert err.abs().max() <= 4 * 2.0**-10 * rows.abs().max()
    gap = 2.0**-10 * full_rows.abs()
    moved = (full_rows - start_rows).abs() > 32 * gap  # elements the fp32 path moved by many fp16 gaps
    assert moved.sum() > 100
    assert ((half.weights() - start_rows)[moved].sign() == (full_rows - start_rows)[moved].sign()).all()


# -- the training loop's wiring


def test_the_loop_steps_the_mlps_and_leaves_the_tables_to_the_kernel() -> None:
    def run(backend: str) -> tuple[Any, Optimizers]:
        cfg = load_run_config(None, [*TINY, "optimizer.sparse=rowwise_adagrad", f"embedding.backend={backend}"])
        workload = build_workload(cfg)
        torch.manual_seed(0)
        model = workload.build_model()
        if backend == "fbgemm":  # the same starting MLPs and rows as the torch model's
            torch.manual_seed(0)
            same = build_workload(load_run_config(None, [*TINY, "optimizer.sparse=rowwise_adagrad"])).build_model()
            mlps = {k: v for k, v in same.state_dict().items() if not k.startswith("embeddings.")}
            assert not model.load_state_dict(mlps, strict=False).unexpected_keys
            with torch.no_grad():
                parts = torch.split(same.embeddings.bag.weight, list(workload.table_sizes))  # type: ignore[union-attr]
                for w, part in zip(model.embeddings.tbe.split_embedding_weights(), parts, strict=True):  # type: ignore[union-attr]
                    w.copy_(part)
        opts = Optimizers(model, cfg.optimizer)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        source = workload.data_source()
        for step in range(3):
            batch = source.read(step * 64, 64)
            forward_backward(model, workload, batch, 64, autocast_for("fp32", torch.device("cpu")), scaler)
            opts.step(scaler)
            opts.zero_grad()
        return model, opts

    ref, _ = run("torch")
    fused, opts = run("fbgemm")
    assert opts.sparse is None  # no torch optimizer for the tables
    dense_ids = {id(p) for group in opts.dense.param_groups for p in group["params"]}
    assert not dense_ids & {id(p) for p in fused.embeddings.fused_parameters()}
    assert fused.embeddings.tbe.get_learning_rate() == pytest.approx(3e-3)
    torch.testing.assert_close(fused.embeddings.weights(), ref.embeddings.bag.weight.detach(), rtol=RTOL, atol=ATOL)
    mlps = {name: p for name, p in fused.named_parameters() if not name.startswith("embeddings.")}
    assert mlps
    for name, p in ref.named_parameters():
        if not name.startswith("embeddings."):
            torch.testing.assert_close(mlps[name], p, rtol=1e-4, atol=1e-6)  # the dense optimizer stepped both alike


def test_a_state_dict_round_trip_keeps_rows_and_optimizer_state() -> None:
    emb = _build("full", "rowwise_adagrad")
    emb(_ids()).square().sum().backward()
    fresh = _build("full", "rowwise_adagrad", seed=9)
    fresh.load_state_dict(emb.state_dict())
    torch.testing.assert_close(fresh.weights(), emb.weights(), rtol=0, atol=0)
    torch.testing.assert_close(fresh.tbe.momentum1_host, emb.tbe.momentum1_host, rtol=0, atol=0)


def test_the_cli_trains_with_the_fbgemm_backend(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "--format", "json"]
    for item in [*TINY, "embedding.backend=fbgemm", "embedding.strategy=half", "optimizer.sparse=rowwise_adagrad"]:
        args += ["--set", item]
    assert main(args) == 0
    import json

    payload = json.loads(capsys.readouterr().out)
    assert payload["config"]["embedding"]["backend"] == "fbgemm"
    assert 0.0 <= payload["val_auc"] <= 1.0 and payload["estimated_peak_bytes"] > 0
