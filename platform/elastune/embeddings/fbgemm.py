"""`embedding.backend=fbgemm`: the tables in FBGEMM's fused table-batched embedding kernels.

FBGEMM (TorchRec's kernel library) looks up every table of every feature in one call
(`SplitTableBatchedEmbeddingBagsCodegen`, "TBE") and applies the row optimizer *inside the
backward*: no gradient of the table ever exists, and no optimizer of the training loop steps it.
`fbgemm-gpu-cpu` is its CPU build (`pip install 'elastune[fbgemm]'`); it must be the release built
for the installed torch (fbgemm-gpu-cpu 1.8.0 for torch 2.13), and it is imported lazily, so
elastune works without it and the config layer says how to install it when a run asks for it.

What the 1.8 CPU build offers, and so what this backend supports:
- strategies `full` (fp32 rows) and `half` with `embedding.dtype=fp16` (fp16 rows, stochastic
  rounding on write-back); its CPU kernels have no bf16 path, and the compressed and self-managed
  strategies are elastune's own;
- optimizers `sgd`, `adagrad` and `rowwise_adagrad` (FBGEMM's EXACT_SGD, EXACT_ADAGRAD and
  EXACT_ROWWISE_ADAGRAD: repeated rows are summed before the update, the math of
  embeddings/sparse_optim.py); its Adam has no CPU kernel;
- one micro-batch per step, fp32 or bf16 autocast: the update happens in each backward, so
  accumulation would update the rows once per micro-batch, and an fp16 loss scale would reach the
  rows unscaled (RunConfig refuses both). An OOM retry (which splits a step) likewise updates the
  rows of the failed micro-batches twice; on CPU the process is usually killed before that.

Bytes (the formula the estimator and tuner price it with): the rows in their dtype plus the
optimizer state the kernel keeps beside them, in fp32: `rows * (dim * elem + state_width * 4)`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.sparse_optim import RowUpdate, state_width

if TYPE_CHECKING:
    from elastune.config import RunConfig

__all__ = [
    "FBGEMM_OPTIMIZERS",
    "FBGEMM_STRATEGIES",
    "FbgemmEmbedding",
    "UpdatesInBackward",
    "fbgemm_import_error",
    "run_problems",
]

FBGEMM_STRATEGIES = ("full", "half")
FBGEMM_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")
_OPTIM_NAMES = {"sgd": "EXACT_SGD", "adagrad": "EXACT_ADAGRAD", "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD"}
_EPS = 1e-10  # RowUpdate's eps, so both backends compute the same update
_TBE = "fbgemm_gpu.split_table_batched_embeddings_ops_training"


@functools.cache
def fbgemm_import_error() -> str | None:
    """None if FBGEMM's training kernels import, else why not (for the config layer's message)."""
    try:
        importlib.import_module(_TBE)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "fbgemm_gpu":
            return "not installed"
        return f"does not load ({exc})"
    except Exception as exc:  # an ABI mismatch with torch surfaces as OSError or RuntimeError
        return f"does not load ({type(exc).__name__}: {exc}); install the release built for torch {torch.__version__}"
    return None


def run_problems(cfg: RunConfig) -> list[str]:
    """What in a run with embedding.backend=fbgemm the fused kernels cannot do (RunConfig reports them)."""
    problems = []
    if cfg.optimizer.sparse not in FBGEMM_OPTIMIZERS:
        problems.append(
            f"embedding.backend=fbgemm has no CPU kernel for optimizer.sparse={cfg.optimizer.sparse}; set "
            f"optimizer.sparse to {', '.join(FBGEMM_OPTIMIZERS)} or use embedding.backend=torch"
        )
    # The kernels update the rows inside each backward: an fp16 loss scale would reach them unscaled,
    # and accumulation would update them once per micro-batch instead of once per step.
    if cfg.precision == "fp16":
        problems.append(
            "precision=fp16 scales the loss, which embedding.backend=fbgemm's fused update would apply "
            "unscaled; use precision=fp32 or bf16, or embedding.backend=torch"
        )
    if cfg.batch.accum > 1:
        problems.append(
            f"batch.accum={cfg.batch.accum}: embedding.backend=fbgemm updates the rows in every backward, so "
            "accumulation would not be exact; set batch.accum=1 (and batch.micro to the effective batch) "
            "or use embedding.backend=torch"
        )
    if cfg.device.startswith("cuda"):
        problems.append(
            f"device={cfg.device!r}: embedding.backend=fbgemm (fbgemm-gpu-cpu) runs on the CPU; set device=cpu"
        )
    if cfg.model.embedding_dim % 4:
        problems.append(
            f"model.embedding_dim={cfg.model.embedding_dim}: embedding.backend=fbgemm needs a multiple of 4"
        )
    return problems


@runtime_checkable
class UpdatesInBackward(Protocol):
    """A strategy whose kernels apply the row optimizer inside backward (training/optim.py hands it
    the optimizer's settings and keeps its parameters away from every torch optimizer)."""

    def set_row_update(self, update: RowUpdate) -> None: ...

    def fused_parameters(self) -> list[nn.Parameter]: ...


def _fbgemm() -> tuple[Any, Any]:
    """(the training module, the configs module) of fbgemm_gpu, imported on first use."""
    error = fbgemm_import_error()
    if error is not None:
        raise ImportError(f"fbgemm_gpu {error}; pip install 'elastune[fbgemm]' or use embedding.backend=torch")
    return importlib.import_module(_TBE), importlib.import_module("fbgemm_gpu.split_embedding_configs")


class FbgemmEmbedding(nn.Module):
    """All tables in one FBGEMM TBE on the host, rows in fp32 or fp16, optimizer fused in backward."""

    def __init__(
        self,
        table_sizes: Sequence[int],
        dim: int,
        sparse_optimizer: str = "rowwise_adagrad",
        weights_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if sparse_optimizer not in FBGEMM_OPTIMIZERS:
            raise ValueError(
                f"fbgemm's CPU kernels apply {', '.join(FBGEMM_OPTIMIZERS)} in backward, not {sparse_optimizer!r}"
            )
        tbe, configs = _fbgemm()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.row_optimizer = sparse_optimizer
        precision = {torch.float32: configs.SparseType.FP32, torch.float16: configs.SparseType.FP16}[weights_dtype]
        self.tbe = tbe.SplitTableBatchedEmbeddingBagsCodegen(
            [(rows, dim, tbe.EmbeddingLocation.HOST, tbe.ComputeDevice.CPU) for rows in self.table_sizes],
            optimizer=getattr(configs.EmbOptimType, _OPTIM_NAMES[sparse_optimizer]),
            weights_precision=precision,
            stochastic_rounding=True,  # fp16 rows: small updates survive on average (see half.py)
            eps=_EPS,
            pooling_mode=tbe.PoolingMode.SUM,
            bounds_check_mode=tbe.BoundsCheckMode.FATAL,  # an id past its table raises, as in torch
        )
        # The kernel writes rows and state in backward; no torch optimizer, and no gradient, may touch
        # them. The placeholder alone requires grad: it is what makes autograd call the fused backward.
        for p in self.fused_parameters():
            if p is not self.tbe.placeholder_autograd_tensor:
                p.requires_grad_(False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # DLRM's init (as FullEmbedding): uniform in ±sqrt(1/rows) per table, drawn in fp32 (rounded to
        # fp16 for half); a seed gives the same rows (not the torch path's: the kernels draw differently).
        with torch.no_grad():
            for rows, weight in zip(self.table_sizes, self.tbe.split_embedding_weights(), strict=True):
                bound = rows**-0.5
                weight.copy_(torch.empty(rows, self.dim).uniform_(-bound, bound))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, features, pooling = ids.shape
        # TBE takes ids feature-major (all bags of feature 0, then of feature 1, ...) as rows of each
        # feature's own table (it adds the table offsets), and returns [batch, features * dim].
        indices = ids.transpose(0, 1).reshape(-1)
        offsets = torch.arange(0, indices.numel() + 1, pooling, dtype=torch.int64, device=ids.device)
        if is_fake(indices):  # the estimator: the kernels read values, so trace their shapes instead
            out = _FusedShapes.apply(self.tbe.placeholder_autograd_tensor, indices, batch, features, self.dim)
        else:
            out = self.tbe(indices, offsets)
        return out.view(batch, features, self.dim)

    def sparse_parameters(self) -> list[nn.Parameter]:
        return []  # updated inside backward, by the kernel

    def fused_parameters(self) -> list[nn.Parameter]:
        return list(self.tbe.parameters())

    def set_row_update(self, update: RowUpdate) -> None:
        if update.kind != self.row_optimizer:
            raise ValueError(
                f"the fbgemm tables were built for {self.row_optimizer!r} and cannot apply {update.kind!r}: "
                "build them with the optimizer.sparse the run uses"
            )
        if is_fake(self.tbe.weights_host):
            return  # the estimator: the learning rate costs no memory
        self.tbe.set_learning_rate(update.lr)

    def weights(self) -> torch.Tensor:
        """All rows as one fp32 [rows, dim] copy, in the order of the concatenated torch table."""
        return torch.cat([w.float() for w in self.tbe.split_embedding_weights()])


class _FusedShapes(torch.autograd.Function):
    """What the fused kernel allocates, on fake tensors: the pooled output in forward; in backward one
    fp32 gradient row per id and the buffers that sort the ids (the kernel's scratch), no table gradient."""

    @staticmethod
    def forward(
        ctx: Any, placeholder: torch.Tensor, indices: torch.Tensor, batch: int, features: int, dim: int
    ) -> torch.Tensor:
        ctx.ids, ctx.dim = indices.numel(), dim
        return torch.empty(batch, features * dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, ...]:
        rows = torch.empty(ctx.ids, ctx.dim)
        order = torch.empty(2 * ctx.ids, dtype=torch.int64)
        del rows, order
        return None, None, None, None, None


def _state_bytes(bytes_per_element: int) -> Any:
    def formula(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
        rows = sum(table_sizes)
        return rows * dim * bytes_per_element + rows * state_width(sparse_optimizer, dim) * 4

    return formula


register(
    StrategySpec(
        name="full",
        build=lambda sizes, dim, cfg, opt: FbgemmEmbedding(sizes, dim, opt, torch.float32),
        state_bytes=_state_bytes(4),
        backend="fbgemm",
    )
)
register(
    StrategySpec(
        name="half",
        build=lambda sizes, dim, cfg, opt: FbgemmEmbedding(sizes, dim, opt, torch.float16),
        state_bytes=_state_bytes(2),
        backend="fbgemm",
    )
)
