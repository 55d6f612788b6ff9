"""A user's own map-style torch Dataset as the data (elastune.data.DatasetSource, `Workload.dataset()`):
reads are a pure function of position (any split of a range reads the same samples, random
augmentations included), each epoch is a new shuffle of the training items, the held-out items are
fixed and never trained on, so micro-batch x accumulation and resume stay exact through the loop;
the estimator prices such a workload from its example batch; bad input is a DataError naming the fix."""

from __future__ import annotations

import copy
import json
import random
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from elastune.cli import main
from elastune.config import DataConfig
from elastune.data import DatasetSource, Ragged, concat_batches
from elastune.data.batch import batch_size, slice_batch
from elastune.errors import DataError
from elastune.training.batches import step_batches
from elastune.training.loop import train
from elastune.training.step import forward_backward
from elastune.validate import load_run_config
from elastune.workloads import Workload, build_workload
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset, IterableDataset, default_collate

from tests.unit.test_loop import assert_same_weights, final_weights

HERE = "tests.unit.test_dataset_source"
USERS, ITEMS = 50, 40


class Noisy(Dataset[dict[str, Any]]):
    """Item i: its index, and three "augmentations" drawn from the global generators a Dataset
    usually draws them from (torch's, Python's random, NumPy's legacy np.random)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"i": torch.tensor(i), "torch": torch.rand(2), "py": random.random(), "np": np.random.rand()}


def same(a: Any, b: Any) -> bool:
    return a.keys() == b.keys() and all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)


# -- position purity ------------------------------------------------------------------------------


@pytest.mark.parametrize(("start", "cuts"), [(0, [5, 16]), (3, [1, 1, 7]), (11, [20, 2, 13]), (40, [0, 9])])
def test_any_split_of_a_range_reads_the_same_samples(start: int, cuts: list[int]) -> None:
    # 12 training items (3 held out of 15): the ranges cross epoch boundaries
    source = DatasetSource(Noisy(15), eval_samples=3, seed=7)
    whole = source.read(start, sum(cuts))
    parts, at = [], start
    for n in cuts:
        parts.append(source.read(at, n))
        at += n
    assert same(whole, concat_batches(parts))
    # ...read in another order, by another source over the same Dataset, too
    again = DatasetSource(Noisy(15), eval_samples=3, seed=7)
    assert same(concat_batches([again.read(start + cuts[0], sum(cuts[1:])), again.read(start, cuts[0])]),
                concat_batches([*parts[1:], parts[0]]))  # fmt: skip


def test_random_augmentations_are_a_function_of_position_and_leave_the_callers_stream_alone() -> None:
    source = DatasetSource(Noisy(10), held_out=Noisy(4), seed=0)
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    first = source.read(0, 30)  # three epochs of the 10 items
    # the caller's generators are where they were: reading drew nothing from them
    after = torch.rand(3), random.random(), np.random.rand()
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    assert torch.equal(after[0], torch.rand(3)) and after[1:] == (random.random(), np.random.rand())
    # the same positions read again, with the global generators elsewhere, give the same draws
    torch.manual_seed(999)
    assert same(first, source.read(0, 30))
    # an item's draws differ from epoch to epoch (a new crop each time it is seen), and item to item
    seen = [int(k) for k in (first["i"] == 4).nonzero()]  # item 4's position in each epoch
    assert len(seen) == 3 and not torch.equal(first["torch"][seen[0]], first["torch"][seen[1]])
    assert len({tuple(t.tolist()) for t in first["torch"]}) == 30


def test_each_epoch_is_a_new_shuffle_of_the_training_items() -> None:
    source = DatasetSource(Noisy(50), eval_samples=10, seed=1)
    epochs = [source.read(e * 40, 40)["i"].tolist() for e in range(3)]
    assert len(source) == 40
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(epochs[2])  # every training item once an epoch
    assert len(set(epochs[0])) == 40
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]  # shuffled differently each time
    assert epochs[0] != sorted(epochs[0])
    # the seed decides: another data seed, another order; the same seed, the same one
    assert DatasetSource(Noisy(50), eval_samples=10, seed=2).read(0, 40)["i"].tolist() != epochs[0]
    assert DatasetSource(Noisy(50), eval_samples=10, seed=1).read(0, 40)["i"].tolist() == epochs[0]


def test_held_out_items_are_fixed_and_never_trained_on() -> None:
    source = DatasetSource(Noisy(50), eval_samples=10, seed=1)
    held = [int(i) for b in source.eval_batches(10, 4) for i in b["i"]]
    assert len(held) == len(set(held)) == 10
    trained = set(source.read(0, 200)["i"].tolist())  # five epochs
    assert trained.isdisjoint(held) and trained | set(held) == set(range(50))
    # the same items, in the same order, at any batch size, with the same draws
    again = concat_batches(list(source.eval_batches(10, 3)))
    assert again["i"].tolist() == held and same(again, concat_batches(list(source.eval_batches(10, 10))))
    assert [batch_size(b) for b in source.eval_batches(10, 4)] == [4, 4, 2]


def test_a_held_out_dataset_is_read_in_index_order_and_at_most_whole() -> None:
    source = DatasetSource(Noisy(20), held_out=Noisy(6), seed=0)
    assert len(source) == 20  # nothing of the training Dataset is held out
    assert [b["i"].tolist() for b in source.eval_batches(5, 2)] == [[0, 1], [2, 3], [4]]
    assert concat_batches(list(source.eval_batches(100, 4)))["i"].tolist() == list(range(6))


def test_loader_workers_read_the_same_batches() -> None:
    # forked worker processes seed their own global generators: the per-item seeds must win
    source = DatasetSource(Noisy(30), eval_samples=5, seed=3)
    inline = list(step_batches(source, DataConfig(), done=0, steps=4, effective=8, rank=0, world=1))
    ahead = list(step_batches(source, DataConfig(loader_workers=2), done=0, steps=4, effective=8, rank=0, world=1))
    assert all(same(a, b) for a, b in zip(inline, ahead, strict=True))
    assert same(concat_batches(inline), source.read(0, 32))


# -- through the loop: a workload over a Dataset ----------------------------------------------------


class Ratings(Dataset[dict[str, torch.Tensor]]):
    """A plain Dataset of (user, item, rating), as a user's code would have it."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.user = torch.randint(0, USERS, (n,), generator=g)
        self.item = torch.randint(0, ITEMS, (n,), generator=g)
        self.rating = torch.sin(self.user * 0.3) + torch.cos(self.item * 0.7)

    def __len__(self) -> int:
        return len(self.user)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"user": self.user[i], "item": self.item[i], "rating": self.rating[i]}


