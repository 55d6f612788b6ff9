"""Deployment manifests for running elastune's jobs elsewhere: a sweep as a KubeRay RayJob (k8s.py).

Above the tuner (it reads a validated sweep spec), below the command line (`elastune k8s`).
"""

from elastune.deploy.k8s import RayJobOptions, WorkerShape, rayjob_manifests, rayjob_yaml, worker_shape

__all__ = ["RayJobOptions", "WorkerShape", "rayjob_manifests", "rayjob_yaml", "worker_shape"]
