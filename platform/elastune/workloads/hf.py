"""`workload: hf`: a Hugging Face `transformers` model, built from a config or read from a local folder.

```yaml
workload: hf
workload_options:
  task: causal_lm                  # or sequence_classification (num_labels: 2)
  model_type: gpt2                 # any transformers model type with a model for the task
  config: {n_layer: 2, n_embd: 64, n_head: 2}   # the model config's own keys
  # model_path: ./my-model         # instead: a folder save_pretrained wrote (config.json + weights)
  vocab: 4096                      # ids of the synthetic sequences, or the text tokenizer's target
  context: 128
```

Offline, always: a model comes from `AutoConfig.for_model(model_type, **config)` and
`AutoModelFor<Task>.from_config`, or `from_pretrained(model_path, local_files_only=True)`; nothing is
downloaded (HF_HUB_OFFLINE=1 unless set otherwise), no `trust_remote_code`, so only the model code
transformers ships runs. A model path is a folder the run reads, so `workload_options` stay closed
to the web UI's clients (untrusted.py).

The embedding strategies: the model's word embeddings (`get_input_embeddings()`, the vocabulary
table) become a table of the run's strategy through `swap_embeddings`, the other `nn.Embedding`s
(positions, token types: a few rows, every one read each step) stay dense. Tied input and output
embeddings (GPT-2's) are untied first: the output projection keeps its own copy of the matrix,
since an int8 or hashed table stores no matrix a matmul can take (a vocab x width dense parameter
more, which the estimator traces). A folder's pretrained word rows are copied into a `full` table;
the other strategies start the table from their own initialisation.

Data (`data.source`), every sequence `context` ids right-padded with 0 (data/sequences.py):
- `synthetic` (default): for causal_lm, SyntheticText's token stream (a learnable next-token rule);
  for sequence_classification, sequences whose label is the class most of their tokens fall in;
- `text` (causal_lm): your documents, tokenized by a byte-level BPE from the `tokenizers` library
  trained on them to `vocab` ids (data/text.py, as `workload: lm` reads them); the word table has
  the tokenizer's real size.

Quality: causal_lm, eval perplexity over the held-out real next-token targets (lower is better);
sequence_classification, eval accuracy (torchmetrics, higher is better). Throughput counts real
tokens too. `activation_checkpointing: every_block | every_n` (`checkpoint_every`) turns on the
model's own activation checkpointing. The estimator traces the model as built, on fake tensors
(sdpa attention by default, or eager: both run without reading a value).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field, ValidationInfo, field_validator, model_validator
from torch import nn
from torch.nn import functional as F

from elastune.compat import is_fake, outside_trace
from elastune.config import ModelConfig, RunConfig
from elastune.data.sequences import IGNORE, NextTokenDicts, SyntheticClassification, TokenDict
from elastune.data.source import DataSource
from elastune.data.text import DEFAULT_VOCAB, EOS, PAD, SyntheticText, TextSource, text_tokenizer
from elastune.embeddings.full import FullEmbedding
from elastune.embeddings.swap import SwappedEmbedding, swap_embeddings
from elastune.embeddings.tables import TableSpec
from elastune.workloads.base import Workload
from elastune.workloads.options import WorkloadOptions
from elastune.workloads.quality import QualityMetric

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["HFOptions", "HFWorkload"]

_WORD_SHAPES: dict[str, tuple[int, int]] = {}  # this process's word tables, by model class and config

Task = Literal["causal_lm", "sequence_classification"]

# Keys of a model config that elastune sets itself, and where to say it instead.
RESERVED = {
    "vocab_size": "workload_options.vocab (the data's ids decide it)",
    "num_labels": "workload_options.num_labels",
    "id2label": "workload_options.num_labels",
    "label2id": "workload_options.num_labels",
    "pad_token_id": "nothing: the sequences are padded with id 0",
    "tie_word_embeddings": "nothing: elastune unties them so every strategy applies",
    "dtype": "precision (the run's autocast; weights stay fp32)",
    "torch_dtype": "precision (the run's autocast; weights stay fp32)",
    "attn_implementation": "workload_options.attn_implementation",
    "trust_remote_code": "nothing: only the model code transformers ships runs",
    "auto_map": "nothing: only the model code transformers ships runs",
}


def transformers_module() -> Any:
    """transformers, imported offline: HF_HUB_OFFLINE=1 before its first import (unless set), so
    nothing reaches the hub whatever a model class tries; loading also passes local_files_only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise ValueError("workload hf needs transformers: pip install 'elastune[hf]'") from None
    return transformers