class Dot(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.users, self.items = nn.Embedding(USERS, dim), nn.Embedding(ITEMS, dim)
        self.out = nn.Linear(2 * dim, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        u, v = self.users(batch["user"]), self.items(batch["item"])
        return (u * v).sum(1) + self.out(torch.cat([u, v], 1)).squeeze(1)


class RatingsWorkload(Workload):
    """Nothing but a Dataset: default collate, eval.samples of it held out."""

    def build_model(self) -> nn.Module:
        return Dot(self.cfg.model.embedding_dim)

    def dataset(self) -> Ratings:
        return Ratings(1000)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(model(batch), batch["rating"])


class BadRows(RatingsWorkload):
    def collate(self, samples: list[Any]) -> Any:
        return {"rating": torch.zeros(len(samples) + 1)}


class NoData(RatingsWorkload):
    def dataset(self) -> None:
        return None


class ThreeWay(RatingsWorkload):
    def dataset(self) -> Any:
        return Ratings(10), Ratings(10), Ratings(10)


# 1000 items, 256 held out: 744 train, so 8 steps of 64 cross into a second epoch
CFG = ["device=cpu", "threads=1", "model.embedding_dim=8", "eval.samples=256", "warmup_steps=1", "batch.micro=64"]


def _cfg(*sets: str, workload: str = "RatingsWorkload") -> Any:
    return load_run_config(None, [*CFG, f"workload={HERE}:{workload}", *sets])


def test_resume_through_a_dataset_workload_continues_exactly(tmp_path: Path) -> None:
    straight, resumed = tmp_path / "straight.ckpt", tmp_path / "resumed.ckpt"
    whole = train(_cfg("steps=16", f"checkpoint.path={straight}"))
    train(_cfg("steps=8", f"checkpoint.path={resumed}"))
    shutil.copy(resumed, tmp_path / "half.ckpt")
    result = train(_cfg("steps=16", f"checkpoint.path={resumed}", "checkpoint.resume=true"))
    assert result.steps == 16 and result.samples == 16 * 64
    assert_same_weights(final_weights(straight), final_weights(resumed), atol=1e-6)
    assert result.metrics["loss"] == pytest.approx(whole.metrics["loss"], rel=1e-6)
    with pytest.raises(AssertionError):  # the check can fail: half-way is not the end
        assert_same_weights(final_weights(straight), final_weights(tmp_path / "half.ckpt"), atol=1e-6)


def test_micro_times_accum_through_a_dataset_workload_is_one_big_batch(tmp_path: Path) -> None:
    split = train(_cfg("steps=6", "batch.micro=8", "batch.accum=4", f"checkpoint.path={tmp_path / 'a.ckpt'}"))
    whole = train(_cfg("steps=6", "batch.micro=32", "batch.accum=1", f"checkpoint.path={tmp_path / 'b.ckpt'}"))
    alone = train(_cfg("steps=6", "batch.micro=8", "batch.accum=1", f"checkpoint.path={tmp_path / 'c.ckpt'}"))
    assert split.samples == whole.samples == 6 * 32
    assert_same_weights(final_weights(tmp_path / "a.ckpt"), final_weights(tmp_path / "b.ckpt"), atol=1e-5)
    with pytest.raises(AssertionError):  # ...and a smaller batch without accumulation trains otherwise
        assert_same_weights(final_weights(tmp_path / "c.ckpt"), final_weights(tmp_path / "b.ckpt"), atol=1e-5)
    assert alone.samples == 6 * 8


@pytest.mark.parametrize("workload", [f"{HERE}:RatingsWorkload", "tests.unit.plugin_workload.unusual:BasketSpend"])
def test_a_step_over_dataset_batches_has_the_same_gradient_at_any_micro_batch(workload: str) -> None:
    # the baskets' batches hold a Ragged: its split into micro-batches must keep each sample whole
    built = build_workload(load_run_config(None, [*CFG, f"workload={workload}"]))
    batch = built.data_source().read(5, 32)
    torch.manual_seed(0)
    model = built.build_model()

    def grads(micro: int, rows: int = 32) -> list[torch.Tensor]:
        fresh = copy.deepcopy(model)
        part = slice_batch(batch, 0, rows)
        forward_backward(fresh, built, part, micro, nullcontext, torch.amp.GradScaler("cpu", enabled=False))
        return [p.grad for p in fresh.parameters() if p.grad is not None]

    whole, split = grads(32), grads(8)
    assert len(whole) == len(split) > 0
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    first_quarter = grads(8, rows=8)  # the check can fail: a quarter of the step has another gradient
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(whole, first_quarter, strict=True))


def test_the_estimator_prices_a_dataset_workload(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [*CFG, f"workload={HERE}:RatingsWorkload"]
    assert main(["estimate", "--format", "json", *[a for s in sets for a in ("--set", s)]]) == 0
    assert json.loads(capsys.readouterr().out)["estimated_peak_bytes"] > 0
    # the default example batch is shaped like the Dataset's batches
    built = build_workload(load_run_config(None, sets))
    example, real = built.example_batch(5), built.data_source().read(0, 5)
    assert {k: (v.shape, v.dtype) for k, v in example.items()} == {k: (v.shape, v.dtype) for k, v in real.items()}


# -- what the user can get wrong ------------------------------------------------------------------


class Shapes(Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"id": i, "tags": {"x": torch.zeros(2 + i % 2)}}


class Labels(Dataset[tuple[torch.Tensor, Any]]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        return torch.zeros(2), None


class Stream(IterableDataset[int]):
    def __iter__(self) -> Any:
        return iter(range(10))


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: DatasetSource(Ratings(0), eval_samples=1), "the training Dataset (Ratings) has no items (len 0)"),
        (lambda: DatasetSource(Ratings(5), Ratings(0)), "the held-out Dataset (Ratings) has no items"),
        (lambda: DatasetSource(Ratings(5), eval_samples=5), "eval.samples=5 holds out every one of the Dataset's 5"),
        (lambda: DatasetSource(Ratings(5)), "say how many of the Dataset's items to hold out"),
        (lambda: DatasetSource(Stream(), eval_samples=1), "is an IterableDataset, not a map-style Dataset"),  # type: ignore[arg-type]
        (lambda: DatasetSource(Shapes(), Shapes()).read(0, 4), "item['tags']['x'] has different shapes: [3] in item 5, [2] in item 2"),  # noqa: E501
        (lambda: DatasetSource(Labels(), Labels()).read(0, 2), "item[1] is a NoneType in item "),
        (lambda: DatasetSource(Ratings(5), Ratings(2), collate=lambda s: s[0]).read(0, 3), "returned no batch"),
        (lambda: DatasetSource(Ratings(5), Ratings(2), collate=lambda s: default_collate(s[:1])).read(0, 3),
         "<lambda> joined 3 training items"),
    ],
)  # fmt: skip
def test_bad_datasets_are_data_errors_that_say_what_to_fix(make: Any, says: str) -> None:
    with pytest.raises(DataError) as caught:
        make()
    assert says in str(caught.value), str(caught.value)


