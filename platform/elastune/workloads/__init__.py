"""Workloads: a model, its data and its loss, behind one small protocol (base.py); which one a run
trains is resolved by name, plugin or import path (registry.py)."""

from elastune.workloads.base import Workload
from elastune.workloads.registry import WorkloadError, build_workload, workload_names

__all__ = ["Workload", "WorkloadError", "build_workload", "workload_names"]
