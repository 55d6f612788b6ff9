"""SASRec as an elastune workload, written only against elastune's public API.

Data: item-id histories shaped like MovieLens-1M, generated (data.py), SASRec's leave-one-out split.
Model: SASRec (model.py), its item table built by `elastune.build_tables`, so every embedding
strategy, `embedding.overrides` (the table is named `items`), the row-wise optimizers and the
estimator apply to it. Loss (`workload_options.loss`):

* `softmax` (default): cross-entropy of each position's next item over the whole catalogue (3,706
  items: a [B x L, items] matmul, cheap at this size);
* `bce`: the paper's own, binary cross-entropy of the next item against one random other item per
  position.

Quality: recall@10 of the held-out last item, ranked against the whole catalogue less the items the
user has already seen (one relevant item, so recall@10 is the hit rate HR@10), higher is better; NDCG@10
beside it; both from torchmetrics' retrieval metrics (RetrievalHitRate, RetrievalNormalizedDCG). The eval
loss is the held-out item's cross-entropy over that ranking, whatever the training loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from elastune import QualityMetric, RunConfig, TableSpec, Workload, build_tables
from elastune.data import DataSource
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F
from torchmetrics import Metric
from torchmetrics.retrieval import RetrievalHitRate, RetrievalNormalizedDCG

from sasrec.data import Sequences, generate
from sasrec.model import SASRec

__all__ = ["K", "SASRecOptions", "SASRecWorkload", "scores"]

K = 10  # recall@K, NDCG@K
Batch = dict[str, Any]


class SASRecOptions(BaseModel):
    """`workload_options` of `workload: sasrec` (the width is elastune's `model.embedding_dim`)."""

    model_config = ConfigDict(extra="forbid")

    users: int = Field(6040, ge=10, le=200_000, description="Generated data: users (ML-1M: 6,040).")
    items: int = Field(3706, ge=100, le=2_000_000, description="Generated data: items, rows of the item table.")
    max_len: int = Field(50, ge=2, le=1024, description="Items of history a prediction looks at (SASRec's n).")
    blocks: int = Field(2, ge=1, le=24, description="Self-attention blocks.")
    heads: int = Field(1, ge=1, le=64, description="Attention heads; model.embedding_dim must divide by it.")
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Dropout (the paper: 0.2 on ML-1M). Above 0, different micro-batch splits of a step "
        "draw different masks: equal in expectation, not to the bit.",
    )
    loss: Literal["softmax", "bce"] = Field(
        "softmax", description="softmax: over the whole catalogue; bce: the paper's, one random negative per position."
    )


