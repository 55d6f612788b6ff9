"""One local Ray for every module here, started by the first test that asks and shut down when
the last module here ends (a Ray start and shutdown is ~6 s on a 2-core machine).

2 CPUs and one logical GPU (Ray's fractional GPU shares are scheduled on it; nothing runs on a
GPU), bound to 127.0.0.1, no dashboard. Its processes inherit GLOO_SOCKET_IFNAME=lo, so the
worker groups' DDP sockets stay on the loopback interface. Each module leaves the cluster as it
found it: its actors, placement groups and EDO broker are gone when it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="package")
def ray_local() -> Iterator[Any]:
    import ray

    with pytest.MonkeyPatch.context() as env:
        env.setenv("GLOO_SOCKET_IFNAME", "lo")  # read by the raylet at start; its workers inherit it
        context = ray.init(
            address="local",  # a new Ray, never one a `ray start` elsewhere on the machine left running
            num_cpus=2,
            num_gpus=1,
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
        )
        try:
            yield context
        finally:
            ray.shutdown()
