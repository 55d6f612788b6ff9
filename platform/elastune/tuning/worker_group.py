"""A trial on several workers: a Ray Train (V2) worker group driven from the trial process.

`workers_per_trial: N > 1`: the trial process is only the driver of a Ray Train (V2) run: it fits a
`TorchTrainer` whose N workers each run `train` on 1/N of every step's samples, with gradients
averaged by torch DDP (gloo on CPUs, nccl on GPUs; the group's rendezvous store listens on rank
0's node address only, not on every interface as torch's own would: `_node_bound_torch_config`).
`cpus_per_trial` / `gpus_per_trial` are per worker; the driver itself asks Tune for no CPU (a
little memory only), so the workers' CPUs are free for the worker group. Reports carry the
group's figures: samples/s summed over the workers, measured peak the largest worker's (memory is
per device), the estimate per worker, and each worker's `world_size`. Only configs whose gradients
DDP all-reduces run on a group (the spec's validation refuses the others: tuning/spec.py).

Stopping a group's trial (ASHA, or its final report reaching ASHA's max_t) would hang the sweep:
Tune ends the trial actor while `fit()` is still running, the Train controller and its workers die
with it (they are owned by it), but the workers' placement group is not owned by anything that
died: Ray keeps it reserved for the life of the job, so every later trial's worker group waited
for those CPUs forever. Ray 2.60's own safety net (a detached PlacementGroupCleaner actor) asks the
Ray state API, which needs the dashboard and finds the cluster by address discovery: without a
dashboard, or with several Ray instances on one host, its thread dies and the placement group and
the cleaner actor both stay. So here the Tune driver owns the clean-up: each worker group reports
its placement group's id, and `WorkerGroupReaper` (a Tune callback in the sweep's driver) removes
it when Tune ends the trial, however it ends; the cleaner actor is not started. (A trial ended
before its first report, e.g. by the sweep's time limit, has told nobody its id: that group's
placement group stays until the Ray job ends.)
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from elastune.compat import torch_backend_base, trainer_without_callbacks
from elastune.config import RunConfig
from elastune.tuning.report import TrialReport, final_report, oom_report, progress_report

if TYPE_CHECKING:
    from elastune.training.loop import Progress
    from elastune.tuning.spec import SweepSpec

__all__ = ["DRIVER_MEMORY", "WorkerGroupReaper", "run_worker_group"]

DRIVER_MEMORY = 256 * 2**20  # what a worker group's driver asks Tune for instead of a CPU


def run_worker_group(cfg: RunConfig, spec: SweepSpec, limits: dict[str, Any]) -> None:
    """Fit a TorchTrainer of `workers_per_trial` workers from this (driver) trial process. Its
    workers report to Tune through Ray Train's TuneReportCallback (rank 0's report: the group's)."""
    from ray import train, tune
    from ray.tune.integration.ray_train import TuneReportCallback

    # A worker's report waits for the controller's next poll of the group (every 2 s by default);
    # at ~10 reports a trial that is 20 s of waiting. This process only drives the group.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
    # Ray Train's preemption watcher (an actor per run) only logs node drains; a drained node's
    # workers fail the trial either way. One process fewer per trial; set the variable to 1 to keep it.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    res = spec.resources
    per_worker = {"CPU": res.cpus_per_trial, **({"GPU": res.gpus_per_trial} if res.gpus_per_trial else {})}
    trainer = _trainer_class()(
        _train_worker,
        train_loop_config={"config": cfg.to_dict(), "limits": limits},
        torch_config=_node_bound_torch_config("nccl" if res.gpus_per_trial > 0 else "gloo"),
        scaling_config=train.ScalingConfig(
            num_workers=res.workers_per_trial, use_gpu=res.gpus_per_trial > 0, resources_per_worker=per_worker
        ),
        run_config=train.RunConfig(
            name="train",
            storage_path=tune.get_context().get_trial_dir(),
            callbacks=[TuneReportCallback()],  # type: ignore[list-item]  # a Train callback; ray's hint says Tune's
            # A failed worker fails the trial (Tune records it); restarting the group would only
            # repeat a deterministic failure such as an OOM.
            failure_config=train.FailureConfig(max_failures=0),
        ),
    )
    try:
        trainer.fit()
    except train.TrainingFailedError as exc:
        oom = _worker_oom(exc)
        if oom is None:
            raise
        tune.report(oom_report(oom).to_metrics())


def _train_worker(loop_config: dict[str, Any]) -> None:
    """One Ray Train worker: `train` on this rank's share of each step; reports the group's totals
    (all workers report at the same steps: `ray.train.report` is a barrier, so are the reductions)."""
    import ray
    import torch.distributed as dist
    from ray import train as ray_train
    from ray.train.torch import get_device

    from elastune.training.loop import train
    from elastune.training.precision import resolve_device

    cfg = RunConfig.model_validate(loop_config["config"])
    if resolve_device(cfg.device).type == "cuda":
        # Ray Train shows a node's workers all of their GPUs; each rank takes its own.
        cfg = RunConfig.model_validate({**cfg.to_dict(), "device": str(get_device())})
    limits = loop_config["limits"]
    ctx = ray_train.get_context()
    world = ctx.get_world_size()
    group = _TorchDDP(rank=ctx.get_world_rank(), world_size=world)
    pg = ray.util.get_current_placement_group()
    who = {"world_size": world, "placement_group": pg.id.hex() if pg is not None else None}

    def report(p: Progress) -> None:
        (rate,) = _group_reduce([p.samples_per_s or 0.0], dist.ReduceOp.SUM)
        report = progress_report(p, samples_per_s=rate, samples=p.samples * world)
        ray_train.report(report.model_copy(update=who).to_metrics())

    result = train(cfg, on_progress=report, progress_every=limits["report_every"], parallel=group)
    (rate,) = _group_reduce([result.samples_per_s], dist.ReduceOp.SUM)
    (peak,) = _group_reduce([float(result.peak_memory_bytes)], dist.ReduceOp.MAX)
    total = replace(result, samples_per_s=rate, peak_memory_bytes=int(peak), samples=result.samples * world)
    ray_train.report(final_report(total, limits).model_copy(update=who).to_metrics())


