"""Give an existing PyTorch model elastune's embedding strategies with one call.

`swap_embeddings(model, cfg)` replaces every `nn.Embedding` and `nn.EmbeddingBag` inside `model`
by a module of the same name and call signature whose table is built by the configured strategy
(full, half, int8, hashed, qr, mixed_dim, cached, ...): the rest of the model is untouched, and
`training.optim.Optimizers` finds the swapped tables wherever they sit, so the row-wise optimizers
and the self-updating strategies work as they do for the built-in workloads.

What carries over from the module it replaces: the table's rows and width, `padding_idx` (that
row reads as zeros and gets no gradient), and for a bag `mode` sum or mean, 2-D input (one bag
per row) or 1-D input with `offsets`, and `per_sample_weights` (sum mode). What does not: the
original weights (a strategy initialises its own storage, as it would for a new table),
`max_norm`, `mode="max"` and `scale_grad_by_freq`: a module using one of those is refused, naming
it, rather than silently trained differently.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import EmbeddingStrategy, build_embedding

__all__ = ["SwappedEmbedding", "strategy_modules", "swap_embeddings"]


class SwappedEmbedding(nn.Module):
    """One table built by a strategy, called like the `nn.Embedding` / `nn.EmbeddingBag` it replaced."""

    def __init__(self, table: nn.Module, *, bag: bool, mode: str = "mean", padding_idx: int | None = None) -> None:
        super().__init__()
        self.table = table  # a strategy module over one table: ids [N, 1, 1] -> [N, 1, dim]
        self.bag = bag
        self.mode = mode
        self.padding_idx = padding_idx
        self.num_embeddings = int(table.table_sizes[0])  # type: ignore[index]
        self.embedding_dim = int(table.dim)  # type: ignore[arg-type]

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        """One vector per id, for ids of any shape: [*ids.shape, dim]."""
        flat = ids.reshape(-1, 1, 1)
        vectors = self.table(flat).reshape(*ids.shape, self.embedding_dim)
        if self.padding_idx is not None:
            vectors = vectors * (ids != self.padding_idx).unsqueeze(-1).to(vectors.dtype)
        return vectors

    def forward(
        self,
        input: torch.Tensor,
        offsets: torch.Tensor | None = None,
        per_sample_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if not self.bag:
            return self._rows(input)
        if input.dim() == 2:  # one bag per row, all of the same length
            vectors = self._rows(input)
            if per_sample_weights is not None:
                vectors = vectors * per_sample_weights.unsqueeze(-1)
            pooled = vectors.sum(dim=1)
            if self.mode == "mean":
                pooled = pooled / max(1, input.shape[1])
            return pooled
        if offsets is None:
            raise ValueError("a 1-D input to an embedding bag needs offsets (where each bag starts)")
        bags = offsets.numel()
        lengths = torch.diff(offsets, append=torch.tensor([input.numel()], device=offsets.device))
        # output_size: every id is in one bag, so the result has input.numel() entries; given, it
        # needs no read of `lengths` (a host sync, and impossible on the estimator's fake tensors)
        which = torch.repeat_interleave(torch.arange(bags, device=input.device), lengths, output_size=input.numel())
        vectors = self._rows(input)
        if per_sample_weights is not None:
            vectors = vectors * per_sample_weights.unsqueeze(-1)
        pooled = torch.zeros(bags, self.embedding_dim, dtype=vectors.dtype, device=vectors.device)
        pooled = pooled.index_add(0, which, vectors)
        if self.mode == "mean":
            pooled = pooled / lengths.clamp(min=1).unsqueeze(-1).to(pooled.dtype)
        return pooled


def swap_embeddings(model: nn.Module, cfg: EmbeddingConfig, sparse_optimizer: str = "adam") -> list[str]:
    """Replace, in place, every `nn.Embedding` / `nn.EmbeddingBag` of `model` by a table of the
    strategy `cfg` names (`sparse_optimizer` as `optimizer.sparse`: the row-wise ones need it at
    build time). Returns the dotted names of the modules swapped. Raises ValueError naming a
    module whose options a strategy cannot honour, before anything is replaced."""
    kinds = (nn.Embedding, nn.EmbeddingBag)
    found = [(name, module) for name, module in model.named_modules() if isinstance(module, kinds)]
    problems = [f"{name or 'the model'}: {why}" for name, module in found if (why := _refusal(module))]
    if problems:
        raise ValueError("cannot swap these embeddings: " + "; ".join(problems))
    for name, module in found:
        table = build_embedding((module.num_embeddings,), module.embedding_dim, cfg, sparse_optimizer)
        bag = isinstance(module, nn.EmbeddingBag)
        if module.weight.device != torch.device("cpu"):  # strategies build on the CPU, as models do
            table = table.to(module.weight.device)
        swapped = SwappedEmbedding(
            table,
            bag=bag,
            mode=module.mode if isinstance(module, nn.EmbeddingBag) else "mean",
            padding_idx=module.padding_idx,
        )
        _set_submodule(model, name, swapped)
    return [name for name, _ in found]


def strategy_modules(model: nn.Module) -> Iterator[nn.Module]:
    """The embedding strategies inside `model` (outermost only: a strategy built from others
    counts once), wherever they sit: `model.embeddings` of a built-in workload, or the tables
    `swap_embeddings` put into a user's model."""
    for child in model.children():
        if isinstance(child, EmbeddingStrategy):
            yield child
        else:
            yield from strategy_modules(child)


def _refusal(module: nn.Embedding | nn.EmbeddingBag) -> str | None:
    if module.max_norm is not None:
        return f"max_norm={module.max_norm} (renormalising rows in place) is not supported; drop it"
    if module.scale_grad_by_freq:
        return "scale_grad_by_freq=True is not supported; drop it"
    if isinstance(module, nn.EmbeddingBag) and module.mode == "max":
        return "mode='max' is not supported; use 'sum' or 'mean'"
    return None


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    if not name:
        raise ValueError("the model itself is an embedding; wrap it in a module (swap_embeddings swaps children)")
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attr, module)
