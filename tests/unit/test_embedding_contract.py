"""The contract every embedding strategy keeps (embeddings/base.py), checked for each registered one.

Shapes and dtype, gradient flow (or, for self-updating strategies, rows that move after a step),
determinism by seed, and bytes: the strategy's formula, the estimator's fake-tensor trace of the
build and the tensors the built module really holds agree within 10%.
"""

from __future__ import annotations

import pytest
import torch
from elastune.config import EmbeddingConfig
from elastune.data.clicks import table_sizes
from elastune.embeddings import build_embedding, get_strategy, strategies
from elastune.embeddings.sparse_optim import RowUpdate, SelfUpdating
from elastune.memory.live_bytes import LiveBytes
from elastune.validate import load_run_config
from torch._subclasses.fake_tensor import FakeTensorMode

SIZES = table_sizes(0.0005)  # 26 tables, 3 to ~5k rows: every code path, small and fast
DIM = 8


def _optimizer_for(name: str) -> str:
    return "rowwise_adagrad" if get_strategy(name).self_updating else "adam"


def _build(name: str, seed: int = 0, **fields: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_embedding(SIZES, DIM, EmbeddingConfig(strategy=name, **fields), _optimizer_for(name))


def _ids(batch: int = 64, pooling: int = 2, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    cols = [torch.randint(0, n, (batch, 1, pooling), generator=g) for n in SIZES]
    return torch.cat(cols, dim=1)


def _held_bytes(module: torch.nn.Module) -> int:
    tensors = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in module.state_dict().values()}
    for t in [*module.parameters(), *module.buffers()]:
        tensors[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(tensors.values())


@pytest.fixture(params=strategies())
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_output_is_pooled_bags_in_fp32(name: str) -> None:
    out = _build(name)(_ids())
    assert out.shape == (64, len(SIZES), DIM)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_pooling_sums_the_bag(name: str) -> None:
    emb = _build(name)
    ids = _ids(pooling=2)
    both = emb(ids)
    first, second = emb(ids[:, :, :1]), emb(ids[:, :, 1:])
    torch.testing.assert_close(both, first + second, rtol=1e-5, atol=1e-6)


def test_a_training_step_reaches_the_rows(name: str) -> None:
    emb = _build(name)
    ids = _ids()
    before = emb(ids).detach().clone()
    loss = emb(ids).square().mean()
    loss.backward()
    if isinstance(emb, SelfUpdating):
        assert emb.sparse_step(RowUpdate("sgd", lr=1.0), grad_scale=1.0)
    else:
        params = emb.sparse_parameters()  # type: ignore[operator]
        assert params
        for p in params:
            assert p.grad is not None, "a sparse parameter got no gradient"
        with torch.no_grad():
            for p in params:
                grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
                p.add_(grad, alpha=-1.0)
    after = emb(ids).detach()
    assert not torch.allclose(before, after), "the step changed nothing the lookup sees"
    # Descending on sum(x^2) shrinks the looked-up bags.
    assert after.square().sum() < before.square().sum()


def test_the_same_seed_builds_the_same_tables(name: str) -> None:
    ids = _ids()
    torch.testing.assert_close(_build(name, seed=3)(ids), _build(name, seed=3)(ids), rtol=0, atol=0)
    assert not torch.equal(_build(name, seed=3)(ids), _build(name, seed=4)(ids))


def test_formula_trace_and_module_agree_on_bytes(name: str) -> None:
    cfg = EmbeddingConfig(strategy=name)
    opt = _optimizer_for(name)
    formula = get_strategy(name).state_bytes(SIZES, DIM, cfg, opt)
    held = _held_bytes(_build(name))
    tracker = LiveBytes()
    with FakeTensorMode(), tracker:
        module = build_embedding(SIZES, DIM, cfg, opt)
        traced = tracker.current
        del module
    assert abs(formula - held) <= 0.1 * held, (formula, held)
    assert abs(traced - held) <= 0.1 * held, (traced, held)


def test_the_estimator_prices_a_whole_run(name: str) -> None:
    from elastune.memory.estimate import estimate

    opt = _optimizer_for(name)
    cfg = load_run_config(None, ["data.rows_scale=0.0005", f"embedding.strategy={name}", f"optimizer.sparse={opt}"])
    est = estimate(cfg)
    assert est.breakdown["parameters"] > 0 and est.peak_bytes > est.breakdown["parameters"]
