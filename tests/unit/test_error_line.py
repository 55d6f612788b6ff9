"""A failed trial's one line says who ended it: the trial's own device running out is never told as
the host's memory monitor, whose exception shares torch's class name (OutOfMemoryError)."""

from __future__ import annotations

from elastune.tuning.progress import error_line

# the shape of what Tune writes for a trial that ran out of CUDA memory outside the loop's retry (Ray
# wraps the trial's exception in a RayTaskError named after it); a dlrm_quick sweep on an H100 told
# five such trials as "killed by Ray's memory monitor"
CUDA_OOM = """Traceback (most recent call last):
ray.exceptions.RayTaskError(OutOfMemoryError): ray::_Inner.train() (pid=4242, ip=127.0.0.1)
  File "elastune/training/loop.py", line 191, in train_loop
    opts.step(scaler)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 166.00 MiB. GPU 0 has a total capacity of 79.19 GiB"""

# where the loop gave up halving: elastune's own error, raised from torch's
HALVED_OUT = """torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.

The above exception was the direct cause of the following exception:

elastune.errors.OutOfMemory: out of memory at batch.micro=1, which cannot be halved further: CUDA out of memory."""

RAY_MONITOR = """ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
Memory on the node (IP: 127.0.0.1, ID: 5b1c) where the task was running was 22.61GB / 23.47GB (0.96)"""


def test_a_cuda_out_of_memory_is_told_in_torchs_words_not_as_rays_memory_monitor() -> None:
    said = error_line(CUDA_OOM)
    assert said == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 166.00 MiB. "
        "GPU 0 has a total capacity of 79.19 GiB"
    )
    assert "memory monitor" not in said


def test_elastunes_own_out_of_memory_line_wins_over_the_torch_error_it_wraps() -> None:
    assert error_line(HALVED_OUT).startswith("elastune.errors.OutOfMemory: out of memory at batch.micro=1,")


def test_the_hosts_memory_monitor_is_still_named() -> None:
    assert error_line(RAY_MONITOR) == (
        "killed by Ray's memory monitor: its node ran low on host memory (OutOfMemoryError)"
    )


def test_a_long_device_line_is_cut_to_500_characters() -> None:
    assert len(error_line("torch.OutOfMemoryError: CUDA out of memory. " + "x" * 900)) == 500


def test_an_out_of_memory_in_the_update_on_the_virtual_device_is_told_as_elastunes() -> None:
    """No CUDA in the text (EDO's virtual device raises its own): elastune's line alone says it."""
    text = (
        "torch.OutOfMemoryError: EDO: trial 't1' step 3 peaked at 9 bytes, over its grant of 8 on virtual:0\n"
        "elastune.errors.OutOfMemory: out of memory in the optimizer update of step 4 (batch.micro=64): lower it"
    )
    assert error_line(text).startswith("elastune.errors.OutOfMemory: out of memory in the optimizer update")
