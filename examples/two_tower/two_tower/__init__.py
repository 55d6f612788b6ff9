"""A two-tower recommender over MovieLens-style columns: an elastune workload from outside elastune."""

from two_tower.workload import TwoTowerOptions, TwoTowerWorkload, make_workload

__all__ = ["TwoTowerOptions", "TwoTowerWorkload", "make_workload"]
