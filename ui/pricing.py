"""What a job launched from the UI is predicted to cost in memory, held to the UI's job ceiling.

A client chooses a run's shape (batch, eval sizes, table rows, widths) within the config's bounds,
which are a person's at the command line: at their maxima a run is predicted at thousands of GiB.
So every job is priced before it is submitted, with the library's own estimator (a fake-tensor
trace, about a second): a training run whose predicted peak is over the ceiling is refused, and a
sweep runs with its memory ceiling no higher than the UI's (its searcher screens every proposal
against it), after the preflight the sweep itself would make (tuning/pricing.py): its reference
config, which every sweep trains, must fit, and so must the cheapest config of its space.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elastune.config import RunConfig, apply_overrides
from elastune.dotted import flatten
from elastune.errors import ConfigError, InputError, Problem
from elastune.units import human_bytes

__all__ = ["default_job_ceiling", "sweep_ceiling", "train_problems"]

# One trace at a time: a trace is CPU-bound (many requests at once would only queue on the cores
# anyway), and the sweep pricing's cache (tuning/pricing.py) is a plain dict.
_TRACING = threading.Lock()
_FIX = "or start the UI with a higher --job-memory-ceiling"


def default_job_ceiling() -> int:
    """The smaller of this machine's memory and its first GPU's, when it has one (where a run with
    device=auto trains)."""
    import psutil
    from elastune.training import probe

    node = int(psutil.virtual_memory().total)
    # cuda_devices() opens a CUDA context in this process, once, at start-up; a machine without a
    # GPU (the usual UI host) lists none.
    gpus = probe.cuda_devices()
    return min(node, gpus[0].total_bytes) if gpus else node


def train_problems(base: Mapping[str, Any], nested: Mapping[str, Any], ceiling: int) -> list[Problem]:
    """Why the run `base` (a sweep's best config, or {} for the defaults) with a client's overrides
    `nested` may not be launched from here: keys over elastune.untrusted.CLIENT_LIMITS, then a
    predicted peak over `ceiling`. A key is named `sets.KEY` when the client set it, else
    `from_sweep.KEY`."""
    from elastune.untrusted import limit_problems
    from elastune.validate import config_problems

    set_keys = set(flatten(nested))

    def named(problems: Sequence[Problem]) -> list[Problem]:
        return [
            Problem(f"{'sets' if p.path in set_keys else 'from_sweep'}.{p.path}", p.value, p.message) for p in problems
        ]

    cfg, invalid = config_problems(apply_overrides(base, nested))
    if invalid or cfg is None:
        return named(invalid)
    over = limit_problems(cfg)
    if over:
        return named(over)
    try:
        peak = _price(cfg)
    except Exception as exc:  # a run that cannot be priced is not launched: refused, never a 500
        return [Problem("sets", None, f"this run cannot be priced ({type(exc).__name__}: {str(exc)[:200]})")]
    if peak <= ceiling:
        return []
    message = (
        f"this run is predicted to peak at {human_bytes(peak)}, over this UI's job memory ceiling of "
        f"{human_bytes(ceiling)}; lower batch.micro, eval.batch, eval.samples, data.rows_scale or "
        f"model.embedding_dim, {_FIX}"
    )
    return [Problem("predicted_peak_bytes", peak, message)]


def sweep_ceiling(
    spec_path: Path, name: str, flags: Mapping[str, object], requested: str | None, ceiling: int
) -> tuple[list[Problem], str | None]:
    """(problems, the --memory-ceiling to launch the sweep with) for the spec at `spec_path` with the
    client's `flags` (spec keys -> values, as `elastune sweep` applies them) and its `requested`
    ceiling. The sweep runs under the smaller of what the client or the spec asks and `ceiling`; its
    reference and the cheapest config of its space must fit."""
    from elastune.tuning.pricing import cheapest_estimate, predicted_peak
    from elastune.tuning.spec import load_sweep_spec
    from elastune.units import parse_bytes

    if requested is not None and parse_bytes(requested) > ceiling:
        message = f"is over this UI's job memory ceiling of {human_bytes(ceiling)}; give at most that, {_FIX}"
        return [Problem("memory_ceiling", requested, message)], None
    overrides = [f"{key}={value}" for key, value in flags.items() if value is not None]
    if requested is not None:
        overrides.append(f"constraints.memory_ceiling={requested}")
    launched = requested
    try:
        spec = load_sweep_spec(spec_path, overrides)
        asked = spec.constraints.memory_ceiling  # the client's, else the spec's own; None: no ceiling
        if asked is None or asked > ceiling:  # the spec's own, then (the client's is checked above)
            launched = str(ceiling)
            spec = load_sweep_spec(spec_path, [*overrides, f"constraints.memory_ceiling={launched}"])
        effective = spec.constraints.memory_ceiling or ceiling
        with _TRACING:
            reference = predicted_peak(spec, spec.constraints.reference)
            cheapest, params = cheapest_estimate(spec, enough=effective)
    except (ConfigError, InputError) as exc:
        return [Problem("spec", name, f"does not validate with these settings: {str(exc)[:500]}")], None
    except Exception as exc:  # a spec that cannot be priced is not launched: refused, never a 500
        return [Problem("spec", name, f"cannot be priced ({type(exc).__name__}: {str(exc)[:200]})")], None
    problems = []
    if reference > ceiling:
        problems.append(
            Problem(
                "spec",
                name,
                f"its reference config, which every sweep trains, is predicted to peak at {human_bytes(reference)}, "
                f"over this UI's job memory ceiling of {human_bytes(ceiling)}; choose another spec {_FIX}",
            )
        )
    if cheapest > effective:
        problems.append(
            Problem(
                "memory_ceiling",
                requested or human_bytes(effective),
                f"not even the cheapest config of this spec fits: {human_bytes(cheapest)} predicted for "
                f"{params or 'the base config'}; raise the ceiling to at least {human_bytes(cheapest)}, or choose "
                "another spec",
            )
        )
    return problems, launched


def _price(cfg: RunConfig) -> int:
    """The predicted peak of training `cfg` on the device it asks for (`auto`: this machine's GPU
    if it has one, as on a cluster node like it); a CUDA run is priced as such on a machine
    without one (the trace is of fake tensors)."""
    import torch
    from elastune.memory.estimate import estimate
    from elastune.training import probe

    if cfg.device == "auto":
        device = torch.device("cuda" if probe.cuda_available() else "cpu")
    else:
        device = torch.device(cfg.device)
    with _TRACING:
        return estimate(cfg, device).peak_bytes
