"""elastune's row-wise sparse optimizers against torch's own where torch has one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from elastune.config import RunConfig
from elastune.embeddings.sparse_optim import (
    RowUpdate,
    SparseRowOptimizer,
    coalesce_rows,
    pooled_sum,
    state_width,
    write_rows,
)
from elastune.training.loop import train

MakeCfg = Callable[..., RunConfig]


def _twin_tables(rows: int = 1000, dim: int = 8) -> tuple[torch.nn.EmbeddingBag, torch.nn.EmbeddingBag]:
    torch.manual_seed(0)
    a = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
    b = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
    b.load_state_dict(a.state_dict())
    return a, b


def _steps(table: torch.nn.EmbeddingBag, opt: torch.optim.Optimizer, n: int = 5) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        ids = torch.randint(0, 50, (32, 3), generator=g)  # rows 50+ are never touched
        table(ids).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize(("kind", "reference"), [("sgd", torch.optim.SGD), ("adagrad", torch.optim.Adagrad)])
def test_matches_torch_on_sparse_gradients(kind: str, reference: type[torch.optim.Optimizer]) -> None:
    ours, theirs = _twin_tables()
    _steps(ours, SparseRowOptimizer(ours.parameters(), kind, lr=0.5))
    _steps(theirs, reference(theirs.parameters(), lr=0.5))
    torch.testing.assert_close(ours.weight, theirs.weight, rtol=1e-6, atol=1e-7)
    assert not torch.equal(ours.weight, _twin_tables()[0].weight)  # the steps did something


def test_rowwise_adagrad_keeps_one_float_per_row_and_follows_its_formula() -> None:
    table, _ = _twin_tables(rows=10, dim=4)
    opt = SparseRowOptimizer(table.parameters(), "rowwise_adagrad", lr=0.1)
    w0 = table.weight.detach().clone()
    ids = torch.tensor([[2, 2, 7]])
    table(ids).sum().backward()
    grad = table.weight.grad.to_dense()
    opt.step()
    acc = opt.state[table.weight]["sum"]
    assert acc.shape == (10, 1)
    g2 = grad[2]  # row 2 appears twice in the bag: its gradient is 2
    assert torch.allclose(acc[2], g2.square().mean().reshape(1))
    expected = w0[2] - 0.1 * g2 / (acc[2].sqrt() + 1e-10)
    torch.testing.assert_close(table.weight[2].detach(), expected)
    untouched = [r for r in range(10) if r not in (2, 7)]
    assert torch.equal(table.weight[untouched].detach(), w0[untouched])
    assert torch.equal(acc[untouched], torch.zeros(len(untouched), 1))


def test_untouched_rows_and_their_state_never_change() -> None:
    table, _ = _twin_tables(rows=100_000)
    before = table.weight.detach().clone()
    opt = SparseRowOptimizer(table.parameters(), "adagrad", lr=0.5)
    _steps(table, opt)
    assert torch.equal(table.weight[50:].detach(), before[50:])
    assert not torch.equal(table.weight[:50].detach(), before[:50])


def test_coalesce_sums_repeated_rows() -> None:
    rows, grads = coalesce_rows(torch.tensor([3, 1, 3]), torch.tensor([[1.0], [2.0], [4.0]]), num_rows=5)
    assert rows.tolist() == [1, 3]
    assert grads.squeeze(1).tolist() == [2.0, 5.0]


def test_state_width_is_what_each_optimizer_keeps() -> None:
    assert [state_width(k, 16) for k in ("sgd", "adagrad", "rowwise_adagrad")] == [0, 16, 1]
    with pytest.raises(ValueError, match="unknown row optimizer 'adam'"):
        RowUpdate("adam", lr=0.1)


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad"])
def test_training_with_a_row_optimizer_learns(tiny_cfg: MakeCfg, kind: str) -> None:
    r = train(tiny_cfg(f"optimizer.sparse={kind}", "optimizer.lr=0.05", "steps=40", "eval.samples=2048"))
    assert r.metrics["auc"] > 0.6  # chance is 0.5; the tiny model's ceiling here is about 0.75


def _reference_step(
    weight: torch.Tensor, state: torch.Tensor, ids: torch.Tensor, upstream: torch.Tensor, kind: str
) -> None:
    """The row optimizers written out row by row on a dense table: the gradient of row r is the sum
    of the upstream gradients of every bag slot that looks r up."""
    grad = torch.zeros_like(weight)
    for bag, slots in enumerate(ids.tolist()):
        for row in slots:
            grad[row] += upstream[bag]
    for row in sorted(set(ids.flatten().tolist())):
        g = grad[row]
        if kind == "sgd":
            weight[row] -= 0.5 * g
            continue
        if kind == "adagrad":
            state[row] += g * g
        else:
            state[row] += (g * g).mean()
        weight[row] -= 0.5 * g / (state[row].sqrt() + 1e-10)


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad"])
@pytest.mark.parametrize("micro_batches", [1, 2])
def test_pooled_sum_path_matches_a_row_by_row_reference(kind: str, micro_batches: int) -> None:
    table, _ = _twin_tables(rows=200, dim=8)
    weight = table.weight.detach().clone()
    state = torch.zeros(200, state_width(kind, 8))
    opt = SparseRowOptimizer(table.parameters(), kind, lr=0.5)
    g = torch.Generator().manual_seed(2)
    for _ in range(4):
        batches = [torch.randint(0, 60, (16, 3), generator=g) for _ in range(micro_batches)]  # rows repeat
        upstreams = [torch.randn(16, 8, generator=g) for _ in batches]
        for ids, upstream in zip(batches, upstreams, strict=True):
            pooled_sum(ids, table.weight).backward(upstream)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _reference_step(weight, state, torch.cat(batches), torch.cat(upstreams), kind)
    torch.testing.assert_close(table.weight.detach(), weight, rtol=1e-5, atol=1e-6)
    if kind != "sgd":
        torch.testing.assert_close(opt.state[table.weight]["sum"], state, rtol=1e-5, atol=1e-6)
    assert torch.equal(table.weight[60:].detach(), _twin_tables(rows=200, dim=8)[0].weight[60:])


def test_pooled_sum_gives_one_gradient_row_per_distinct_id() -> None:
    table, stock = _twin_tables(rows=100, dim=4)
    ids = torch.tensor([[5, 5, 9], [9, 1, 5]])
    upstream = torch.randn(2, 4)
    out = pooled_sum(ids, table.weight)
    torch.testing.assert_close(out, stock(ids))
    out.backward(upstream)
    stock(ids).backward(upstream)
    grad = table.weight.grad
    assert grad is not None and grad.is_sparse
    assert grad._indices()[0].tolist() == [1, 5, 9]
    torch.testing.assert_close(grad.to_dense(), stock.weight.grad.to_dense())


@pytest.mark.parametrize(
    ("dim", "dtype"), [(64, torch.float32), (6, torch.float32), (8, torch.float16), (1, torch.float32)]
)
def test_write_rows_is_index_copy(dim: int, dtype: torch.dtype) -> None:
    table = torch.randn(100, dim).to(dtype)
    expected = table.clone()
    rows, values = torch.tensor([3, 50, 7]), torch.randn(3, dim).to(dtype)
    write_rows(table, rows, values)
    expected.index_copy_(0, rows, values)
    assert torch.equal(table, expected)
