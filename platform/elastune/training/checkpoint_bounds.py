"""What a checkpoint's plain data may hold, bounded like the config of the run that resumes it.

A checkpoint is read with `torch.load(weights_only=True)`, so it runs no code; its numbers are
still whatever its writer put there (checkpoint folders may be shared). Each function here takes
the untrusted part of a payload and the run's own bounds, and returns what is wrong with it, one
message per field (field, value, fix); training/checkpoint.py turns them into one ConfigError
naming checkpoint.path: exit 2, nothing trained, the file kept as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from elastune.config import MAX_STEPS

__all__ = ["LOOP_FLOORS", "START_OVER", "loop_problems", "non_finite", "optimizer_steps", "scaler_problems", "shown"]

# The loop state's fields (training/checkpoint.py: LoopState), each with the least value it may hold.
LOOP_FLOORS = {"step": 0, "samples": 0, "micro": 1, "accum": 1, "oom_retries": 0}
# The fix for a file no run of this config could have written.
START_OVER = "delete the file or set checkpoint.resume=false to start from scratch"
# Elements checked for NaN/inf at a time: bounds torch.isfinite's temporary (4 MiB of bools).
_FINITE_CHUNK = 1 << 22


def loop_problems(loop: Mapping[Any, Any], *, steps: int, micro: int, accum: int) -> list[str]:
    """What in a loop state no run of this config (`steps`, `batch.micro`, `batch.accum`) writes.
    Its types first: the bounds are checked once every field is an int at or above its floor."""
    if set(loop) != set(LOOP_FLOORS):
        keys = ", ".join(sorted(shown(key) for key in loop)) or "nothing"
        return [
            f"is not an elastune checkpoint (its loop state holds {keys}, not {', '.join(LOOP_FLOORS)}); {START_OVER}"
        ]
    wrong = [
        # exactly int: True, 2.0 and tensor(2) are not positions in a run
        f"loop.{key}={shown(value)} is a {type(value).__name__}, not an int; {START_OVER}"
        if type(value) is not int
        else f"loop.{key}={shown(value)} is below {LOOP_FLOORS[key]}; {START_OVER}"
        for key, value in loop.items()
        if type(value) is not int or value < LOOP_FLOORS[key]
    ]
    return wrong or _out_of_bounds(loop, steps=steps, micro=micro, accum=accum)


def _out_of_bounds(loop: Mapping[str, int], *, steps: int, micro: int, accum: int) -> list[str]:
    """The loop keeps the effective batch for the whole run (OOM recovery and EDO re-split it, never
    change it), only ever halves the configured micro-batch (EDO grows it back no further), adds the
    effective batch to `samples` at every step, and counts one OOM retry per halving, at most
    log2(effective batch) within one step."""
    step, effective = loop["step"], micro * accum
    wrong = []
    if step > steps:
        more = f"raise steps to at least {step} to train on from it, or " if step <= MAX_STEPS else ""
        wrong.append(f"loop.step={shown(step)} is beyond steps={steps}; {more}{START_OVER}")
    if loop["micro"] * loop["accum"] != effective:
        wrong.append(
            f"loop.micro={shown(loop['micro'])} x loop.accum={shown(loop['accum'])} is not this config's effective "
            f"batch {effective} (batch.micro={micro} x batch.accum={accum}); resume with the batch it was written "
            f"with, or {START_OVER}"
        )
    elif loop["micro"] > micro:
        wrong.append(
            f"loop.micro={loop['micro']} is above batch.micro={micro} (a run only halves its micro-batch); resume "
            f"with the batch.micro it was written with, or {START_OVER}"
        )
    if loop["samples"] != step * effective:
        wrong.append(
            f"loop.samples={shown(loop['samples'])} is not loop.step={shown(step)} x the effective batch {effective}; "
            + START_OVER
        )
    halvings = effective.bit_length() - 1
    if loop["oom_retries"] > step * halvings:
        wrong.append(
            f"loop.oom_retries={shown(loop['oom_retries'])} is more than {halvings} halvings of the micro-batch in "
            f"each of loop.step={shown(step)} steps; {START_OVER}"
        )
    return wrong


def optimizer_steps(optimizers: Mapping[Any, Any], step: int) -> list[str]:
    """A torch optimizer counts its updates per parameter (`state[i]["step"]`; Adam's bias correction
    divides by 1 - beta^step, which a negative count turns into NaN). It steps at most once a loop
    step: never twice, and not when fp16 gradients overflowed."""
    wrong = []
    for name, opt in optimizers.items():
        states = opt.get("state") if isinstance(opt, Mapping) else None
        for key, entry in states.items() if isinstance(states, Mapping) else ():
            if not isinstance(entry, Mapping) or "step" not in entry:
                continue
            count, field = entry["step"], f"optimizers.{_key(name)}.state.{_key(key)}.step"
            if isinstance(count, torch.Tensor) and count.numel() == 1 and not count.is_complex():
                count = count.item()  # one number: a mapped file reads only these bytes
            if type(count) not in (int, float):
                wrong.append(f"{field}={shown(count)} is a {type(count).__name__}, not a count of steps; {START_OVER}")
            elif not (math.isfinite(count) and count == int(count) and 0 <= count <= step):
                wrong.append(f"{field}={shown(count)} is not a count of steps from 0 to loop.step={step}; {START_OVER}")
    return wrong


def non_finite(payload: Mapping[str, Any]) -> list[str]:
    """Where the model's, the optimizers' and the scaler's state hold NaN or inf (a float, or an
    element of a floating tensor), the first three places named. Walked with a stack, each container
    and tensor once: a file can nest lists deeper than Python recurses, or share one list so often
    that walking every path to it would never end."""
    seen: set[int] = set()
    found: list[str] = []
    todo: list[tuple[str, Any]] = [(part, payload[part]) for part in ("model", "optimizers", "scaler")]
    while todo:
        where, item = todo.pop()
        if isinstance(item, Mapping | list | tuple | torch.Tensor):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, Mapping):
            todo.extend((f"{where}.{_key(key)}", sub) for key, sub in item.items())
        elif isinstance(item, list | tuple):
            todo.extend((f"{where}.{i}", sub) for i, sub in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            found.append(f"{where}={item}")
        elif isinstance(item, torch.Tensor) and not _all_finite(item):
            found.append(where)
    if not found:
        return []
    found.sort()
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return [f"{', '.join(found[:3])}{more} hold NaN or inf (a run resumed from it would train on NaN); {START_OVER}"]


def _all_finite(tensor: torch.Tensor) -> bool:
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    if tensor.layout == torch.sparse_coo:
        tensor = tensor._values()
    elif tensor.layout != torch.strided:
        tensor = tensor.values()  # the compressed sparse layouts
    if tensor.is_contiguous():
        flat = tensor.reshape(-1)  # a view: nothing copied
    else:
        # Every element its storage holds, each read once: reshaping the view could copy it, and a
        # file can hold a view that revisits its storage (stride 0: 2^40 elements over one).
        storage = tensor.untyped_storage()
        flat = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, (storage.nbytes() // tensor.element_size(),), (1,))
    return all(bool(torch.isfinite(chunk).all()) for chunk in flat.split(_FINITE_CHUNK))


def scaler_problems(saved: Mapping[str, Any], own: Mapping[str, Any]) -> list[str]:
    """An fp16 run's GradScaler state (`saved`) against this run's fresh one (`own`): the same
    constants, a scale above 0, a growth tracker below its interval (ints, as GradScaler writes
    them). Its numbers are finite and its keys GradScaler's (training/checkpoint.py: _malformed)."""
    if not own or not saved:
        return []  # not fp16, or an empty state an fp16 scaler's load_state_dict refuses itself
    wrong = [
        f"scaler.{key}={shown(saved[key])} is not this run's {own[key]!r}; {START_OVER}"
        for key in ("growth_factor", "backoff_factor", "growth_interval")
        if type(saved[key]) is not type(own[key]) or saved[key] != own[key]
    ]
    if not saved["scale"] > 0:
        wrong.append(f"scaler.scale={shown(saved['scale'])} is not above 0; {START_OVER}")
    tracker = saved["_growth_tracker"]
    if type(tracker) is not int or not 0 <= tracker < own["growth_interval"]:
        wrong.append(
            f"scaler._growth_tracker={shown(tracker)} is not an int below growth_interval={own['growth_interval']}; "
            + START_OVER
        )
    return wrong


def shown(value: object) -> str:
    """A value read from a checkpoint, as an error quotes it: a huge int by its size (str() of one
    over 4300 digits raises), anything else cut short."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<a {value.bit_length()}-bit number>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(key: object) -> str:
    """A key in a field's dotted name: plain if it is a short printable string, else quoted."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else shown(key)
