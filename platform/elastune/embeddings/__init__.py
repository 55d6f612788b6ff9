"""Embedding strategies behind one interface (see base.py for the contract)."""

# fbgemm registers the fbgemm backend's specs; it imports fbgemm_gpu only when one is built.
from elastune.embeddings import cached, fbgemm, full, half, hashed, int8, mixed_dim, qr, shared  # noqa: F401
from elastune.embeddings.base import (
    EmbeddingStrategy,
    StrategySpec,
    build_embedding,
    get_strategy,
    register,
    spec_for,
    strategies,
)

__all__ = ["EmbeddingStrategy", "StrategySpec", "build_embedding", "get_strategy", "register", "spec_for", "strategies"]
