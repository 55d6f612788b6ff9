"""SASRec, a sequential recommender over ML-1M-shaped item histories: an elastune workload from outside elastune."""

from sasrec.workload import SASRecOptions, SASRecWorkload

__all__ = ["SASRecOptions", "SASRecWorkload"]
