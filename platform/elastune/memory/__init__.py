"""The estimator: what a run will use, predicted before it runs. How trials share a device is EDO
(elastune.edo), above this package; what a run uses is measured by training/probe.py, the one seam
to the hardware, below both.

One module per concern, each importing only those below it:

- `estimate.py`: the API (`estimate`, `Estimate`, `PARTS`): a config in, a predicted peak out.
- `trace.py`: the fake-tensor trace of the loop's own step, and the distinct rows it is told.
- `overhead.py`: what a device holds beyond the traced tensors (CPU, virtual device, CUDA).
- `data_stream.py`: what a file reader holds in host memory beyond them (the Criteo TSV reader's
  pyarrow set-up, read-ahead and blocks: `reader_bytes`).
- `live_bytes.py`: the dispatch mode that keeps the traced peak and replays it for CUDA.
- `cuda_kernels.py`: what CUDA kernels allocate that a CPU trace cannot see.
- `cuda_allocator.py`: a model of PyTorch's CUDA caching allocator.

The API is imported from its module, `from elastune.memory.estimate import estimate`: importing
`elastune.memory` alone pulls in nothing (torch's fake-tensor machinery is heavy to import).
"""
