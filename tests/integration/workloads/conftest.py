"""Sweeps of workloads other than DLRM (an example package's, the unusual-batch plugin's, `hf`):
a package of its own, so that `make test` runs it beside integration/local_ray on the other
worker (tests/conftest.py schedules each such package as one unit). Its Ray is local_ray's fixture:
one local Ray for the package, 2 CPUs and a logical GPU on 127.0.0.1, shut down when it ends."""

from tests.integration.local_ray.conftest import ray_local

__all__ = ["ray_local"]
