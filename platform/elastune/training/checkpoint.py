"""Save and restore a run mid-way: model, optimizers, scaler, loop position and RNG.

A run restored at step s continues exactly as the uninterrupted run would have: the data
position (samples consumed) and the RNG state come back with the weights.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from elastune.errors import InputError
from elastune.training.optim import Optimizers

__all__ = ["LoopState", "load_checkpoint", "save_checkpoint"]

# Config sections that must match for a checkpoint to be resumable: they shape the weights and
# the data stream. Steps, checkpointing and eval may differ.
_MUST_MATCH = ("workload", "data", "model", "embedding", "optimizer", "precision", "seed")


@dataclass
class LoopState:
    step: int = 0  # optimizer steps done
    samples: int = 0  # samples consumed = position in the training stream
    micro: int = 1
    accum: int = 1
    oom_retries: int = 0


def save_checkpoint(
    path: Path,
    *,
    model: nn.Module,
    opts: Optimizers,
    scaler: torch.amp.GradScaler,
    state: LoopState,
    config: dict[str, Any],
) -> None:
    payload = {
        "model": model.state_dict(),
        "optimizers": opts.state_dict(),
        "scaler": scaler.state_dict(),
        "loop": asdict(state),
        "rng": torch.get_rng_state(),
        "config": config,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic: a crash mid-write never leaves a torn checkpoint behind


def load_checkpoint(
    path: Path,
    *,
    model: nn.Module,
    opts: Optimizers,
    scaler: torch.amp.GradScaler,
    config: dict[str, Any],
) -> LoopState:
    payload = torch.load(path, map_location="cpu", weights_only=False)
    differ = [k for k in _MUST_MATCH if payload["config"].get(k) != config.get(k)]
    if differ:
        raise InputError(
            f"checkpoint.path={str(path)!r} was written by a run with different {', '.join(differ)}; "
            "resume with the same config or point checkpoint.path at a new file"
        )
    model.load_state_dict(payload["model"])
    opts.load_state_dict(payload["optimizers"])
    scaler.load_state_dict(payload["scaler"])
    torch.set_rng_state(payload["rng"])
    return LoopState(**payload["loop"])