class SASRecWorkload(Workload):
    """`workload: sasrec` (registered by this package's entry point; the class is its own factory)."""

    options_model = SASRecOptions
    options: SASRecOptions
    quality = QualityMetric("recall_at_10", "max")

    def __init__(self, cfg: RunConfig, options: SASRecOptions) -> None:
        super().__init__(cfg, options)
        if cfg.data.source != "synthetic":
            raise ValueError(
                f"data.source={cfg.data.source!r}: workload sasrec generates its own ML-1M-shaped histories; "
                "drop data.source (it reads no file)"
            )
        width = cfg.model.embedding_dim
        if width % options.heads:
            raise ValueError(
                f"model.embedding_dim={width} does not divide into workload_options.heads={options.heads}; "
                "choose a width that is a multiple of the heads"
            )
        self._tables = [TableSpec("items", options.items + 1, width)]  # row 0: the padding
        self._source: Sequences | None = None

    @property
    def tables(self) -> list[TableSpec]:
        return self._tables

    def build_model(self) -> nn.Module:
        o = self.options
        table = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        return SASRec(table, o.items, self.cfg.model.embedding_dim, o.max_len, o.blocks, o.heads, o.dropout)

    def data_source(self) -> DataSource:
        if self._source is None:
            o, seed = self.options, self.cfg.data.seed
            self._source = Sequences(generate(o.users, o.items, seed), o.max_len, seed=seed, negatives=o.loss == "bce")
        return self._source

    # -- training ---------------------------------------------------------------------------

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Mean over the positions that have a next item (padding has none)."""
        targets = batch["targets"]
        real = (targets != 0).float()
        if self.options.loss == "bce":
            hidden, vectors = model(batch["history"], torch.stack([targets, batch["negatives"]]))
            positive = (hidden * vectors[0]).sum(-1).float()
            negative = (hidden * vectors[1]).sum(-1).float()
            losses = F.softplus(-positive) + F.softplus(negative)  # -log sigmoid(pos) - log(1 - sigmoid(neg))
            return (losses * real).sum() / real.sum().clamp(min=1.0)
        hidden, catalogue = model(batch["history"])
        # [B*L, items] rows, not a [B, items, L] transpose: cross_entropy over a non-innermost dimension
        # makes its own contiguous copy of the logits. Item j is column j - 1; padding is ignored.
        logits = hidden.flatten(0, 1) @ catalogue.T.to(hidden.dtype)
        total = F.cross_entropy(logits.float(), targets.flatten() - 1, ignore_index=-1, reduction="sum")
        return total / real.sum().clamp(min=1.0)

    def loss_weight(self, batch: Batch) -> torch.Tensor:
        """The positions with a next item, what `loss` averages over: micro-batches are weighted by
        it, so micro x accum is exactly the whole step's mean."""
        return (batch["targets"] != 0).sum()

    def table_ids(self, batch: Batch) -> torch.Tensor:
        """The ids one training forward looks up, in its one call of the table (`SASRec.forward`):
        the history and then the whole catalogue (softmax) or each position's target and negative
        (bce); [lookups, 1, 1]."""
        history = batch["history"].reshape(-1)
        if self.options.loss == "bce":
            extra = torch.cat([batch["targets"].reshape(-1), batch["negatives"].reshape(-1)])
        else:
            extra = torch.arange(1, self.options.items + 1)
        return torch.cat([history, extra]).view(-1, 1, 1)

    # -- evaluation -------------------------------------------------------------------------

    def metrics(self) -> dict[str, Metric]:
        # recall@10 is computed as the hit rate: with one relevant item per user the two are equal, and
        # torchmetrics' RetrievalRecall counts an item as retrieved only where its score is > 0 (it
        # takes scores for probabilities), which would drop a hit whose dot product is negative.
        return {"recall_at_10": RetrievalHitRate(top_k=K), "ndcg_at_10": RetrievalNormalizedDCG(top_k=K)}

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        """The last position's scores of every item the user has not seen; the metrics get each
        user's top K and the held-out item (all that recall@K and NDCG@K of one relevant item
        depend on: the held-out item's rank when it is in the top K)."""
        hidden, catalogue = model(batch["history"])
        ranked = scores(hidden[:, -1], catalogue, batch.get("seen"))
        target = batch["targets"][:, -1] - 1
        top, at = ranked.topk(min(K, ranked.shape[1]), dim=1)
        hit = at == target[:, None]
        # The held-out item, unless it is among the top K already (then a placeholder below them all).
        held = ranked.gather(1, target[:, None]).masked_fill(hit.any(1, keepdim=True), torch.finfo(top.dtype).min)
        preds = torch.cat([top, held], dim=1)
        relevant = torch.cat([hit, ~hit.any(1, keepdim=True)], dim=1)
        query = batch["user"][:, None].expand_as(preds)
        for name in ("recall_at_10", "ndcg_at_10"):
            metrics[name].update(preds.flatten(), relevant.flatten(), indexes=query.flatten())
        return F.cross_entropy(ranked, target)


def scores(last: torch.Tensor, catalogue: torch.Tensor, seen: Any = None) -> torch.Tensor:
    """fp32 [B, items]: each user's score of each item (column j: item j + 1), -inf where the user
    has already seen it (`seen`: a Ragged of each user's earlier items; None: nothing excluded)."""
    # fp32 even under a bf16/fp16 run's autocast, which would round the scores to 8 or 11 bits and tie
    # items the ranking must tell apart
    with torch.autocast(last.device.type, enabled=False):
        ranked = last.float() @ catalogue.float().T
    if seen is not None and len(seen.lengths):
        rows = torch.repeat_interleave(
            torch.arange(len(seen.lengths), device=ranked.device),
            torch.tensor(seen.lengths, device=ranked.device),
        )
        ranked = ranked.index_put((rows, seen.values - 1), ranked.new_tensor(float("-inf")))
    return ranked