@dataclass(frozen=True)
class _TorchDDP:
    """training.loop.DataParallel with torch DDP over the process group Ray Train set up."""

    rank: int
    world_size: int

    def wrap(self, model: Any) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        # The module is on this rank's device already (one device per rank: no device_ids needed).
        return DistributedDataParallel(model)


def _group_reduce(values: list[float], op: Any) -> list[float]:
    import torch
    import torch.distributed as dist

    # nccl reduces CUDA tensors only; gloo CPU ones. float64: byte counts stay exact.
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return [float(v) for v in tensor.tolist()]


def _worker_oom(exc: BaseException) -> str | None:
    """The message of a worker's unrecoverable OOM inside a failed Train run, else None."""
    from elastune.errors import OutOfMemory

    for failure in (getattr(exc, "worker_failures", None) or {}).values():
        cause: BaseException | None = failure
        while cause is not None:
            if isinstance(cause, OutOfMemory):
                return str(cause)
            cause = cause.__cause__
    return None


def _trainer_class() -> Any:
    """TorchTrainer without two of Ray Train's default callbacks: the PlacementGroupCleaner (see
    the module docstring: the sweep's WorkerGroupReaper removes the placement group; the cleaner
    would only leak itself here) and the datasets callback, which starts a DatasetManager actor per
    run to shard Ray Datasets; the engine makes its own data and passes no datasets."""
    return trainer_without_callbacks(frozenset({"PlacementGroupCleanerCallback", "DatasetsCallback"}))


def _node_bound_torch_config(backend: str) -> Any:
    """Ray Train's TorchConfig, except that the group's rendezvous store listens on rank 0's node
    address only. torch's `env://` / `tcp://` rendezvous starts its TCPStore server on every
    interface of the node; here rank 0 binds the socket itself, to the address Ray knows its node
    by (127.0.0.1 for a local Ray), and hands it to the store (`master_listen_fd`). The process
    group is then made from that store: the same gloo / nccl group, nothing else listens."""
    from ray.train.torch import TorchConfig

    class Backend(torch_backend_base()):  # type: ignore[misc]  # on_shutdown (destroying the group) is Ray's own
        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            import ray

            n = len(worker_group)
            address, port = worker_group.execute_single(0, _host_group_store, world_size=n)
            ray.get(
                [
                    worker_group.execute_single_async(
                        rank,
                        _join_process_group,
                        backend=backend_config.backend,
                        world_rank=rank,
                        world_size=n,
                        address=address,
                        port=port,
                        timeout_s=backend_config.timeout_s,
                    )
                    for rank in range(n)
                ]
            )

    class Config(TorchConfig):
        @property
        def backend_cls(self) -> type:
            return Backend

    return Config(backend=backend)


_GROUP_STORE: Any = None  # rank 0's rendezvous store server: alive as long as its worker


def _host_group_store(world_size: int) -> tuple[str, int]:
    """On rank 0: a TCPStore server on a socket bound to this node's address (not all interfaces)."""
    import datetime

    import ray
    from torch.distributed import TCPStore

    global _GROUP_STORE
    address = ray.util.get_node_ip_address()
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    sock.bind((address, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    store = TCPStore(
        address,
        port,
        world_size,
        is_master=True,
        timeout=datetime.timedelta(minutes=30),
        wait_for_workers=False,
        master_listen_fd=sock.fileno(),
    )
    _GROUP_STORE = (sock, store)
    return address, port


def _join_process_group(
    backend: str, world_rank: int, world_size: int, address: str, port: int, timeout_s: int
) -> None:
    import datetime

    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = _GROUP_STORE[1] if world_rank == 0 else dist.TCPStore(address, port, world_size, False, timeout)
    dist.init_process_group(backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)


class WorkerGroupReaper(Callback):
    """In the sweep's driver: when Tune ends a trial (finished, stopped by the scheduler, errored),
    remove the placement group its worker group reported. A group that ended by itself removed it
    already (removing it again does nothing); one whose trial was stopped mid-`fit()` did not, and
    its CPUs/GPUs would stay reserved for the rest of the job. Removing a placement group also ends
    any actor still in it."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._reap(trial)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._reap(trial)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for trial in trials:  # those the sweep's time limit stopped get no on_trial_complete
            self._reap(trial)

    @staticmethod
    def _reap(trial: Any) -> None:
        import ray
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        group = TrialReport.from_metrics(trial.last_result or {}).placement_group
        if group:
            remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex(group)))
