"""DeepFM, DCN-V2 and MMoE as their user meets them: installed next to elastune and found by name,
shaped right under every embedding strategy, trained past the click-rate baseline in a fraction of
a second of steps, estimated, and refused with a config error when an option is wrong. How close the
estimator comes to their measured peaks is the estimator benchmark's to say (bench/estimator.py)."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest
import torch
from ctr_models.conversions import ConversionBatch, WithConversions
from ctr_models.dcn_v2 import DCNv2, DCNv2Options
from ctr_models.deepfm import DeepFM
from elastune import Workload
from elastune.cli import main
from elastune.data import SyntheticCriteo
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from torch import nn

EXAMPLE = Path(__file__).resolve().parents[1]
WORKLOADS = {
    "deepfm": "ctr_models.deepfm:DeepFMWorkload",
    "dcn_v2": "ctr_models.dcn_v2:DCNv2Workload",
    "mmoe": "ctr_models.mmoe:MMoEWorkload",
}
# Tables of 2 to 5,066 rows, 8 wide: a model builds in milliseconds. One torch thread: a thread per
# core stalls on a core another process is busy on.
TINY = ["data.rows_scale=0.0005", "model.embedding_dim=8", "device=cpu", "threads=1"]
ROWWISE = "optimizer.sparse=rowwise_adagrad"  # what half, int8 and cached tables need


def _sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def _workload(name: str, *sets: str) -> Workload:
    return build_workload(load_run_config(None, [f"workload={name}", *TINY, *sets]))


def test_the_package_installs_from_its_own_pyproject(tmp_path: Path) -> None:
    """A wheel built from examples/ctr_models/ and installed into a fresh folder registers the three
    workloads under `elastune.workloads`: what `pip install` of the example does on a cluster node."""
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(target), str(EXAMPLE)], check=True, capture_output=True, timeout=300)
    probe = (
        "import json; from importlib.metadata import entry_points; import ctr_models; "
        "print(json.dumps([ctr_models.__file__, {e.name: e.value for e in entry_points(group='elastune.workloads') "
        "if e.dist.name == 'elastune-ctr-models'}]))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True).stdout
    module, found = json.loads(out)
    assert found == WORKLOADS and Path(module).is_relative_to(target)


def test_the_three_are_installed_in_this_environment() -> None:
    """`make install` installs the package (editable): `workload: deepfm` (and dcn_v2, mmoe) name it."""
    found = {e.name: e.value for e in entry_points(group="elastune.workloads") if e.name in WORKLOADS}
    assert found == WORKLOADS
    assert distribution("elastune-ctr-models").version == "0.1.0"


@pytest.mark.parametrize(
    "strategy",
    [["embedding.strategy=full"], ["embedding.strategy=half", ROWWISE], ["embedding.strategy=int8", ROWWISE],
     ["embedding.strategy=hashed"], ["embedding.strategy=qr"], ["embedding.strategy=cached", ROWWISE],
     ["embedding.strategy=full", "data.pooling=3"]],
    ids=["full", "half", "int8", "hashed", "qr", "cached", "full-pooling3"],
)  # fmt: skip
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_forward_shape_under_each_strategy(name: str, strategy: list[str]) -> None:
    """One logit per sample (two for MMoE: click, conversion) from a real batch, whatever stores the
    tables; the estimator's example batch has the real one's structure."""
    wl = _workload(name, *strategy)
    model = wl.build_model()
    batch = wl.data_source().read(0, 32)
    out = model(batch.dense, batch.sparse)
    assert out.shape == ((32, 2) if name == "mmoe" else (32,)) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    loss = wl.loss(model, batch)
    loss.backward()
    assert loss.ndim == 0 and math.isfinite(loss.item())
    example = wl.example_batch(32)
    assert type(example) is type(batch)
    assert [(f, getattr(example, f).shape, getattr(example, f).dtype) for f in vars(batch)] == [
        (f, v.shape, v.dtype) for f, v in vars(batch).items()
    ]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_training_beats_the_click_rate_baseline(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """60 steps of 256 synthetic clicks (a planted, learnable signal): a held-out log loss below
    always predicting the click rate, and an AUC well above chance, per task for MMoE."""
    steps = ["steps=60", "warmup_steps=1", "batch.micro=256", "eval.samples=4096"]
    assert main(["train", "--format", "json", *_sets(f"workload={name}", *TINY, *steps)]) == 0
    result = json.loads(capsys.readouterr().out)
    m = result["metrics"]
    assert all(math.isfinite(v) for v in m.values()), m
    if name == "mmoe":
        assert (result["quality_metric"], result["quality_direction"]) == ("mean_auc", "max")
        assert m["click_auc"] > 0.65 and m["conversion_auc"] > 0.65, m
        assert m["mean_auc"] == pytest.approx((m["click_auc"] + m["conversion_auc"]) / 2)
        assert m["loss"] < m["click_baseline_logloss"] + m["conversion_baseline_logloss"], m
    else:
        assert (result["quality_metric"], result["quality_direction"]) == ("auc", "max")
        assert m["auc"] > 0.65 and m["logloss"] < m["baseline_logloss"], m


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_it_is_estimated_with_compressed_and_cached_tables(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The estimator traces each model (MMoE's two-label batch too) and prices its 26 tables."""
    peaks = {}
    for strategy in ("full", "int8", "cached"):
        sets = [f"workload={name}", *TINY, f"embedding.strategy={strategy}", ROWWISE]
        assert main(["estimate", "--format", "json", *_sets(*sets)]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["tables"]["count"] == 26
        peaks[strategy] = out["estimated_peak_bytes"]
    assert all(p > 0 for p in peaks.values()), peaks


class _FieldTable(nn.Module):
    """An EmbeddingBag looked up per field: ids [B, F, P] -> [B, F, dim], as elastune's tables."""

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(rows, dim, mode="sum")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, f, p = ids.shape
        out: torch.Tensor = self.bag(ids.reshape(b * f, p)).reshape(b, f, -1)
        return out


def test_deepfm_second_order_term_is_the_sum_over_pairs() -> None:
    """The O(F * dim) form 0.5 * ((sum v)^2 - sum v^2) against the paper's sum over pairs i < j."""
    num_dense, num_fields, dim = 3, 4, 5
    model = DeepFM(num_dense, _FieldTable(50, dim), num_fields, dim, [8])
    with torch.no_grad():  # everything but the second-order term to zero
        for p in (*model.dense_weights.parameters(), model.id_weights, *model.deep[-1].parameters()):
            p.zero_()
        model.second_scale.fill_(1.0)
    dense, sparse = torch.rand(6, num_dense), torch.randint(0, 50, (6, num_fields, 1))
    vectors = torch.cat([dense.unsqueeze(2) * model.dense_vectors, model.embeddings(sparse)], dim=1)
    pairs = itertools.combinations(range(num_dense + num_fields), 2)
    expected = torch.stack([(vectors[:, i] * vectors[:, j]).sum(1) for i, j in pairs]).sum(0)
    assert torch.allclose(model(dense, sparse), expected, atol=1e-6)


def test_dcn_v2_low_rank_and_parallel() -> None:
    """A rank-r cross layer holds U and V (2 d r + d) instead of W (d^2 + d); parallel reads x0 in
    both branches. d = 13 + 26 * 8 = 221."""
    tables = nn.EmbeddingBag(10, 8)
    full = DCNv2(13, tables, 26, 8, DCNv2Options(cross_layers=1))
    low = DCNv2(13, tables, 26, 8, DCNv2Options(cross_layers=1, cross_rank=16, structure="parallel"))
    d = 221
    assert sum(p.numel() for p in full.cross.parameters()) == d * d + d
    assert sum(p.numel() for p in low.cross.parameters()) == 2 * d * 16 + d
    assert low.out.in_features == 64 + d


def test_conversions_are_clicks_and_a_pure_function_of_position() -> None:
    source = WithConversions(SyntheticCriteo((50, 300, 2000, 20, 7000, 9, 40, 3, 100, 60, 800), seed=3))
    whole = source.read(4000, 300)  # crosses a chunk boundary (4096)
    parts = [source.read(4000, 100), source.read(4100, 200)]
    for field in ("dense", "sparse", "labels", "conversions"):
        assert torch.equal(getattr(whole, field), torch.cat([getattr(p, field) for p in parts]))
    many = source.read(0, 20_000)
    assert isinstance(many, ConversionBatch)
    assert bool((many.conversions <= many.labels).all())  # a conversion is a click
    assert 0.1 < float(many.conversions.sum() / many.labels.sum()) < 0.6, "share of clicks that convert"
    held_out = next(source.eval_batches(512, 512))
    assert held_out.conversions.shape == (512,) and not torch.equal(held_out.sparse, many.sparse[:512])


@pytest.mark.parametrize(
    ("name", "option", "says"),
    [
        ("deepfm", "workload_options={deep_mlp: [0]}", "workload_options.deep_mlp"),
        ("dcn_v2", "workload_options.cross_layers=-1", "workload_options.cross_layers"),
        ("dcn_v2", "workload_options.structure=side_by_side", "workload_options.structure"),
        ("mmoe", "workload_options.expert=8", "did you mean 'workload_options.experts'"),
        ("mmoe", "workload_options.conversion_weight=nan", "workload_options.conversion_weight"),
    ],
)
def test_bad_options_are_config_errors(name: str, option: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *_sets(f"workload={name}", option)]) == 2
    assert says in capsys.readouterr().err
