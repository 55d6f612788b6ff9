"""elastune: find, then run, the fastest way to train an embedding-heavy model in a memory ceiling."""

__version__ = "0.1.0"

__all__ = ["__version__"]
