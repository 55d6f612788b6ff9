"""`elastune.Workload`: what the training loop, the estimator and the tuner need from a model.

Subclass it and override hooks, the way a LightningModule is written: `build_model`, `loss` and the
data (a map-style torch Dataset from `dataset()`, or a `data_source()`) are required; every other
hook has a default that suits most models. The loop calls the hooks and nothing else, so mypy checks
an override's signature against these.

A batch is whatever the data source produces: any mapping, sequence or dataclass of tensors with a
leading batch dimension (elastune.data.batch); elastune never looks inside it.

Which workload a run trains is resolved in registry.py (built-ins, plugins, import paths); a
factory may be the subclass itself (`workload: my_pkg.models:MyWorkload`), called as
`MyWorkload(cfg, options)`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import BaseModel
from torch import nn
from torch.utils.data import Dataset, default_collate

from elastune.compat import outside_trace
from elastune.config import RunConfig
from elastune.data.batch import Batch, batch_device, batch_size, example_like
from elastune.data.dataset import DatasetSource
from elastune.data.source import DataSource
from elastune.embeddings.tables import TableSpec
from elastune.workloads.quality import EVAL_LOSS, QualityMetric

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["Workload"]


class Workload:
    """A model family elastune can estimate, train and tune (docs/workloads.md).

    Required: `build_model`, `loss`, and `dataset` (with `collate`) or `data_source`. Declared with
    defaults:

    * `options_model`: the pydantic model `workload_options` is validated by (None: no options).
    * `quality`: the eval metric the sweep's quality tolerance applies to, with its direction
      (default: the eval loss, lower is better).
    * `units` (+ `count_units`): a throughput of the workload's own beside samples/s (an LM's real
      tokens). `context`: tokens per row of a sequence workload (a sweep's token budget counts in it).
    """

    options_model: ClassVar[type[BaseModel] | None] = None
    quality: QualityMetric = EVAL_LOSS
    eval_loss_name: str = "loss"  # what the eval loss is called among the metrics (DLRM's: logloss)
    units: str | None = None
    context: int | None = None

    def __init__(self, cfg: RunConfig, options: Any = None) -> None:
        self.cfg = cfg
        self.options = options

    # -- required ---------------------------------------------------------------------------

    def build_model(self) -> nn.Module:
        """The model, on the host (the loop moves it to the device)."""
        raise NotImplementedError(f"{type(self).__name__} must define build_model()")

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Mean loss of `batch` (a mean, so micro-batch losses average into the step's loss)."""
        raise NotImplementedError(f"{type(self).__name__} must define loss(model, batch)")

    def dataset(self) -> Dataset[Any] | tuple[Dataset[Any], Dataset[Any]] | None:
        """A map-style torch Dataset to train on, or (train, held-out). Without a held-out Dataset,
        `eval.samples` of its items are held out (chosen by `data.seed`). Read through
        elastune.data.DatasetSource: shuffled per epoch, position-pure (its docstring says what a
        Dataset must guarantee). Default: None (the workload defines `data_source()`)."""
        return None

    def collate(self, samples: list[Any]) -> Batch:
        """The batch of `dataset()` items `samples` (default: torch's default_collate, which stacks
        equal shapes; a value whose length varies per sample can be an elastune.data.Ragged)."""
        return default_collate(samples)

    def data_source(self) -> DataSource:
        """Where training and held-out samples come from: a pure function of position
        (elastune.data.DataSource). Default: `dataset()` read through a DatasetSource."""
        found = self.dataset()
        name = type(self).__name__
        if found is None:
            raise NotImplementedError(
                f"{name} must define dataset() (a map-style torch Dataset, or (train, held_out)) or data_source()"
            )
        if isinstance(found, tuple) and len(found) != 2:
            raise TypeError(f"{name}.dataset() returned a tuple of {len(found)}; return a Dataset or (train, held_out)")
        train, held_out = found if isinstance(found, tuple) else (found, None)
        own = type(self).collate is not Workload.collate  # torch's own: its failures are diagnosed by field
        return DatasetSource(
            train,
            held_out,
            eval_samples=self.cfg.eval.samples,
            collate=self.collate if own else default_collate,
            seed=self.cfg.data.seed,
            origin=f"{name}.dataset()",
        )

    # -- evaluation -------------------------------------------------------------------------

    def metrics(self) -> dict[str, Metric]:
        """Fresh torchmetrics metrics, by name, that `eval_step` updates (default: none; the eval
        loss is always reported, as `eval_loss_name`)."""
        return {}

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        """One held-out batch, under no_grad: update `metrics` and return the batch's mean loss.
        The estimator runs it on fake tensors with metrics that record nothing."""
        return self.loss(model, batch)

    def evaluate(self, model: nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        """Every eval metric over the held-out batches (on the run's device, under no_grad and the
        run's autocast): the eval loss (each batch's mean weighted by `loss_weight`) and each of
        `metrics()`. Must hold the `quality` metric."""
        metrics = self.metrics()
        total: torch.Tensor | float = 0.0
        weight: torch.Tensor | float = 0.0
        for index, batch in enumerate(batches):
            if index == 0:
                for metric in metrics.values():
                    metric.to(batch_device(batch))  # a Metric is a Module: its state lives where the batches do
            share = self.loss_weight(batch)
            total = total + self.eval_step(model, batch, metrics).detach().float() * share
            weight = weight + share
        mean = float(total) / float(weight) if float(weight) else math.nan  # one sync, at the end
        return {self.eval_loss_name: mean, **{name: float(m.compute()) for name, m in metrics.items()}}

    # -- the step ----------------------------------------------------------------------------

    def loss_weight(self, batch: Batch) -> torch.Tensor | float:
        """How many terms `loss(batch)` is the mean of (default: the samples). Gradient
        accumulation weights each micro-batch's loss by it, so micro x accum stays exact; an LM
        averages over real tokens, not sequences."""
        return batch_size(batch)

    def arrange_step(self, batch: Batch) -> Batch:
        """A step's samples in the order its micro-batches take them (an LM sorts by length so each
        micro-batch pads less). Default: as read."""
        return batch

    def count_units(self, batch: Batch) -> int:
        """The batch's `units` (an LM's real tokens); read only when `units` is set."""
        return 0

    # -- what the estimator and the strategies see -------------------------------------------

    @property
    def tables(self) -> list[TableSpec]:
        """The model's embedding tables, by name (what `embedding.overrides` match and `elastune
        estimate` breaks down). Default: none declared."""
        return []

    @property
    def table_sizes(self) -> tuple[int, ...]:
        """Rows of the table each looked-up feature reads (a table several features share counts
        once per feature): the layout of `table_ids`."""
        return tuple(t.rows for t in self.tables for _ in t.looked_up_by)

    def table_ids(self, batch: Batch) -> torch.Tensor | None:
        """The ids `batch` looks up, [B, tables, ids per bag] (row ids of table f at [:, f]): the
        estimator counts the distinct rows of a real batch, so the strategies that touch only those
        are priced at their size. None (default): priced at one row per lookup, the worst case."""
        return None

    def example_batch(self, n: int) -> Batch:
        """A batch of `n` samples with the source's structure, shapes and dtypes, made with torch's
        factory functions: the estimator traces the model on it under fake tensors. Default: shaped
        like the first training sample (a variable-length value at that sample's length)."""
        template = getattr(self, "_template", None)
        if template is None:
            with outside_trace():  # real data, read outside the estimator's fake tensors
                template = self._template = self.data_source().read(0, 1)
        return example_like(template, n)

    def example_batches(self, *, held_out: bool = False) -> Iterator[Batch] | None:
        """For a workload whose batches change shape from one to the next (an LM's dynamic padding:
        each micro-batch as long as its longest sequence): fake batches, made as `example_batch`
        makes them, each shaped as one of the run's own, in the order the run reads them: its
        training steps (`batch.micro` x `batch.accum` samples each, as `arrange_step` leaves them),
        or with `held_out` its evaluation batches. After the first few, a batch no larger than one
        before it may be left out. A CUDA estimate runs them: the caching allocator keeps the
        blocks of every shape it has served, so what it reserves depends on the sequence of shapes,
        not only on the largest. None (default): every batch is shaped as `example_batch`'s."""
        return None

    def example_eval_state(self, samples: int) -> list[torch.Tensor]:
        """What `evaluate` keeps across the held-out batches at its peak, for `samples` of them,
        made with torch's factory functions: the estimator holds these on fake tensors while it
        traces an eval batch, so an evaluation that gathers every row's outputs before scoring
        them (a retrieval metric ranking each user against the whole held-out catalogue) is priced,
        not only `eval_step`'s one batch. Default: nothing kept (`eval_step` updates metrics whose
        state is a few numbers)."""
        return []
