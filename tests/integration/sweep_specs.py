"""Tiny sweep specs for the integration tests: trials of a few steps on a tiny DLRM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TINY_BASE: dict[str, Any] = {
    "device": "cpu",
    "data": {"rows_scale": 0.005},
    "model": {"embedding_dim": 8},
    "workload_options": {"bottom_mlp": [16], "top_mlp": [16]},  # DLRM's: drop them for another workload
    "eval": {"samples": 512},
    "warmup_steps": 1,
}


def tiny_spec(**changes: Any) -> dict[str, Any]:
    """full vs hashed x two micro-batch splits of 128: a grid of 4 proposals, each 6 steps."""
    raw: dict[str, Any] = {
        "name": "tiny",
        "base": TINY_BASE,
        "parameters": {
            "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
            "batch.micro": {"type": "choice", "values": [64, 128]},
        },
        "constraints": {"effective_batch": 128, "quality_tolerance": 0.5, "reference": {"batch.micro": 128}},
        "budget": {"max_trials": 4, "max_concurrent": 2, "trial_samples": 768},
        "confirm": {"top": 0},  # the confirmation stage has its own test (local_ray/test_sweep.py)
        "search": {"algorithm": "grid", "scheduler": "none", "seed": 0},
        "resources": {"cpus_per_trial": 1},
        "edo": {"mode": "off"},
    }
    for key, value in changes.items():
        raw[key] = {**raw[key], **value} if isinstance(raw.get(key), dict) else value
    return raw


def write_spec(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path
