"""Every use of a dependency's private API, in one place.

Each shim says what it needs, why no public API does it, and is exercised by
tests/unit/test_compat.py, so an upgrade that moves a private name fails one named test instead of
a sweep. Imports are lazy: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = [
    "cluster_nodes",
    "gcs_probe",
    "is_fake",
    "loopback_only_ray",
    "pytree",
    "ray_auto_candidates",
    "ray_dial_host",
    "torch_backend_base",
    "trainer_without_callbacks",
]

# ---------------------------------------------------------------------------------------------
# Ray (checked against Ray 2.60)

_CLUSTER_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only_ray() -> Iterator[None]:
    """While a local Ray starts: keep it on 127.0.0.1. Ray swaps 127.0.0.1 for this machine's
    network address (and its GCS, raylet and agents then listen on every interface) unless
    multi-node clusters are off, as on macOS. The switch is an environment variable, read once at
    import into `ray._private.ray_constants.ENABLE_RAY_CLUSTER`: set for the processes Ray starts
    (they inherit it) and for this one (the constant), both put back afterwards so a later
    `ray.init` here sees the machine as before. A user's explicit setting is kept."""
    from ray._private import ray_constants

    enabled = ray_constants.ENABLE_RAY_CLUSTER
    unset = _CLUSTER_VARIABLE not in os.environ
    os.environ.setdefault(_CLUSTER_VARIABLE, "0")
    ray_constants.ENABLE_RAY_CLUSTER = os.environ[_CLUSTER_VARIABLE].lower() in ("1", "true")
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = enabled
        if unset:
            os.environ.pop(_CLUSTER_VARIABLE, None)


def gcs_probe(address: str) -> None:
    """Open (and drop) a GCS client to HOST:PORT: a cluster with token auth refuses one without the
    right token at once (ray.exceptions.AuthenticationError), where `ray.init` retries for minutes.
    Ray has no public probe."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    GcsClient(address=address)


def cluster_nodes(address: str, timeout_s: float) -> list[dict[str, Any]]:
    """The live nodes of the cluster whose GCS is at HOST:PORT, each {"address", "resources"}, read
    from the GCS without connecting a driver (`ray.init` would register a job on the cluster, and
    `ray.nodes()` needs one). The public state API needs the dashboard, which a cluster may not run."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]

    nodes = GcsClient(address=address).get_all_node_info(timeout=timeout_s, state_filter=GcsNodeInfo.ALIVE)
    return [{"address": node.node_manager_address, "resources": dict(node.resources_total)} for node in nodes.values()]


def ray_auto_candidates() -> list[str]:
    """The GCS addresses of every Ray cluster Ray's `auto` sees running on this machine (any user's:
    it reads the raylets' command lines; none is contacted). Ray has no public discovery API."""
    from ray._private.services import find_gcs_addresses

    return sorted(find_gcs_addresses())


def ray_dial_host(host: str) -> str:
    """The address Ray will actually dial for `host`: a loopback host becomes this machine's
    network address unless multi-node clusters are off (see `loopback_only_ray`)."""
    from ray._private.services import resolve_ip_for_localhost

    return str(resolve_ip_for_localhost(host))


def torch_backend_base() -> type:
    """Ray Train's torch backend, to subclass for a process group whose rendezvous store binds one
    address (tuning/worker_group.py). TorchConfig's `backend_cls` is the public hook; the class it
    returns has no public base."""
    from ray.train.torch.config import _TorchBackend

    return _TorchBackend


def trainer_without_callbacks(dropped: frozenset[str]) -> type:
    """TorchTrainer (Train V2) without the default callbacks named in `dropped` (by class name).
    Ray Train has no public switch for its default callbacks; `_create_default_callbacks` is where
    its controller collects them."""
    from ray.train.torch import TorchTrainer

    class Trainer(TorchTrainer):
        def _create_default_callbacks(self) -> list[Any]:
            callbacks = super()._create_default_callbacks()  # type: ignore[misc]  # Train V2's (mypy sees V1's)
            return [cb for cb in callbacks if type(cb).__name__ not in dropped]

    return Trainer


# ---------------------------------------------------------------------------------------------
# torch (checked against torch 2.13)


@contextlib.contextmanager
def outside_trace() -> Iterator[None]:
    """Real tensors again inside the estimator's fake-tensor trace, unseen by its tracker: for a
    workload that must read its data to know what to price (an LM's longest micro-batch). torch's
    own helper for this (`_disable_current_modes`) is private."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yield


def is_fake(tensor: Any) -> bool:
    """Whether `tensor` is a fake tensor (the estimator traces a step under FakeTensorMode): a
    workload that sizes its work by the data (dynamic padding reads the longest sequence) must
    price the worst case instead, since a fake tensor has no values. torch has no public test."""
    from torch._subclasses.fake_tensor import is_fake as torch_is_fake

    return bool(torch_is_fake(tensor))


def pytree() -> Any:
    """torch's pytree utilities (`tree_flatten`, `tree_unflatten`, `register_dataclass`), which see
    into dicts, lists, tuples, namedtuples and registered dataclasses: how data/batch.py handles a
    workload's batch without knowing its fields. torch.compile and torch.export are built on them,
    but the module is still private (`torch.utils._pytree`); no public module exists in 2.13."""
    from torch.utils import _pytree

    return _pytree
