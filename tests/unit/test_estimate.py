"""The memory estimator: a fake-tensor trace of one training step plus the overhead model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
from elastune.config import RunConfig
from elastune.embeddings.full import feature_offsets
from elastune.embeddings.int8 import Int8Embedding
from elastune.embeddings.sparse_optim import pooled_sum, traced_distinct_rows
from elastune.memory.estimate import PARTS, distinct_rows, estimate, trace
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from elastune.workloads.dlrm import DLRMWorkload
from torch._subclasses.fake_tensor import FakeTensorMode

MakeCfg = Callable[..., RunConfig]


def _param_bytes(cfg: RunConfig) -> int:
    model = build_workload(cfg).build_model()
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _buffer_bytes(cfg: RunConfig) -> int:
    model = build_workload(cfg).build_model()
    return sum(b.numel() * b.element_size() for b in model.buffers())


def test_breakdown_sums_to_the_peak(tiny_cfg: MakeCfg) -> None:
    cfg = tiny_cfg()
    est = estimate(cfg)
    assert set(est.breakdown) == set(PARTS)
    assert all(v >= 0 for v in est.breakdown.values())
    assert sum(est.breakdown.values()) == est.peak_bytes
    assert est.kind == ("cuda_reserved" if cfg.device.startswith("cuda") else "cpu_rss_hwm")
    assert est.traced_peak_bytes <= est.peak_bytes


class GatheringDLRM(DLRMWorkload):
    """DLRM whose `evaluate` (as a retrieval metric's would) keeps 1,024 floats per held-out row."""

    def example_eval_state(self, samples: int) -> list[torch.Tensor]:
        return [torch.empty(samples, 1024)]


def test_what_evaluate_gathers_is_priced_beside_the_eval_batch(tiny_cfg: MakeCfg) -> None:
    """A workload's declared evaluation state is held through the traced eval batch: the traced
    peak is that state plus what the eval phase holds anyway (parameters, optimizer state, one
    batch), and no more than that plus the training peak; the training steps' peak is untouched."""
    gathered = 16384 * 1024 * 4  # 64 MiB: far above the tiny config's training peak
    plain = trace(tiny_cfg("eval.samples=16384"))
    gathering = trace(tiny_cfg("workload=tests.unit.test_estimate:GatheringDLRM", "eval.samples=16384"))
    assert plain.peak < gathered / 16
    assert gathered < gathering.peak <= gathered + plain.peak
    # the training steps' own peak, where the CPU heap model looks for activation holes, is the same
    assert gathering.train_peak == plain.train_peak < gathered
    assert (plain.peak_phase, gathering.peak_phase) == ("training", "evaluation")


def test_parameters_and_adam_state_are_counted_exactly(tiny_cfg: MakeCfg) -> None:
    cfg = tiny_cfg("optimizer.dense=adam", "optimizer.sparse=adam")
    est = estimate(cfg)
    params = _param_bytes(cfg)
    # The Adam step is the high-water mark here: parameters, their gradients and both moments.
    assert est.breakdown["parameters"] == params + _buffer_bytes(cfg)  # index buffers count too
    # At the peak (the fused Adam step) all but possibly the last small gradients are alive.
    assert 0.99 * params <= est.breakdown["gradients"] <= params
    # Adam keeps two moments per parameter, plus a step counter per tensor.
    assert 2 * params <= est.breakdown["optimizer_state"] <= 2 * params + 64 * 16


def test_sgd_dense_optimizer_holds_less_state_than_adam(tiny_cfg: MakeCfg) -> None:
    adam = estimate(tiny_cfg("optimizer.dense=adam"))
    sgd = estimate(tiny_cfg("optimizer.dense=sgd"))
    assert sgd.breakdown["optimizer_state"] < adam.breakdown["optimizer_state"]


def test_bigger_micro_batches_need_more_activation_memory(tiny_cfg: MakeCfg) -> None:
    small = estimate(tiny_cfg("batch.micro=64"))
    large = estimate(tiny_cfg("batch.micro=4096"))
    assert large.transient_peak_bytes > 8 * small.transient_peak_bytes // 2
    assert large.peak_bytes > small.peak_bytes


def test_accumulation_keeps_activations_at_the_micro_batch(tiny_cfg: MakeCfg) -> None:
    one_pass = estimate(tiny_cfg("batch.micro=4096", "batch.accum=1"))
    accumulated = estimate(tiny_cfg("batch.micro=512", "batch.accum=8"))
    assert accumulated.transient_peak_bytes < one_pass.transient_peak_bytes / 2


def test_real_size_criteo_tables_are_traced_without_allocating() -> None:
    # rows_scale=1.0, dim 64: ~8.6 GB of fp32 table. Fake tensors allocate none of it, and the
    # parameter part is the exact size (33.8M rows x 64 x 4 bytes and the MLPs).
    cfg = load_run_config(None, ["data.rows_scale=1.0", "model.embedding_dim=64", "device=cpu"])
    est = estimate(cfg)
    table = sum(build_workload(cfg).table_sizes) * 64 * 4
    assert table > 8e9
    assert table < est.breakdown["parameters"] < table + 2**20
    assert est.peak_bytes > 4 * table  # parameters, gradients, two Adam moments


def test_bf16_autocast_is_traced(tiny_cfg: MakeCfg) -> None:
    fp32 = estimate(tiny_cfg("batch.micro=2048"))
    bf16 = estimate(tiny_cfg("batch.micro=2048", "precision=bf16"))
    assert bf16.transient_peak_bytes != fp32.transient_peak_bytes


def test_only_heap_sized_dense_gradients_count_as_heap_gradients() -> None:
    # The CPU model charges holes for dense gradients under the pinned mmap threshold (32 MiB):
    # the default table's gradient (~21 MB) is one; at dim 64 the same table's (~82 MB) is mapped
    # and returned on free, and a row-wise sparse optimizer leaves no dense table gradient at all.
    base = ["device=cpu", "steps=2", "warmup_steps=1"]
    table = 20_606_000  # the default tables at dim 16, fp32, give or take the MLPs' few KB
    small = trace(load_run_config(None, base))
    assert small.heap_grad_bytes > table
    mapped = trace(load_run_config(None, [*base, "model.embedding_dim=64"]))
    assert 0 < mapped.heap_grad_bytes < 2**20  # the MLPs' gradients only
    rowwise = trace(load_run_config(None, [*base, "optimizer.sparse=rowwise_adagrad"]))
    assert 0 < rowwise.heap_grad_bytes < 2**20


def test_activations_leave_out_the_model_build_and_the_optimizer_step() -> None:
    # int8 builds its table in chunks of fp32 (4 MB temporaries at the default size) and its peak
    # over the whole trace is there, before training; the heap model charges only the activations
    # live at the training steps' peak.
    cfg = load_run_config(
        None, ["device=cpu", "steps=2", "warmup_steps=1", "embedding.strategy=int8", "optimizer.sparse=rowwise_adagrad"]
    )
    tracker = trace(cfg)
    assert tracker.train_peak < tracker.peak
    assert tracker.train_activations() < tracker.classify()["activations"]
    dense = trace(load_run_config(None, ["device=cpu", "steps=2", "warmup_steps=1", "batch.micro=8192"]))
    assert dense.train_activations() > 16 * 2**20  # a micro-batch of 8192's forward/backward


def test_distinct_rows_are_counted_on_the_runs_own_data() -> None:
    cfg = load_run_config(None, ["device=cpu", "batch.micro=4096", "eval.batch=512"])
    wl = build_workload(cfg)
    offsets = feature_offsets(wl.table_sizes).view(1, -1, 1)
    expected = {}
    for n in (4096, 512):
        ids = wl.data_source().read(0, n).sparse
        expected[ids.numel()] = torch.unique(ids + offsets).numel()
    assert distinct_rows(cfg) == expected
    assert expected[4096 * 26] < 4096 * 26 / 5  # Zipf ids: most lookups repeat a row


def test_fake_lookups_hold_the_distinct_rows_they_are_told() -> None:
    # Fake ids have no values; `traced_distinct_rows` says how many distinct rows a batch holds.
    # The self-updating strategies gather (and later update) that many rows; pooled_sum's table
    # gradient has that many. A batch of a size not in the map: one row per lookup.
    with FakeTensorMode():
        int8 = Int8Embedding([100, 50], dim=4)
        table = torch.nn.Parameter(torch.zeros(150, 4))
        ids = torch.zeros(32, 2, 1, dtype=torch.int64)
        with traced_distinct_rows({64: 10}):
            int8(ids).sum().backward()
            (table_grad,) = torch.autograd.grad(pooled_sum(ids.view(64, 1), table).sum(), [table])
            int8(torch.zeros(16, 2, 1, dtype=torch.int64))
        assert [p.values.shape[0] for p in int8._pending] == [10, 32]
        assert table_grad._values().shape == (10, 4)


def test_skewed_data_traces_fewer_rows_for_strategies_that_deduplicate() -> None:
    # The same config on near-uniform ids (zipf_alpha 0.1) touches many more distinct rows per
    # micro-batch than on the default skew: int8's traced step holds at least one fp32 copy of
    # each (the gathered rows); `full` with dense Adam does not depend on the ids at all.
    base = ["device=cpu", "batch.micro=4096", "steps=2", "warmup_steps=1"]
    int8 = [*base, "embedding.strategy=int8", "optimizer.sparse=rowwise_adagrad"]
    (skewed_rows,), (uniform_rows,) = (
        distinct_rows(load_run_config(None, [*int8, f"data.zipf_alpha={a}"])).values() for a in (1.15, 0.1)
    )
    assert uniform_rows > 2 * skewed_rows
    skewed, uniform = (trace(load_run_config(None, [*int8, f"data.zipf_alpha={a}"])) for a in (1.15, 0.1))
    assert uniform.train_peak - skewed.train_peak >= (uniform_rows - skewed_rows) * 16 * 4
    full_skewed, full_uniform = (trace(load_run_config(None, [*base, f"data.zipf_alpha={a}"])) for a in (1.15, 0.1))
    assert full_skewed.train_peak == full_uniform.train_peak


def test_prediction_is_close_to_a_fresh_process_measurement() -> None:
    # The bench (bench/estimator.py) holds the ±10% goal over many configs; this guards one config
    # in a fresh process, with a looser bound because one run's resident peak varies by a few %.
    args = ["data.rows_scale=0.02", "steps=3", "warmup_steps=1", "eval.samples=2048", "device=cpu"]
    cmd = [sys.executable, "-m", "elastune.cli", "train", "--format", "json"]
    for a in args:
        cmd += ["--set", a]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    result = json.loads(done.stdout)
    measured, predicted = result["peak_memory_bytes"], result["estimated_peak_bytes"]
    assert predicted == estimate(load_run_config(None, args)).peak_bytes
    assert measured > 100 * 2**20  # the tables alone are ~43 MB, x4 with gradients and Adam
    assert abs(predicted - measured) / measured < 0.2, (predicted, measured)


_VIRTUAL_RUN = """
import json, sys, torch
from elastune.validate import load_run_config
from elastune.training.probe import VirtualProbe
from elastune.training.loop import train
result = train(load_run_config(None, json.loads(sys.argv[1])), probe=VirtualProbe(1 << 40))
print(result.peak_memory_bytes)
"""


def _virtual_peak(args: list[str]) -> int:
    """The peak of one training run of `args` on EDO's virtual device, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _VIRTUAL_RUN, json.dumps(args)], capture_output=True, text=True, check=True, timeout=300
    )
    return int(done.stdout.split()[-1])


def test_virtual_device_prediction_follows_the_traced_peak() -> None:
    # EDO's virtual device maps every large block and returns it on free, so its peak is the traced
    # peak plus a small constant; the prediction must be close to it, not to the CPU heap model.
    args = [
        "data.rows_scale=0.002",
        "model.embedding_dim=64",
        "optimizer.sparse=rowwise_adagrad",
        "steps=3",
        "warmup_steps=1",
        "eval.samples=512",
        "eval.batch=256",
        "device=cpu",
    ]
    measured = _virtual_peak(args)
    cfg = load_run_config(None, args)
    virtual, cpu = estimate(cfg, virtual=True).peak_bytes, estimate(cfg).peak_bytes
    # One run's virtual peak varies (51-58 MB seen for this config under a loaded CI worker): the
    # ±10% goal is held by the benchmark over many configs; here the regime is what is checked.
    assert abs(virtual - measured) / measured < 0.15, (virtual, measured)
    assert cpu > 1.3 * measured  # the heap model would over-ask: the regimes differ


def test_the_lm_in_bf16_is_priced_within_10_percent_on_the_virtual_device() -> None:
    # The LM's loss holds the most memory of its step (logits over the vocabulary, in fp32), and in
    # bf16 on this kind of CPU the matmuls run through oneDNN, whose primitive cache the trace
    # cannot see (overhead.py). Measured 17% over the prediction before the loss stopped taking a
    # log-softmax over a transposed view (its hidden contiguous copy) and the cache was priced.
    args = [
        "workload=lm",
        "workload_options={layers: 2, heads: 4, context: 128, vocab: 4096, mean_length: 40}",
        "model.embedding_dim=64",
        "batch.micro=16",
        "precision=bf16",
        "steps=6",
        "warmup_steps=1",
        "eval.samples=512",
        "device=cpu",
    ]
    measured = _virtual_peak(args)
    predicted = estimate(load_run_config(None, args), virtual=True).peak_bytes
    assert abs(predicted - measured) / measured < 0.10, (predicted, measured)


@pytest.mark.parametrize("bad", ["batch.micro=0", "precision=fp8"])
def test_estimate_refuses_bad_configs_before_tracing(bad: str) -> None:
    from elastune.errors import ConfigError

    with pytest.raises(ConfigError):
        estimate(load_run_config(None, [bad]))


# -- CUDA: the replay through the caching-allocator model runs without a GPU


def _moved_bytes(cfg: RunConfig) -> int:
    """Bytes `model.to("cuda")` would put on the device: every parameter and buffer but those a
    module keeps on the host."""
    model = build_workload(cfg).build_model()
    host = {id(getattr(m, n)) for m in model.modules() for n in getattr(m, "host_buffers", ())}
    tensors = [t for t in [*model.parameters(), *model.buffers()] if id(t) not in host]
    return sum(t.numel() * t.element_size() for t in tensors)


def test_cuda_estimate_is_a_reserved_peak_in_allocator_segments(tiny_cfg: MakeCfg) -> None:
    est = estimate(tiny_cfg(), torch.device("cuda"))
    assert est.kind == "cuda_reserved"
    assert sum(est.breakdown.values()) == est.peak_bytes
    assert est.peak_bytes >= est.traced_peak_bytes


def test_cuda_estimate_counts_the_cached_tables_host_rows_nowhere(tiny_cfg: MakeCfg) -> None:
    cfg = tiny_cfg("embedding.strategy=cached", "embedding.cache_ratio=0.1", "optimizer.sparse=rowwise_adagrad")
    est = estimate(cfg, torch.device("cuda"))
    # only the cache (10% of the rows) and the dense layers are device parameters
    assert est.breakdown["parameters"] == _moved_bytes(cfg)
    assert est.breakdown["parameters"] < _buffer_bytes(cfg) / 5


def test_cuda_estimate_leaves_the_builds_host_scratch_out(tiny_cfg: MakeCfg) -> None:
    # int8 builds its rows from fp32 chunks on the host; a run moves only the codes and scales
    cfg = tiny_cfg("embedding.strategy=int8", "optimizer.sparse=rowwise_adagrad", "data.rows_scale=0.01")
    on_cuda = trace(cfg, cuda=True)
    on_cpu = trace(cfg)
    assert estimate(cfg, torch.device("cuda")).breakdown["parameters"] == _moved_bytes(cfg)
    assert on_cuda.peak < on_cpu.peak  # the CPU's peak is the build's
