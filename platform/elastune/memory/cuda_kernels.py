"""What CUDA kernels allocate that a CPU trace of the same ops cannot see.

The trace runs on CPU fake tensors, whose kernels are the CPU's: on CUDA some ops take buffers of
their own. Each is read off ATen's CUDA source and checked against per-op allocator readings on an
H100: the embedding bag's `offset2bag` (one index per id; the CPU kernel keeps none) and its dense
backward's sort and segment-sum buffers; the staging buffer of a column sum over many rows (a
Linear's bias gradient); cuBLASLt's 1 MiB workspace. Nothing here is fitted. The cuBLAS workspaces
(32 MiB per thread on Hopper) and the CUDA context exist before the probe's baseline and are in
neither the measured nor the predicted figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["SCATTERS", "ZEROS", "KernelBuffers", "kernel_buffers"]

# Ops that make zeros, and the out-of-place forms of the in-place scatters that autograd formulas
# apply to fresh zeros (see `LiveBytes._replay_cuda`).
ZEROS = frozenset({"zeros.default", "zeros_like.default", "new_zeros.default"})
SCATTERS = frozenset(
    {"index_put.default", "index_add.default", "scatter_add.default", "select_scatter.default", "slice_scatter.default"}
)
# cuBLASLt's workspace (CUBLASLT_WORKSPACE_SIZE, 1 MiB by default): taken by the first matmul with
# a bias (addmm) of the run. elastune's warm-up step (a 8x4 by 4x1 Linear) does not reach it, so
# it is allocated after the probe's baseline. (cuBLAS's own workspaces, 32 MiB per thread on
# Hopper, are allocated by the warm-up, before the baseline.)
_CUBLASLT_WORKSPACE = 2**20


def kernel_buffers(func: Any, args: Any, kwargs: Any) -> KernelBuffers:
    """What a CUDA kernel allocates that the CPU trace of the same op does not, read off ATen's
    CUDA kernels (EmbeddingBag.cu, EmbeddingBackwardKernel.cu, as of torch 2.11)."""
    name = getattr(func, "__name__", "")
    if name == "addmm.default":
        return KernelBuffers(workspace=_CUBLASLT_WORKSPACE)
    if name == "sum.dim_IntList":
        return KernelBuffers(after=[_column_sum_staging(args[0], args[1])])
    if not name.startswith(("_embedding_bag", "embedding_dense_backward")):
        return KernelBuffers()
    a = {arg.name: arg.default_value for arg in func._schema.arguments if arg.has_default_value()}
    a.update(zip((arg.name for arg in func._schema.arguments), args, strict=False))
    a.update(kwargs or {})
    indices = a["indices"]
    n, width = indices.numel(), indices.element_size()
    if name.startswith(("_embedding_bag.", "_embedding_bag_forward_only.")):
        # (output, offset2bag, bag_size, max_indices): CUDA fills offset2bag, one index per id,
        # which the CPU kernel leaves empty, and keeps no max_indices outside mode "max" (2).
        return KernelBuffers(sizes={1: n * width} if a["mode"] == 2 else {1: n * width, 3: 0})
    dense_bag = name.startswith("_embedding_bag_dense_backward") or (
        name.startswith("_embedding_bag_backward") and not a["sparse"]
    )
    if n == 0 or not (dense_bag or name.startswith("embedding_dense_backward")):
        return KernelBuffers()  # the sparse backward is ordinary (traced) ops
    if dense_bag and a["mode"] == 2:
        return KernelBuffers()  # "max" scatters with atomics: no sort
    dim = a["grad"].shape[-1] if "grad" in a else a["grad_output"].shape[-1]
    segments = min(n, int(a["num_weights"]))
    partials = n // 10 + segments  # NROWS_PER_THREAD = 10 ids per partial segment
    return KernelBuffers(
        held=[n * width, n * width],  # the sorted ids and their original positions
        scratch=[n * width, 2 * n * width],  # the sort's arange and radix-sort scratch
        # after the gradient: segment starts, partial segments per segment and their offsets,
        # partial-segment starts, and the fp32 partial sums of every partial segment
        after=[n * width, segments * width, segments * width, partials * width, partials * dim * 4],
    )


# What ATen's reduction launcher (Reduce.cuh, setReduceConfig) assumes of the GPU: an H100's 132
# multiprocessors of 2048 threads. They matter only for sums over more than ~1000 columns.
_CUDA_SMS, _CUDA_THREADS_PER_SM = 132, 2048


def _column_sum_staging(t: Any, dims: Any) -> int:
    """Bytes of the global staging buffer ATen's CUDA reduction takes to sum a contiguous [N, C]
    tensor over its rows (a Linear's bias gradient): when each output has many rows, the rows are
    split across CTAs whose partial sums (fp32) meet in a buffer of C x CTAs x block width."""
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or list(dims or []) not in ([0], [-2]) or t.stride(1) != 1:
        return 0
    rows, cols = t.shape
    vec = 4
    while cols % vec:
        vec //= 2
    max_threads = 512 // vec
    dim0, dim1 = cols // vec, rows

    def pow2(n: int) -> int:
        return max_threads if n >= max_threads else 1 << (max(1, n).bit_length() - 1)

    width = min(pow2(dim0), 32)  # block.x: columns (vec at a time)
    height = min(pow2(dim1), max_threads // width)  # block.y: rows, when they are many
    width = min(pow2(dim0), max_threads // height)
    if rows < height * 16 and rows < 256:
        return 0  # block.y takes more columns instead: no cross-CTA reduction
    values = -(-rows // height)  # rows per thread
    grid = -(-(cols // vec) // width)  # CTAs across the columns
    target = _CUDA_SMS * (_CUDA_THREADS_PER_SM // (width * height))
    if values < 256 or grid > target:
        return 0
    ctas = max(min(-(-target // grid), -(-values // 16)), -(-values // 256))  # CTAs per column
    return 4 * cols * ctas * width * vec if ctas > 1 else 0


@dataclass
class KernelBuffers:
    held: list[int] = field(default_factory=list)  # allocated before the op's outputs, freed after
    scratch: list[int] = field(default_factory=list)  # allocated and freed before the outputs
    after: list[int] = field(default_factory=list)  # allocated after the outputs, freed at the end
    sizes: dict[int, int] = field(default_factory=dict)  # output leaf index -> its bytes on CUDA
    workspace: int = 0  # a library workspace this op allocates once per process
