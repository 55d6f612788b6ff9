"""The CUDA estimate of an LM whose batches change shape (dynamic padding, packing) runs the run's
own sequence of batch lengths through the caching allocator's model (memory/trace.py): held to the
reserved peaks an H200 measured for the bench's lm suite, and checked to run the lengths the run's
data gives, in the run's order, where the CPU estimate still traces the longest shape only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from elastune.config import RunConfig
from elastune.data.batch import slice_batch
from elastune.data.text import TokenBatch
from elastune.memory.estimate import estimate, trace
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from elastune.workloads.lm import REPLAYED, TransformerLM

BENCH = Path(__file__).resolve().parents[2] / "bench"
RECORD = BENCH / "records" / "estimator-lm-cuda-20261126-040721-5d3d951.json"  # `--suite lm --device cuda`
MiB = 2**20


def _measured_mib(label: str) -> float:
    """The reserved peak the record measured for the bench config `label`."""
    rows = json.loads(RECORD.read_text())["table"]["rows"]
    return next(float(row[2]) for row in rows if row[1] == label)


def _bench_config(label: str, monkeypatch: pytest.MonkeyPatch) -> RunConfig:
    """The lm suite's config `label` under the bench's run settings, on CUDA (bench/estimator.py)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import estimator  # bench/estimator.py

    overrides = dict(estimator.SUITES["lm"])[label]
    return load_run_config(None, [*estimator.RUN, "device=cuda", *overrides])


@pytest.mark.parametrize(
    "label",
    [
        "lm dynamic micro 32",  # predicted 254 MiB before the replay (-31%)
        "lm dynamic buckets micro 16",  # 132 MiB before (-34%)
        "lm packed micro 32",
        "lm packed micro 8 checkpointed",
        "lm static micro 32",
        "lm static micro 8",
        "lm static micro 32 checkpointed",
    ],
)
def test_cuda_estimate_is_within_10_percent_of_the_h200_reserved_peak(
    label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    est = estimate(_bench_config(label, monkeypatch), torch.device("cuda"))
    assert est.kind == "cuda_reserved"
    assert est.peak_bytes / MiB == pytest.approx(_measured_mib(label), rel=0.10)


SMALL = [  # a few milliseconds a step: the LM at a 64-token context
    "workload=lm",
    "workload_options={vocab: 256, context: 64, mean_length: 10, layers: 1, heads: 2}",
    "model.embedding_dim=16",
    "eval.samples=256",
    "device=cuda",
]
Shape = tuple[int, int]  # [rows, columns] of a micro-batch's tokens as the model takes them


def _traced(cfg: RunConfig, cuda: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Shape], list[Shape]]:
    """The shape of every micro-batch the trace runs through the model: (training, evaluation), in order."""
    seen: dict[bool, list[Shape]] = {True: [], False: []}
    forward = TransformerLM.forward

    def recording(model: TransformerLM, tokens: torch.Tensor, *args: object) -> torch.Tensor:
        seen[model.training].append((tokens.shape[0], tokens.shape[1] + 1))  # all but the last column
        return forward(model, tokens, *args)

    monkeypatch.setattr(TransformerLM, "forward", recording)
    trace(cfg, cuda=cuda)
    return seen[True], seen[False]


def _real(cfg: RunConfig) -> tuple[list[list[Shape]], list[list[Shape]]]:
    """The shape of every micro-batch of the run's training steps and eval batches, as the loop
    makes them from the real data (read, arranged, split; padded to the longest, or packed)."""
    workload = build_workload(cfg)
    source = workload.data_source()
    n, micro = cfg.batch.effective, cfg.batch.micro

    def shapes(batch: TokenBatch) -> list[Shape]:
        parts = [slice_batch(batch, i, min(i + micro, len(batch))) for i in range(0, len(batch), micro)]
        if workload.options.padding == "packed":
            return [tuple(workload.pack(part)[0].shape) for part in parts]
        return [(len(part), int(part.lengths.max())) for part in parts]

    steps = [shapes(workload.arrange_step(source.read(step * n, n))) for step in range(cfg.steps)]
    return steps, [shapes(batch) for batch in source.eval_batches(cfg.eval.samples, micro)]


def _replayed(batches: list[list[Shape]], grows: int) -> list[Shape]:
    """Of the batches' micro-batches, those a replay runs: every one of the first REPLAYED batches,
    then of each batch larger (its rows or columns, `grows`) than all before it."""
    kept, largest = [], 0
    for index, parts in enumerate(batches):
        size = max(shape[grows] for shape in parts)
        if index < REPLAYED or size > largest:
            kept += parts
        largest = max(largest, size)
    return kept


@pytest.mark.parametrize(
    "sets",
    [
        ["workload_options.padding=dynamic", "batch.micro=4", "steps=40"],
        ["workload_options.padding=dynamic", "workload_options.bucket_by_length=true", "batch.micro=4",
         "batch.accum=3", "steps=30"],
        ["workload_options.padding=packed", "batch.micro=16", "steps=150"],  # 5 rows first at step 145
    ],
)  # fmt: skip
def test_the_cuda_replay_runs_the_runs_own_shapes_in_order(sets: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_run_config(None, [*SMALL, *sets])
    grows = 0 if "packed" in sets[0] else 1
    steps, evals = _real(cfg)
    train, evaluation = _traced(cfg, True, monkeypatch)
    assert (train, evaluation) == (_replayed(steps, grows), _replayed(evals, grows))
    first = REPLAYED * cfg.batch.accum
    assert len(train) > first  # a later step, larger than all before it, is run too
    assert len({shape[grows] for shape in train[:first]}) >= 3  # the shapes vary from micro-batch to micro-batch


def test_the_cpu_trace_still_prices_two_steps_at_the_longest_the_run_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_run_config(None, [*SMALL, "workload_options.padding=dynamic", "batch.micro=4", "steps=40", "device=cpu"])
    steps, evals = _real(cfg)
    longest = max(shape for batch in steps + evals for shape in batch)  # training and eval micro-batches of 4
    assert _traced(cfg, False, monkeypatch) == ([longest] * 2, [longest])
