"""The fake-tensor trace: what training a config allocates, step for step, with nothing allocated.

The model is built and two full training steps run (forward and backward over every micro-batch,
then the optimizer step), then one evaluation batch (beside what the workload says its `evaluate`
keeps across batches: `Workload.example_eval_state`), all under `FakeTensorMode`. Fake tensors carry
shapes and dtypes but no data, so even the real-size Criteo tables (tens of GB) trace in about a
second; `LiveBytes` (live_bytes.py) keeps the high-water mark of live bytes. Two steps, because
optimizer state is created lazily in the first and is resident through the second.

Fake ids have no values, so the strategies that work on a batch's distinct rows (half, int8, cached,
and the row optimizers' sparse gradients) are told how many there are: `distinct_rows` counts them in
the run's first micro-batch (Zipf ids repeat: 14% of the default batch's lookups are distinct rows).
The worst case, one row per lookup, would over-predict those strategies at large micro-batches.

For a CUDA prediction the model is built on the host, as `train` builds it, and only what
`.to(device)` moves enters the allocator's replay: not the build's scratch, nor the tensors a module
keeps in host memory, named in its `host_buffers` (the `cached` strategy's table).

Where a workload's batches change shape from one to the next (an LM under dynamic padding or
packing: each micro-batch as long as its longest sequence, or as many rows as its documents pack
into), a CUDA prediction runs the run's own batches instead of two of one shape: the training steps
and then the evaluation batches the workload gives (`Workload.example_batches`: for the LM, its
first 16 steps and eval batches in the run's order, then each one larger than all before it). The
caching allocator keeps every freed block for a later request that fits, so shapes that vary leave
blocks too small for the next step's tensors, and the reserved peak grows past what the largest
shape alone reserves: measured on an H200, the LM at micro 32 reserves 368 MiB with dynamic
padding, 254 with static padding (every step at the full context); the replay predicts 366, two
steps of the longest shape 254 (bench/records/estimator-lm-cuda-20261126-040721-5d3d951.json). The
CPU prediction still traces two steps of the largest shape the run's data shows: its heap model
is fitted on that trace.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any, cast

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from elastune.config import RunConfig
from elastune.data.batch import Batch
from elastune.embeddings.full import feature_offsets
from elastune.embeddings.self_updating import SelfUpdatingEmbedding
from elastune.embeddings.sparse_optim import traced_distinct_rows
from elastune.errors import DataError
from elastune.memory.live_bytes import LiveBytes
from elastune.training.optim import Optimizers
from elastune.training.precision import autocast_for
from elastune.training.step import forward_backward
from elastune.workloads import Workload, build_workload

__all__ = ["distinct_rows", "trace"]


def trace(cfg: RunConfig, cuda: bool = False) -> LiveBytes:
    """Run the fake-tensor trace of `cfg` and return the tracker with its figures."""
    tracker = LiveBytes(round_cuda=cuda)
    distinct = distinct_rows(cfg)
    # The trace runs on CPU fake tensors whatever the device: sizes and dtypes are the same, and
    # it needs no GPU (a driver can estimate for a cluster it is not part of).
    with FakeTensorMode(allow_non_fake_inputs=False), tracker, traced_distinct_rows(distinct):
        _trace_training(cfg, tracker)
    return tracker


def distinct_rows(cfg: RunConfig) -> dict[int, int]:
    """Lookups in a training micro-batch and an eval batch -> the distinct rows among them, counted
    on the run's own data (its first samples). A fake trace has no ids to deduplicate; with these
    counts the strategies that touch only a batch's distinct rows (`sparse_optim.traced_rows`) are
    traced at their real size, not at one row per lookup: 13.7% of the lookups in the default
    micro-batch of 1024 x 26 Zipf ids, 5.4% at 16384. Data that cannot be read: {} (the worst case)."""
    key = (
        cfg.workload,
        json.dumps(cfg.workload_options, sort_keys=True),
        cfg.data.model_dump_json(),
        cfg.model.model_dump_json(),  # a workload may check its shape against its options (an LM's heads)
        cfg.batch.micro,
        cfg.eval.batch or cfg.batch.micro,
        cfg.eval.samples,
    )
    return dict(_distinct_rows(*key))


@functools.lru_cache(maxsize=64)
def _distinct_rows(
    workload: str, options_json: str, data_json: str, model_json: str, micro: int, eval_batch: int, eval_samples: int
) -> tuple[tuple[int, int], ...]:
    # eval.samples: a file source holds that many rows out, and training reads start after them
    cfg = RunConfig.model_validate(
        {
            "workload": workload,
            "workload_options": json.loads(options_json),
            "data": json.loads(data_json),
            "model": json.loads(model_json),
            "eval": {"samples": eval_samples},
        }
    )
    wl = build_workload(cfg)
    counts = {}
    try:
        source = wl.data_source()
        for n in {micro, eval_batch}:
            ids = wl.table_ids(source.read(0, n))
            if ids is None:  # the workload does not say which ids it looks up: one row per lookup
                return ()
            offsets = feature_offsets(wl.table_sizes).view(1, -1, 1)
            counts[ids.numel()] = int(torch.unique(ids + offsets).numel())
    except DataError:
        return ()
    return tuple(counts.items())


def _trace_training(cfg: RunConfig, tracker: LiveBytes) -> None:
    """What `training.loop.train` allocates, step for step, on fake tensors."""
    workload = build_workload(cfg)
    if tracker.cuda is None:
        model = workload.build_model()
    else:
        # A run builds the model on the CPU and moves it (`.to(device)`): the build's scratch and
        # the tensors a module keeps on the host (the `cached` strategy's table) never reach the device.
        with tracker.on_host():
            model = workload.build_model()
        for t in _moved_tensors(model):
            tracker.to_device(t)
        for module in model.modules():
            if isinstance(module, SelfUpdatingEmbedding):
                module.kernel_device = "cuda"  # pick the kernels a CUDA run picks
    opts = Optimizers(model, cfg.optimizer)
    autocast = autocast_for(cfg.precision, torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", enabled=False)  # unscaling is in place: no extra bytes
    model.train()
    tracker.phase = "training"
    replay = tracker.cuda is not None
    for batch in _batches(workload, cfg.batch.effective, 2, replay=replay):
        with tracker.step():
            tracker.begin_transient()
            forward_backward(model, workload, batch, cfg.batch.micro, autocast, scaler)
            tracker.end_transient()
            with tracker.updating():
                opts.step(scaler)
            tracker.mark(model, opts)  # grads and state are all alive here
            opts.zero_grad()
        del batch
    tracker.phase = "evaluation"  # the training steps' peak (`train_peak`) leaves the evaluation out
    model.eval()
    with torch.no_grad(), autocast():
        kept = workload.example_eval_state(cfg.eval.samples)  # what `evaluate` gathers across batches
        for batch in _batches(workload, cfg.eval.batch or cfg.batch.micro, 1, replay=replay, held_out=True):
            workload.eval_step(model, batch, cast(Mapping[str, Any], _UNRECORDED))
            del batch
        del kept


def _batches(workload: Workload, n: int, count: int, *, replay: bool, held_out: bool = False) -> Iterator[Batch]:
    """The batches the trace runs: `count` of `example_batch(n)`, or in a CUDA replay the run's
    own, in order, where the workload's shapes change from batch to batch (`example_batches`)."""
    varying = workload.example_batches(held_out=held_out) if replay else None
    return varying if varying is not None else (workload.example_batch(n) for _ in range(count))


class _Unrecorded:
    """A metric that records nothing: what `eval_step` updates in the trace (a metric's own state
    is a few numbers, and its checks would read the fake tensors' values)."""

    def update(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> None:
        pass


class _UnrecordedMetrics(dict[str, _Unrecorded]):
    def __missing__(self, name: str) -> _Unrecorded:
        return _Unrecorded()


_UNRECORDED = _UnrecordedMetrics()


def _moved_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters and buffers `model.to(device)` moves: all but those a module keeps on the
    host (named in its `host_buffers`, as the `cached` strategy's table is)."""
    host = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "host_buffers", ())}
    return [t for t in [*model.parameters(), *model.buffers()] if id(t) not in host]
