"""Embedding strategies behind one interface (see base.py for the contract)."""

from elastune.embeddings import cached, full, half, hashed, int8, mixed_dim, qr, shared  # noqa: F401  (registers them)
from elastune.embeddings.base import (
    EmbeddingStrategy,
    StrategySpec,
    build_embedding,
    get_strategy,
    register,
    strategies,
)

__all__ = ["EmbeddingStrategy", "StrategySpec", "build_embedding", "get_strategy", "register", "strategies"]
