"""The private names elastune.compat leans on are still there, with the shape it uses: an upgrade
of Ray that moves one fails here, by name, before a sweep meets it."""

from __future__ import annotations

import inspect
import os

import pytest
from elastune import compat


def test_the_local_ray_switch_is_set_while_starting_and_put_back() -> None:
    from ray._private import ray_constants

    before, variable = ray_constants.ENABLE_RAY_CLUSTER, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    had = os.environ.get(variable)
    with compat.loopback_only_ray():
        assert ray_constants.ENABLE_RAY_CLUSTER is (had is not None and had.lower() in ("1", "true"))
        assert os.environ[variable] == (had if had is not None else "0")
    assert before == ray_constants.ENABLE_RAY_CLUSTER and os.environ.get(variable) == had


def test_the_gcs_client_the_probe_opens_is_there() -> None:
    # The probe itself runs against real token clusters: tests/integration/served (a wrong or
    # missing token refused at once) and tests/integration/test_readme_cluster.py.
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    # a thin wrapper (a Cython class: its constructor has no signature to check) that hands the calls
    # compat.py makes on it (get_all_node_info: checked on InnerGcsClient below) to InnerGcsClient
    assert hasattr(GcsClient, "__getattr__") and "InnerGcsClient" in (GcsClient.__doc__ or "")


def test_the_gcs_client_lists_live_nodes_with_a_timeout() -> None:
    # cluster_nodes runs against a real cluster in tests/integration/local_ray/test_doctor_ray.py.
    from ray._raylet import InnerGcsClient  # type: ignore[attr-defined]
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    assert {"timeout", "state_filter"} <= set(inspect.signature(InnerGcsClient.get_all_node_info).parameters)
    assert GcsNodeInfo.GcsNodeState.Name(GcsNodeInfo.ALIVE) == "ALIVE"
    assert {"node_manager_address", "resources_total", "state"} <= set(GcsNodeInfo.DESCRIPTOR.fields_by_name)


def test_ray_dials_loopback_as_loopback_when_clusters_are_off() -> None:
    with compat.loopback_only_ray():
        if os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
            assert compat.ray_dial_host("127.0.0.1") == "127.0.0.1"
    assert compat.ray_dial_host("192.0.2.10") == "192.0.2.10"  # only a loopback host is resolved


def test_the_torch_backend_has_the_hooks_worker_group_overrides() -> None:
    base = compat.torch_backend_base()
    assert list(inspect.signature(base.on_start).parameters) == ["self", "worker_group", "backend_config"]
    assert callable(base.on_shutdown)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's, on building a trainer
def test_the_trainer_drops_exactly_the_named_default_callbacks() -> None:
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    def loop(config: dict[str, object]) -> None:
        pass

    dropped = "PlacementGroupCleanerCallback"
    trainer_class = compat.trainer_without_callbacks(frozenset({dropped}))
    scaling = ScalingConfig(num_workers=1)  # building a trainer starts nothing; fit() would

    def names(trainer: object) -> list[str]:
        return [type(c).__name__ for c in trainer._create_default_callbacks()]  # type: ignore[attr-defined]

    every = names(TorchTrainer(loop, scaling_config=scaling))
    assert dropped in every, "Ray Train renamed the callback or its hook"
    assert names(trainer_class(loop, scaling_config=scaling)) == [n for n in every if n != dropped]


def test_a_fake_tensor_is_told_from_a_real_one() -> None:
    import torch
    from elastune.compat import is_fake
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert not is_fake(torch.zeros(2))
    with FakeTensorMode():
        assert is_fake(torch.zeros(2))