def test_items_collate_cannot_join_name_the_field_and_the_fix() -> None:
    with pytest.raises(DataError) as caught:
        DatasetSource(Shapes(), Shapes()).read(0, 4)
    said = str(caught.value)
    assert "default_collate cannot join them" in said and "override the workload's collate(samples)" in said
    assert "Ragged.from_list" in said and "training items [" in said
    # a workload's own collate that returns the wrong rows is named as such
    with pytest.raises(DataError, match=r"BadRows\.collate joined 4 training items .* a batch of 5 samples"):
        build_workload(_cfg(workload="BadRows")).data_source().read(0, 4)


def test_a_held_out_share_that_leaves_nothing_stops_the_cli_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [*CFG, f"workload={HERE}:RatingsWorkload", "eval.samples=1000", "steps=2"]
    assert main(["train", *[a for s in sets for a in ("--set", s)]]) == 2
    said = capsys.readouterr().err
    assert "RatingsWorkload.dataset(): eval.samples=1000 holds out every one of the Dataset's 1000 items" in said
    assert "set eval.samples below 1000" in said and "(train, held_out)" in said and "Traceback" not in said


def test_a_workload_without_data_or_with_a_wrong_tuple_says_which_hooks() -> None:
    with pytest.raises(NotImplementedError, match=r"NoData must define dataset\(\) .* or data_source\(\)"):
        build_workload(_cfg(workload="NoData")).data_source()
    with pytest.raises(TypeError, match=r"ThreeWay.dataset\(\) returned a tuple of 3"):
        build_workload(_cfg(workload="ThreeWay")).data_source()


def test_a_ragged_value_per_sample_travels_through_reads_and_splits() -> None:
    from tests.unit.plugin_workload.unusual import BasketSpend

    source = build_workload(load_run_config(None, [*CFG, "workload=tests.unit.plugin_workload.unusual:BasketSpend"]))
    assert isinstance(source, BasketSpend)
    data = source.data_source()
    whole = data.read(10, 12)
    parts = concat_batches([data.read(10, 5), data.read(15, 7)])
    assert isinstance(whole["basket"], Ragged) and len(whole["basket"]) == 12
    assert whole["basket"].lengths == parts["basket"].lengths and len(set(whole["basket"].lengths)) > 1
    assert torch.equal(whole["basket"].values, parts["basket"].values)
    assert torch.equal(whole["user"]["id"], parts["user"]["id"])
