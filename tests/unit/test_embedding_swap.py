"""`elastune.swap_embeddings`: a user's own PyTorch model gets every strategy with one call.

The swapped modules answer the calls their `nn.Embedding` / `nn.EmbeddingBag` answered (same
shapes; for `full`, the same numbers as torch given the same weights), the strategy contract holds
through them (fp32 output, gradients or row updates reach the table, bytes as priced), and the
run's optimizers find and train them wherever they sit in the model.
"""

from __future__ import annotations

import pytest
import torch
from elastune import swap_embeddings
from elastune.config import EmbeddingConfig, OptimizerConfig
from elastune.embeddings import get_strategy, strategies
from elastune.embeddings.swap import SwappedEmbedding, strategy_modules
from elastune.training.optim import Optimizers
from torch import nn

DIM = 8


class UserModel(nn.Module):
    """An ordinary two-tower-ish model: a plain Embedding with a padding row, a mean bag nested in a
    submodule, a sum bag fed 1-D ids with offsets, and a dense head."""

    def __init__(self) -> None:
        super().__init__()
        self.users = nn.Embedding(300, DIM, padding_idx=0)
        self.items = nn.ModuleDict({"history": nn.EmbeddingBag(200, DIM, mode="mean")})
        self.tags = nn.EmbeddingBag(120, DIM, mode="sum")
        self.head = nn.Linear(3 * DIM, 1)

    def forward(
        self, user: torch.Tensor, history: torch.Tensor, tags: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        u = self.users(user)  # [B, DIM]
        h = self.items["history"](history)  # [B, DIM]
        t = self.tags(tags, offsets)  # [B, DIM]
        return self.head(torch.cat([u, h, t], dim=1)).squeeze(1)


def _inputs(batch: int = 16, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    user = torch.randint(0, 300, (batch,), generator=g)
    user[0] = 0  # the padding row
    history = torch.randint(0, 200, (batch, 5), generator=g)
    lengths = torch.randint(1, 4, (batch,), generator=g)
    tags = torch.randint(0, 120, (int(lengths.sum()),), generator=g)
    offsets = torch.cumsum(lengths, 0) - lengths
    return user, history, tags, offsets


def _sparse_optimizer(name: str) -> str:
    return "rowwise_adagrad" if get_strategy(name).self_updating else "adam"


@pytest.fixture(params=strategies())
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_every_embedding_is_swapped_under_its_own_name(name: str) -> None:
    model = UserModel()
    swapped = swap_embeddings(model, EmbeddingConfig(strategy=name), _sparse_optimizer(name))
    assert swapped == ["users", "items.history", "tags"]
    for path in swapped:
        module = model.get_submodule(path)
        assert isinstance(module, SwappedEmbedding)
    assert len(list(strategy_modules(model))) == 3


def test_a_swapped_model_answers_like_the_original(name: str) -> None:
    torch.manual_seed(0)
    model = UserModel()
    swap_embeddings(model, EmbeddingConfig(strategy=name), _sparse_optimizer(name))
    user, history, tags, offsets = _inputs()
    assert model.users(user).shape == (16, DIM) and model.users(user.view(4, 4)).shape == (4, 4, DIM)
    assert model.items["history"](history).shape == (16, DIM)
    assert model.tags(tags, offsets).shape == (16, DIM)
    out = model(user, history, tags, offsets)
    assert out.shape == (16,) and out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.count_nonzero(model.users(torch.tensor([0]))) == 0  # padding_idx reads as zeros


def test_training_a_swapped_model_moves_its_rows_and_its_head(name: str) -> None:
    torch.manual_seed(0)
    model = UserModel()
    swap_embeddings(model, EmbeddingConfig(strategy=name), _sparse_optimizer(name))
    optimizers = Optimizers(model, OptimizerConfig(sparse=_sparse_optimizer(name), lr=0.1))  # type: ignore[arg-type]
    inputs = _inputs()
    before_rows = [model.users(inputs[0][1:]).detach().clone(), model.tags(inputs[2], inputs[3]).detach().clone()]
    before_head = model.head.weight.detach().clone()
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    optimizers.zero_grad()
    model(*inputs).square().mean().backward()
    optimizers.step(scaler)
    after_rows = [model.users(inputs[0][1:]).detach(), model.tags(inputs[2], inputs[3]).detach()]
    for before, after in zip(before_rows, after_rows, strict=True):
        assert not torch.equal(before, after), "a swapped table did not train"
    assert not torch.equal(before_head, model.head.weight)


def test_the_swapped_tables_cost_what_their_strategy_prices(name: str) -> None:
    model = UserModel()
    cfg = EmbeddingConfig(strategy=name)
    swap_embeddings(model, cfg, _sparse_optimizer(name))
    spec = get_strategy(name)
    for table in strategy_modules(model):
        priced = spec.state_bytes(table.table_sizes, table.dim, cfg, _sparse_optimizer(name))  # type: ignore[arg-type]
        held = sum(t.untyped_storage().nbytes() for t in {id(t): t for t in table.state_dict().values()}.values())
        assert abs(held - priced) <= 0.1 * priced + 4096, (held, priced)


def test_full_pools_exactly_as_torch_does() -> None:
    torch.manual_seed(0)
    reference = UserModel()
    model = UserModel()
    model.load_state_dict(reference.state_dict())
    swap_embeddings(model, EmbeddingConfig(strategy="full"))
    with torch.no_grad():  # the same rows in both, so the pooling rules are what is compared
        for path in ("users", "items.history", "tags"):
            model.get_submodule(path).table.bag.weight.copy_(reference.get_submodule(path).weight)
        reference.users.weight[0] = 0  # torch keeps the padding row at zero itself
    inputs = _inputs()
    torch.testing.assert_close(model(*inputs), reference(*inputs))
    weights = torch.rand(inputs[2].shape)
    torch.testing.assert_close(
        model.tags(inputs[2], inputs[3], per_sample_weights=weights),
        reference.tags(inputs[2], inputs[3], per_sample_weights=weights),
    )


@pytest.mark.parametrize(
    ("module", "named"),
    [
        (nn.Embedding(10, DIM, max_norm=1.0), "max_norm"),
        (nn.EmbeddingBag(10, DIM, mode="max"), "mode='max'"),
        (nn.Embedding(10, DIM, scale_grad_by_freq=True), "scale_grad_by_freq"),
    ],
)
def test_options_no_strategy_can_honour_are_refused_before_anything_changes(module: nn.Module, named: str) -> None:
    model = nn.Sequential(nn.Embedding(10, DIM), module)
    with pytest.raises(ValueError, match=f"1: .*{named}"):
        swap_embeddings(model, EmbeddingConfig(strategy="full"))
    assert type(model[0]) is nn.Embedding  # nothing swapped