def _closest(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=3)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


class HFOptions(WorkloadOptions):
    """`workload_options` of `workload: hf`."""

    task: Task = Field("causal_lm", description="causal_lm (next-token loss) or sequence_classification.")
    model_type: str = Field(
        "gpt2",
        max_length=100,
        description="A transformers model type (AutoConfig.for_model) with a model for the task.",
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="The model config's own keys (e.g. gpt2: n_layer, n_embd, n_head)."
    )
    model_path: Path | None = Field(
        None, description="A local folder save_pretrained wrote: its config and weights, instead of model_type/config."
    )
    vocab: int = Field(
        DEFAULT_VOCAB,
        ge=16,
        le=2_000_000,
        description="Ids of the synthetic sequences, or the target of data.source=text's tokenizer; the word "
        "table's rows (a model_path model keeps its own, which must be at least this).",
    )
    context: int = Field(128, ge=8, le=32768, description="Tokens per sequence (rows are padded to it).")
    mean_length: float = Field(40.0, gt=2, le=32768, description="Synthetic sequences: mean length (log-normal).")
    num_labels: int = Field(2, ge=2, le=1000, description="sequence_classification: classes.")
    attn_implementation: Literal["sdpa", "eager"] = Field("sdpa", description="The model's attention kernels.")
    activation_checkpointing: Literal["none", "every_block", "every_n"] = Field(
        "none",
        description="The model's own activation checkpointing: its blocks' activations recomputed in the backward, "
        "every block or every checkpoint_every-th; less memory, more compute.",
    )
    checkpoint_every: int = Field(
        2, ge=1, le=64, description="activation_checkpointing=every_n: checkpoint one block in this many."
    )

    @field_validator("model_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        known = transformers_module().CONFIG_MAPPING
        if value not in known:
            raise ValueError(f"{value!r} is not a model type of this transformers{_closest(value, known.keys())}")
        return value

    @field_validator("config")
    @classmethod
    def _config_keys(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        model_type = info.data.get("model_type")
        if model_type is None:  # refused above
            return value
        default = transformers_module().CONFIG_MAPPING[model_type]()
        keys = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
        for key in value:
            if key in RESERVED:
                raise ValueError(f"{key!r} is elastune's to set; use {RESERVED[key]}")
            if key.startswith("_") or key not in keys:
                raise ValueError(f"{key!r} is not a key of a {model_type} config{_closest(key, keys)}")
        return value

    @field_validator("model_path")
    @classmethod
    def _a_model_folder(cls, value: Path | None) -> Path | None:
        if value is not None and not (value / "config.json").is_file():
            raise ValueError(
                f"{str(value)!r} is not a folder holding config.json; give a folder model.save_pretrained() wrote"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> HFOptions:
        if self.model_path is not None and ({"model_type", "config"} & self.model_fields_set):
            raise ValueError("model_path reads the model's config from its folder: drop model_type and config")
        if self.task == "causal_lm" and "num_labels" in self.model_fields_set:
            raise ValueError("num_labels is read by task sequence_classification only: drop it or set the task")
        transformers = transformers_module()
        mapping, name = {
            "causal_lm": (transformers.MODEL_FOR_CAUSAL_LM_MAPPING, "AutoModelForCausalLM"),
            "sequence_classification": (
                transformers.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
                "AutoModelForSequenceClassification",
            ),
        }[self.task]
        if self.model_path is None and transformers.CONFIG_MAPPING[self.model_type] not in mapping:
            raise ValueError(f"model type {self.model_type!r} has no {name} model; choose another model_type or task")
        return self


class HFWorkload(Workload):
    """A transformers model for one task (see the module docstring)."""

    options_model = HFOptions
    options: HFOptions
    units = "tokens"  # throughput in real tokens/s beside sequences/s

    def __init__(self, cfg: RunConfig, options: HFOptions) -> None:
        super().__init__(cfg, options)
        self._refuse_unread(cfg, options)
        self.causal = options.task == "causal_lm"
        self.quality = QualityMetric("perplexity", "min") if self.causal else QualityMetric("accuracy", "max")
        self.context = options.context  # tokens per row: a sweep's token budget counts in it
        self.hf_config = self._hf_config()
        model_class = self._model_class()
        if options.activation_checkpointing != "none" and not model_class.supports_gradient_checkpointing:
            raise ValueError(
                f"workload_options.activation_checkpointing={options.activation_checkpointing}: "
                f"{model_class.__name__} does not support activation checkpointing; set it to none"
            )
        rows, width = self._word_shape(model_class)
        if options.model_path is not None and rows < options.vocab:
            raise ValueError(
                f"workload_options.vocab={options.vocab} is more than the {rows} ids of the model in "
                f"{options.model_path}; set workload_options.vocab to at most {rows}"
            )
        positions = getattr(self.hf_config, "max_position_embeddings", None)
        if isinstance(positions, int) and positions < options.context:
            raise ValueError(
                f"workload_options.context={options.context} is longer than the model's {positions} positions; "
                f"lower the context or raise the config's max_position_embeddings"
            )
        self._tables = [TableSpec("words", rows, width)]

    @staticmethod
    def _refuse_unread(cfg: RunConfig, options: HFOptions) -> None:
        """Run-config fields this workload would otherwise ignore, refused by name."""
        if cfg.data.source not in ("synthetic", "text"):
            raise ValueError(
                f"data.source={cfg.data.source!r}: workload hf reads synthetic sequences or your documents "
                "(data.source=text, causal_lm); set data.source=synthetic or text"
            )
        if cfg.data.source == "text" and options.task != "causal_lm":
            raise ValueError(
                "data.source=text: workload hf trains on documents for task causal_lm only (labelled text is not "
                "read yet); set workload_options.task=causal_lm or data.source=synthetic"
            )
        default_width = ModelConfig.model_fields["embedding_dim"].default
        if cfg.model.embedding_dim != default_width:
            raise ValueError(
                f"model.embedding_dim={cfg.model.embedding_dim}: workload hf takes its width from the model's "
                "config (workload_options.config, e.g. n_embd or hidden_size); drop model.embedding_dim"
            )
        if cfg.embedding.overrides:
            raise ValueError(
                "embedding.overrides: workload hf swaps its one word table with embedding.strategy; drop the overrides"
            )

    def _hf_config(self) -> Any:
        o, transformers = self.options, transformers_module()
        if o.model_path is not None:
            config = transformers.AutoConfig.from_pretrained(
                o.model_path, local_files_only=True, trust_remote_code=False
            )
        else:
            vocab = o.vocab
            if self.cfg.data.source == "text":  # the tokenizer's real size (trained once, cached)
                vocab = text_tokenizer(self.cfg.data, o.vocab, self._eval_samples).get_vocab_size()
            ids = {"bos_token_id": EOS, "eos_token_id": EOS}  # within the vocabulary, whatever its size
            config = transformers.AutoConfig.for_model(o.model_type, **{**ids, **o.config, "vocab_size": vocab})
        if self.causal:
            # No pad id: the loss ignores padded targets by its labels, and a model that knows a pad id
            # but gets no attention mask checks every batch for it (a host sync per step on a GPU).
            config.pad_token_id = None
        else:
            config.pad_token_id = PAD  # the sequences' padding: a classifier reads the last token before it
            config.num_labels = o.num_labels
        return config

    def _word_shape(self, model_class: Any) -> tuple[int, int]:
        """(rows, width) of the model's word embeddings, read off its skeleton built on the meta
        device (no memory, milliseconds; once per config and process): exact for any architecture,
        and transformers' own checks of the config (a width its heads do not divide) are said here,
        before anything runs, instead of when the run builds the model."""
        key = f"{model_class.__name__}/{self.hf_config.to_json_string()}"
        if key not in _WORD_SHAPES:
            try:
                with outside_trace(), torch.device("meta"):  # meta tensors, even inside the estimator's trace
                    skeleton = self._auto().from_config(self.hf_config, **self._build_options)
            except Exception as exc:  # transformers raises what its model code raises, mostly ValueError
                where = "model_path's config" if self.options.model_path else "workload_options.config"
                raise ValueError(f"{where}: a {model_class.__name__} cannot be built from it: {exc}") from None
            words = skeleton.get_input_embeddings()
            _WORD_SHAPES[key] = (int(words.num_embeddings), int(words.embedding_dim))
        return _WORD_SHAPES[key]

    def _auto(self) -> Any:
        """The task's auto class."""
        transformers = transformers_module()
        return transformers.AutoModelForCausalLM if self.causal else transformers.AutoModelForSequenceClassification

    @property
    def _build_options(self) -> dict[str, Any]:
        return {"attn_implementation": self.options.attn_implementation, "trust_remote_code": False}

    def _model_class(self) -> Any:
        """The transformers class the task's auto class builds for this config."""
        transformers = transformers_module()
        if self.causal:
            mapping, auto = transformers.MODEL_FOR_CAUSAL_LM_MAPPING, "AutoModelForCausalLM"
        else:
            mapping, auto = transformers.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING, "AutoModelForSequenceClassification"
        if type(self.hf_config) not in mapping:  # a folder's model (a model_type is checked with the options)
            raise ValueError(
                f"workload_options.model_path={str(self.options.model_path)!r}: its model type "
                f"{self.hf_config.model_type!r} has no {auto} model; set workload_options.task to one it has"
            )
        return mapping[type(self.hf_config)]

    @property
    def _eval_samples(self) -> int:
        """Documents of data.path a text source holds out (none with data.eval_path)."""
        return 0 if self.cfg.data.eval_path else self.cfg.eval.samples

    @property
    def tables(self) -> list[TableSpec]:
        return self._tables

    # -- the model ---------------------------------------------------------------------------

    def build_model(self) -> nn.Module:
        o, auto, common = self.options, self._auto(), self._build_options
        # The estimator's trace builds on fake tensors, which cannot take a file's weights: the same
        # model from the folder's config has the same shapes, all the trace reads.
        pretrained_weights = o.model_path is not None and not is_fake(torch.empty(0))
        if pretrained_weights:
            # fp32 weights whatever the folder holds: precision is the run's autocast
            model = auto.from_pretrained(
                o.model_path, config=self.hf_config, local_files_only=True, dtype=torch.float32, **common
            )
        else:
            model = auto.from_config(self.hf_config, **common)
        _untie(model)
        words = model.get_input_embeddings()
        pretrained = words.weight.detach() if pretrained_weights else None
        holder = nn.Module()  # swap_embeddings swaps a model's children: give it the word table alone
        holder.words = words
        swap_embeddings(holder, self.cfg.embedding, self.cfg.optimizer.sparse)
        swapped = holder.words
        assert isinstance(swapped, SwappedEmbedding)
        if pretrained is not None and isinstance(swapped.table, FullEmbedding):
            with torch.no_grad():
                swapped.table.bag.weight.copy_(pretrained)  # one table: its rows are the vocabulary's
        model.set_input_embeddings(swapped)
        if o.activation_checkpointing != "none":
            # the blocks' activations are recomputed in the backward instead of kept
            every = o.checkpoint_every if o.activation_checkpointing == "every_n" else 1
            model.activation_checkpointing_enable({"use_reentrant": False}, every_n_layers=every)
        return model

    def data_source(self) -> DataSource:
        o, d = self.options, self.cfg.data
        mean = min(o.mean_length, o.context)
        if d.source == "text":
            text = TextSource(d, vocab=o.vocab, context=o.context, eval_samples=self._eval_samples)
            return NextTokenDicts(text)
        if self.causal:
            return NextTokenDicts(SyntheticText(o.vocab, o.context, mean, seed=d.seed))
        return SyntheticClassification(o.vocab, o.context, mean, o.num_labels, seed=d.seed)

    # -- the loss and the metrics ------------------------------------------------------------

    def _next_token(self, model: nn.Module, batch: TokenDict) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed next-token loss over real targets, count of real targets). No attention mask:
        right padding under a causal mask never changes a real token's output, and without one the
        attention takes its causal kernel and builds no [B, 1, T, T] mask. No KV cache either: a
        training step never reads it back."""
        logits = model(input_ids=batch["input_ids"][:, :-1], use_cache=False).logits
        targets = batch["labels"][:, 1:]
        # over [B*T, vocab] rows: a log-softmax over a dimension that is not the innermost copies the logits
        total = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        return total, (targets != IGNORE).sum()

    def _class_logits(self, model: nn.Module, batch: TokenDict) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()

    def loss(self, model: nn.Module, batch: TokenDict) -> torch.Tensor:
        if self.causal:
            total, count = self._next_token(model, batch)
            return total / count.clamp(min=1)
        return F.cross_entropy(self._class_logits(model, batch), batch["labels"])

    def loss_weight(self, batch: TokenDict) -> torch.Tensor | float:
        """causal_lm: the batch's real next-token targets, what its loss averages over (so micro x
        accum is exact); classification: its sequences."""
        if self.causal:
            return (batch["labels"][:, 1:] != IGNORE).sum()
        return len(batch["labels"])

    def count_units(self, batch: TokenDict) -> int:
        return int(batch["attention_mask"].sum())

    def metrics(self) -> dict[str, Metric]:
        if self.causal:
            return {}
        from torchmetrics.classification import MulticlassAccuracy

        return {"accuracy": MulticlassAccuracy(self.options.num_labels, average="micro", validate_args=False)}

    def eval_step(self, model: nn.Module, batch: TokenDict, metrics: Mapping[str, Metric]) -> torch.Tensor:
        if self.causal:
            return self.loss(model, batch)
        logits = self._class_logits(model, batch)
        metrics["accuracy"].update(logits.argmax(dim=-1), batch["labels"])
        return F.cross_entropy(logits, batch["labels"])

    def evaluate(self, model: nn.Module, batches: Iterable[TokenDict]) -> dict[str, float]:
        """The eval loss and accuracy (classification), or the loss, its perplexity exp(loss), the
        quality metric, and how many targets it is over (`tokens`) (causal_lm)."""
        if not self.causal:
            return super().evaluate(model, batches)
        targets = torch.zeros(())

        def counted(stream: Iterable[TokenDict]) -> Iterable[TokenDict]:
            nonlocal targets
            for batch in stream:
                targets = targets + torch.as_tensor(self.loss_weight(batch)).cpu()
                yield batch

        out = super().evaluate(model, counted(batches))
        return {**out, "perplexity": math.exp(min(out["loss"], 50.0)), "tokens": float(targets)}

    # -- what the estimator sees -------------------------------------------------------------

    def table_ids(self, batch: TokenDict) -> torch.Tensor:
        return batch["input_ids"][:, None, :]

    def example_batch(self, n: int) -> TokenDict:
        ids = torch.zeros(n, self.options.context, dtype=torch.int64)
        labels = ids if self.causal else torch.zeros(n, dtype=torch.int64)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _untie(model: nn.Module) -> None:
    """Give a tied output projection (GPT-2's lm_head) its own copy of the word matrix, and say so
    in the config so nothing ties it again: the word table is about to become a strategy's, which
    may store int8 codes or hashed rows, not a matrix the projection can multiply by."""
    output = model.get_output_embeddings()  # type: ignore[operator]
    words = model.get_input_embeddings()  # type: ignore[operator]
    if output is not None and output.weight is words.weight:
        output.weight = nn.Parameter(words.weight.detach().clone())
    model.config.tie_word_embeddings = False  # type: ignore[union-attr]
