"""Workloads: a model, its data and its loss, behind one small protocol."""

from elastune.workloads.base import Workload, build_workload

__all__ = ["Workload", "build_workload"]
