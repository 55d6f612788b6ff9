"""Workloads with an unusual batch and unusual metrics, written as a user would, outside the library
(issue 33's "done means"): a map-style torch Dataset of shopping baskets whose items are nested
dicts holding a variable number of item ids each, joined by the workload's own collate into an
`elastune.Ragged` and pooled in the model (the mean of each sample's item vectors). Two tasks over
the same data:

* `BasketSpend`: a regression (the basket's spend) judged by RMSE, lower is better; its Dataset
  comes with a held-out Dataset of its own.
* `BasketKind`: a classifier (the basket's majority category) judged by accuracy, higher is better;
  its held-out items are carved out of the one Dataset (`eval.samples` of them).

`BasketSpendBag` pools the baskets with an `nn.EmbeddingBag` over offsets instead: `elastune.train`
trains it, but the estimator cannot price it yet (embeddings/swap.py), so `elastune estimate`, a
sweep, and `elastune train` once it has trained (it prices the run beside its measure) fail;
test_unusual_workload.py marks it.

Used by tests/unit/test_unusual_workload.py, tests/unit/test_dataset_source.py and
tests/integration/workloads/test_sweep_general.py (as import paths)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch
from elastune import QualityMetric, Ragged, Workload, swap_embeddings
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset, default_collate
from torchmetrics import MeanSquaredError, Metric
from torchmetrics.classification import MulticlassAccuracy

USERS, ITEMS, KINDS, MAX_BASKET = 300, 400, 3, 6
_TRUTH = torch.Generator().manual_seed(1234)
PRICE = torch.rand(ITEMS, generator=_TRUTH) * 4  # what each item costs
THRIFT = torch.rand(USERS, generator=_TRUTH)  # what each user saves on a basket
CATEGORY = torch.arange(ITEMS) % KINDS

Item = dict[str, Any]  # {"user": {"id": [], "days": [2]}, "basket": [L] (L varies), "spend": [], "kind": []}


def kind_of(items: torch.Tensor) -> torch.Tensor:
    """The basket's majority category (ties to the lowest)."""
    return torch.bincount(CATEGORY[items], minlength=KINDS).argmax()


class Baskets(Dataset[Item]):
    """Basket i (of `first + i`): a user, 1 to MAX_BASKET item ids, what it cost and its kind; a pure
    function of the index (its own generator, seeded by it)."""

    def __init__(self, n: int, first: int = 0) -> None:
        self.n, self.first = n, first

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Item:
        if not 0 <= index < self.n:
            raise IndexError(index)
        k = self.first + index
        g = torch.Generator().manual_seed(k)
        user = torch.randint(0, USERS, (), generator=g)
        items = torch.randint(0, ITEMS, (1 + k % MAX_BASKET,), generator=g)
        days = torch.rand(2, generator=g)  # since the last visit, since sign-up: noise the model must ignore
        spend = PRICE[items].mean() - THRIFT[user]
        return {"user": {"id": user, "days": days}, "basket": items, "spend": spend, "kind": kind_of(items)}


class BasketModel(nn.Module):
    """A user embedding, the basket's items pooled (their mean), two numbers: a small MLP on top."""

    def __init__(self, dim: int, outputs: int, bag: bool = False) -> None:
        super().__init__()
        self.user = nn.Embedding(USERS, dim)
        self.bag = bag
        self.items: nn.Module = nn.EmbeddingBag(ITEMS, dim, mode="mean") if bag else nn.Embedding(ITEMS, dim)
        self.head = nn.Sequential(nn.Linear(2 * dim + 2, 32), nn.ReLU(), nn.Linear(32, outputs))

    def pool(self, basket: Ragged) -> torch.Tensor:
        """Each sample's items' mean vector, [B, dim]. The lengths are host ints: which sample each id
        belongs to is known without reading a tensor (so the estimator's fake tensors price it)."""
        device = basket.values.device
        if self.bag:  # an EmbeddingBag: where each sample's ids start in the flat values
            starts = [0, *itertools.accumulate(basket.lengths)][:-1]
            return self.items(basket.values, torch.tensor(starts, device=device))
        owner = torch.tensor([b for b, n in enumerate(basket.lengths) for _ in range(n)], device=device)
        vectors = self.items(basket.values)
        total = vectors.new_zeros(len(basket), vectors.shape[1]).index_add(0, owner, vectors)
        return total / torch.tensor(basket.lengths, device=device).clamp(min=1).unsqueeze(1).to(total.dtype)

    def forward(self, batch: Mapping[str, Any]) -> torch.Tensor:
        user = batch["user"]
        return self.head(torch.cat([self.user(user["id"]), self.pool(batch["basket"]), user["days"]], dim=1))


class BasketWorkload(Workload):
    outputs = 1
    bag = False  # pool the items with an nn.EmbeddingBag and offsets instead

    def build_model(self) -> nn.Module:
        model = BasketModel(self.cfg.model.embedding_dim, self.outputs, self.bag)
        swap_embeddings(model, self.cfg.embedding, self.cfg.optimizer.sparse)
        return model

    def collate(self, samples: list[Item]) -> dict[str, Any]:
        # torch's default_collate cannot stack baskets of different lengths: they travel as one Ragged
        rest = default_collate([{k: v for k, v in s.items() if k != "basket"} for s in samples])
        return {**rest, "basket": Ragged.from_list([s["basket"] for s in samples])}


class BasketSpend(BasketWorkload):
    quality = QualityMetric("rmse", "min")

    def dataset(self) -> tuple[Baskets, Baskets]:
        return Baskets(6000), Baskets(2000, first=10**6)  # a held-out Dataset of its own

    def loss(self, model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor:
        return F.mse_loss(model(batch).squeeze(1).float(), batch["spend"])

    def metrics(self) -> dict[str, Metric]:
        return {"rmse": MeanSquaredError(squared=False)}

    def eval_step(self, model: nn.Module, batch: Mapping[str, Any], metrics: Mapping[str, Metric]) -> torch.Tensor:
        predicted = model(batch).squeeze(1).float()
        metrics["rmse"].update(predicted, batch["spend"])
        return F.mse_loss(predicted, batch["spend"])


class BasketKind(BasketWorkload):
    quality = QualityMetric("accuracy", "max")
    outputs = KINDS

    def dataset(self) -> Baskets:
        return Baskets(6000)  # eval.samples of them are held out

    def loss(self, model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor:
        return F.cross_entropy(model(batch).float(), batch["kind"])

    def metrics(self) -> dict[str, Metric]:
        return {"accuracy": MulticlassAccuracy(num_classes=KINDS, average="micro")}

    def eval_step(self, model: nn.Module, batch: Mapping[str, Any], metrics: Mapping[str, Metric]) -> torch.Tensor:
        logits = model(batch).float()
        metrics["accuracy"].update(logits, batch["kind"])
        return F.cross_entropy(logits, batch["kind"])


class BasketSpendBag(BasketSpend):
    """The regression with its baskets pooled by an nn.EmbeddingBag over offsets."""

    bag = True
