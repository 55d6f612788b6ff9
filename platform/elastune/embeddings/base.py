"""The interface every embedding strategy implements, and the registry that picks one.

A strategy owns the tables of all sparse features of a workload and turns ids into pooled bags:
`ids` int64 [batch, features, pooling] -> float [batch, features, dim] (sum over the bag). It
also knows its own byte cost as a formula, so the estimator and the tuner can price it without
building it.

Invariants every strategy keeps (checked by tests/unit/test_embedding_contract.py):
- output shape [B, F, dim] and dtype float32, whatever the storage dtype;
- gradients reach every parameter that `sparse_parameters()` lists;
- the same seed builds the same weights;
- `state_bytes()` matches what the built module holds within 10%.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from elastune.config import EmbeddingConfig

__all__ = ["EmbeddingStrategy", "StrategySpec", "build_embedding", "get_strategy", "register", "spec_for", "strategies"]


@runtime_checkable
class EmbeddingStrategy(Protocol):
    table_sizes: tuple[int, ...]
    dim: int

    def __call__(self, ids: torch.Tensor) -> torch.Tensor: ...

    def sparse_parameters(self) -> list[nn.Parameter]:
        """Parameters the sparse (embedding) optimizer updates; the rest go to the dense one."""
        ...


@dataclass(frozen=True)
class StrategySpec:
    name: str
    # build(table_sizes, dim, cfg, sparse_optimizer) -> the module; sparse_optimizer is
    # optimizer.sparse: adam (dense gradients) or a row optimizer (sparse gradients / self-updating).
    build: Callable[[Sequence[int], int, EmbeddingConfig, str], nn.Module]
    # Bytes the strategy keeps between steps: storage in its dtype plus any per-row metadata, and
    # the row optimizer's state where the strategy holds it. The formula the tuner prices with;
    # the contract suite checks it against the built module.
    state_bytes: Callable[[Sequence[int], int, EmbeddingConfig, str], int]
    self_updating: bool = False  # True: implements sparse_optim.SelfUpdating
    backend: str = "torch"  # embedding.backend whose kernels it runs on (fbgemm: embeddings/fbgemm.py)


_REGISTRY: dict[tuple[str, str], StrategySpec] = {}


def register(spec: StrategySpec) -> StrategySpec:
    _REGISTRY[(spec.backend, spec.name)] = spec
    return spec


def strategies(backend: str = "torch") -> list[str]:
    return sorted(name for b, name in _REGISTRY if b == backend)


def get_strategy(name: str, backend: str = "torch") -> StrategySpec:
    try:
        return _REGISTRY[(backend, name)]
    except KeyError:
        known = ", ".join(strategies(backend))
        raise KeyError(f"unknown embedding strategy {name!r} for backend {backend!r}; known: {known}") from None


def spec_for(cfg: EmbeddingConfig) -> StrategySpec:
    """The spec that builds and prices `cfg`: its strategy on its backend."""
    return get_strategy(cfg.strategy, cfg.backend)


def build_embedding(
    table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str = "adam"
) -> nn.Module:
    return spec_for(cfg).build(table_sizes, dim, cfg, sparse_optimizer)
