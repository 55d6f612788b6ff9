"""`TableSpec` + `build_tables`: a workload declares its tables and gets them in the run's strategy.
One feature per table of one width is the table-batched module DLRM always had; shared tables and
mixed widths are a `TableSet` whose features read the table they name."""

from __future__ import annotations

import pytest
import torch
from elastune import TableSpec, build_tables
from elastune.config import EmbeddingConfig, OptimizerConfig
from elastune.embeddings import build_embedding, get_strategy, strategies
from elastune.embeddings.swap import strategy_modules
from elastune.embeddings.tables import TableSet
from elastune.training.optim import Optimizers
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from torch import nn

from tests.conftest import TINY


def _sparse(name: str) -> str:
    return "rowwise_adagrad" if get_strategy(name).self_updating else "adam"


def test_dlrm_declares_its_tables_and_gets_the_same_module_as_before() -> None:
    cfg = load_run_config(None, TINY)
    workload = build_workload(cfg)
    torch.manual_seed(0)
    declared = workload.build_model().embeddings  # type: ignore[union-attr]
    torch.manual_seed(0)
    direct = build_embedding(workload.table_sizes, cfg.model.embedding_dim, cfg.embedding, cfg.optimizer.sparse)
    assert type(declared) is type(direct) and declared.table_sizes == direct.table_sizes
    torch.manual_seed(0)
    again = build_tables(
        [TableSpec(f"C{i + 1}", rows, cfg.model.embedding_dim) for i, rows in enumerate(workload.table_sizes)],
        cfg.embedding,
    )
    assert all(
        torch.equal(a, b) for a, b in zip(again.state_dict().values(), direct.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize("name", strategies())
def test_a_shared_table_is_one_table_read_by_each_of_its_features(name: str) -> None:
    tables = [TableSpec("items", 200, 8, features=("clicked", "bought")), TableSpec("users", 300, 8)]
    emb = build_tables(tables, EmbeddingConfig(strategy=name), _sparse(name))
    assert isinstance(emb, TableSet) and emb.features == ["clicked", "bought", "users"]
    assert emb.table_sizes == (200, 200, 300)
    ids = torch.randint(0, 200, (16, 3, 2))
    out = emb(ids)
    assert isinstance(out, torch.Tensor) and out.shape == (16, 3, 8) and out.dtype == torch.float32
    same = ids.clone()
    same[:, 1, :] = same[:, 0, :]  # "bought" reads the ids "clicked" read: the same rows, the same vectors
    pooled = emb(same)
    assert isinstance(pooled, torch.Tensor)
    torch.testing.assert_close(pooled[:, 0], pooled[:, 1])
    assert len(list(strategy_modules(nn.Sequential(emb)))) == 2  # two tables, not three


def test_tables_of_different_widths_come_back_by_feature_and_train() -> None:
    tables = [TableSpec("users", 300, 16), TableSpec("items", 200, 8, pooling=2)]
    embeddings = build_tables(tables, EmbeddingConfig(strategy="full"), "rowwise_adagrad")
    model = nn.ModuleDict({"embeddings": embeddings, "head": nn.Linear(24, 1)})
    out = embeddings(torch.randint(0, 200, (4, 2, 2)))
    assert isinstance(out, dict) and out["users"].shape == (4, 16) and out["items"].shape == (4, 8)
    opts = Optimizers(model, OptimizerConfig(sparse="rowwise_adagrad", lr=0.5))
    before = [p.detach().clone() for p in model.parameters()]
    opts.zero_grad()
    by_feature = embeddings(torch.randint(0, 200, (4, 2, 2)))
    model["head"](torch.cat([by_feature["users"], by_feature["items"]], dim=1)).square().sum().backward()
    opts.step(torch.amp.GradScaler("cpu", enabled=False))
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("tables", "says"),
    [
        ([], "at least one table"),
        ([TableSpec("a", 10, 4, features=("x",)), TableSpec("b", 10, 4, features=("x", "y"))], "x"),
    ],
)
def test_bad_table_declarations_are_refused(tables: list[TableSpec], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        build_tables(tables, EmbeddingConfig())


def test_a_table_spec_checks_its_numbers() -> None:
    with pytest.raises(ValueError, match="table 'tiny': rows must be >= 2"):
        TableSpec("tiny", 1, 4)


def _backward_bytes(features: int, batch: int = 64, dim: int = 16) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Bytes the aten ops of one backward through a table read by `features` features write (their
    outputs' sizes), with the table's gradient and the ids the forward read."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Written(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    Written.total += t.numel() * t.element_size()
            return out

    names = tuple(f"f{i}" for i in range(features))
    torch.manual_seed(0)
    emb = build_tables([TableSpec("words", 50, dim, features=names)], EmbeddingConfig(strategy="full"))
    ids = torch.randint(0, 50, (batch, features, 1))
    out = emb(ids)
    assert isinstance(out, torch.Tensor)
    loss = (out * torch.arange(features * dim, dtype=torch.float32).view(1, features, dim)).sum()
    with Written():
        loss.backward()
    (weight,) = list(emb.parameters())
    assert weight.grad is not None
    return Written.total, weight.grad, ids


def test_a_table_read_by_many_features_backpropagates_in_work_linear_in_them() -> None:
    """Each feature's slice of a shared table's output: the backward writes about as many bytes
    per feature for 64 features as for 8 (a select per feature wrote a zero-filled copy of the whole
    output per feature: six times as many per feature at 64). The gradient is each feature's
    upstream gradient summed into the rows it read."""
    few, _, _ = _backward_bytes(8)
    many, grad, ids = _backward_bytes(64)
    assert many / 64 < 2 * few / 8, (few, many)
    upstream = torch.arange(64 * 16, dtype=torch.float32).view(64, 16)  # d loss / d out[b, j]: the same for every b
    expected = torch.zeros(50, 16)
    expected.index_add_(0, ids[:, :, 0].reshape(-1), upstream.repeat(ids.shape[0], 1))
    torch.testing.assert_close(grad, expected)
