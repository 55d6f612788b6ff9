"""A sweep as a KubeRay RayJob: the manifests `elastune k8s rayjob SPEC` prints.

The RayJob runs the same command as `ray job submit -- python -m elastune.jobs.sweep SPEC`: KubeRay
creates a Ray cluster, submits the job once the cluster is ready, and deletes the cluster when the
sweep ends (shutdownAfterJobFinishes). Three documents, in the order `kubectl apply` needs them:

- a Secret named for Ray's token, holding no value: the user fills it with `kubectl create secret`
  (nothing here generates or prints a token). Every Ray container, and the submitter that runs
  `ray job submit`, reads it through RAY_AUTH_TOKEN with RAY_AUTH_MODE=token;
- a ConfigMap holding the spec file, mounted into the head, where the job's driver runs;
- the RayJob: a head that runs no trial (num-cpus 0) and one worker group sized so that
  `budget.max_concurrent` trials fit at once (`worker_shape`).

The spec is validated by the caller (tuning.spec.load_sweep_spec) before anything is built.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any
from urllib.parse import urlsplit

import yaml

from elastune.errors import InputError
from elastune.tuning.spec import SweepSpec

__all__ = [
    "SPEC_MOUNT",
    "TOKEN_KEY",
    "TOKEN_SECRET",
    "RayJobOptions",
    "WorkerShape",
    "image_warning",
    "rayjob_manifests",
    "rayjob_yaml",
    "worker_shape",
]

TOKEN_SECRET = "elastune-ray-token"
TOKEN_KEY = "auth_token"  # the key KubeRay's own `authOptions.secretName` expects, so one Secret serves both
SPEC_MOUNT = "/etc/elastune/spec"
SPEC_FILE = "spec.yaml"
GiB = 2**30
# Host memory a trial is given when the spec does not bound it: its ceiling bounds a CPU trial's
# memory, but a GPU trial's ceiling is device memory, and its process still holds data and a model copy.
TRIAL_HOST_MEMORY = 4 * GiB
NODE_OVERHEAD = 2 * GiB  # a Ray node's raylet, agents and object store, beside the trials
HEAD_CPUS, HEAD_MEMORY = 2, 8 * GiB  # the sweep's driver: searcher, pricing, MLflow writes
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LOCAL_STORES = {"", "file", "sqlite"}


@dataclass(frozen=True)
class RayJobOptions:
    image: str | None  # required: None is refused (`_checked`), there is no image every cluster can pull
    tracking_uri: str | None
    namespace: str | None = None


@dataclass(frozen=True)
class WorkerShape:
    """One worker group: `replicas` pods, each running `trials_per_pod` trials at once."""

    replicas: int
    trials_per_pod: int
    cpus: int
    gpus: int
    memory_bytes: int


def worker_shape(spec: SweepSpec) -> WorkerShape:
    """Pods sized so that budget.max_concurrent trials run at once, each trial inside one pod.

    A trial takes workers_per_trial x cpus_per_trial CPUs and x gpus_per_trial GPUs. Trials that
    take a fraction of a GPU (EDO) share one pod's GPU, as many as fit in it; trials that take a
    fraction of a CPU share a CPU likewise; any other trial gets a pod of its own. Kubernetes counts
    GPUs whole and Ray's `num-cpus` is whole, so a pod's figures are rounded up.
    """
    res, concurrent = spec.resources, spec.budget.max_concurrent
    trial_cpus = res.cpus_per_trial * res.workers_per_trial
    trial_gpus = res.gpus_per_trial * res.workers_per_trial
    per_pod = 1
    if 0 < trial_gpus < 1:
        per_pod = math.floor(round(1 / trial_gpus, 9))
    elif trial_gpus == 0 and trial_cpus < 1:
        per_pod = math.floor(round(1 / trial_cpus, 9))
    per_pod = min(per_pod, concurrent)
    ceiling = spec.constraints.memory_ceiling
    trial_memory = ceiling if ceiling is not None and trial_gpus == 0 else TRIAL_HOST_MEMORY
    return WorkerShape(
        replicas=math.ceil(concurrent / per_pod),
        trials_per_pod=per_pod,
        cpus=max(1, math.ceil(round(trial_cpus * per_pod, 9))),
        gpus=math.ceil(round(trial_gpus * per_pod, 9)),
        memory_bytes=per_pod * trial_memory + NODE_OVERHEAD,
    )


def rayjob_manifests(spec: SweepSpec, spec_text: str, options: RayJobOptions) -> list[dict[str, Any]]:
    """The Secret (no value), the ConfigMap with `spec_text` and the RayJob, as mappings."""
    tracking_uri, image = _checked(options)
    name = _job_name(spec.name)
    meta = {"namespace": options.namespace} if options.namespace else {}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": TOKEN_SECRET,
            **meta,
            "annotations": {
                "elastune/token": f"no value here: kubectl create secret generic {TOKEN_SECRET} "
                f"--from-file={TOKEN_KEY}=FILE (docs/deploy.md)"
            },
        },
        "type": "Opaque",
    }
    spec_map = f"{name}-spec"
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": spec_map, **meta},
        "data": {SPEC_FILE: spec_text},
    }
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, **meta, "labels": {"app.kubernetes.io/name": "elastune"}},
        "spec": {
            "entrypoint": f"python -m elastune.jobs.sweep {SPEC_MOUNT}/{SPEC_FILE}",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 300,  # five minutes to read the cluster's logs before it goes
            "submissionMode": "K8sJobMode",
            # KubeRay's default submitter carries no token; this one does (it runs `ray job submit`).
            "submitterPodTemplate": _submitter(image),
            "rayClusterSpec": _cluster(spec, image, tracking_uri, spec_map),
        },
    }
    return [secret, config_map, rayjob]


def rayjob_yaml(spec: SweepSpec, spec_text: str, options: RayJobOptions) -> str:
    """The manifests as one multi-document YAML stream, for `kubectl apply -f -`."""
    return yaml.dump_all(rayjob_manifests(spec, spec_text, options), Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes a multi-line string (the spec file) as a block, readable as it was written."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _cluster(spec: SweepSpec, image: str, tracking_uri: str, config_map: str) -> dict[str, Any]:
    shape = worker_shape(spec)
    # The job's driver runs on the head and inherits its environment: the sweep records there.
    head_env = [*_token_env(), {"name": "MLFLOW_TRACKING_URI", "value": tracking_uri}]
    head = {
        "name": "ray-head",
        "image": image,
        "env": head_env,
        "ports": [
            {"containerPort": 6379, "name": "gcs-server"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
        ],
        "resources": _resources(HEAD_CPUS, 0, HEAD_MEMORY),
        "volumeMounts": [{"name": "spec", "mountPath": SPEC_MOUNT, "readOnly": True}],
    }
    worker_params = {"num-cpus": str(shape.cpus)}
    if shape.gpus:
        worker_params["num-gpus"] = str(shape.gpus)
    worker = {
        "name": "ray-worker",
        "image": image,
        "env": _token_env(),
        "resources": _resources(shape.cpus, shape.gpus, shape.memory_bytes),
    }
    return {
        "rayVersion": _ray_version(),
        "headGroupSpec": {
            # num-cpus 0: no trial lands on the head, whose memory is the driver's
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
            "template": {
                "spec": {
                    "containers": [head],
                    "volumes": [{"name": "spec", "configMap": {"name": config_map}}],
                }
            },
        },
        "workerGroupSpecs": [
            {
                "groupName": "trials",
                "replicas": shape.replicas,
                "minReplicas": shape.replicas,
                "maxReplicas": shape.replicas,
                "rayStartParams": worker_params,
                "template": {"spec": {"containers": [worker]}},
            }
        ],
    }


def _submitter(image: str) -> dict[str, Any]:
    container = {
        "name": "ray-job-submitter",
        "image": image,
        "env": _token_env(),
        "resources": {  # KubeRay's defaults for its own submitter
            "requests": {"cpu": "500m", "memory": "200Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
    }
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def _token_env() -> list[dict[str, Any]]:
    secret_ref = {"secretKeyRef": {"name": TOKEN_SECRET, "key": TOKEN_KEY}}
    return [{"name": "RAY_AUTH_MODE", "value": "token"}, {"name": "RAY_AUTH_TOKEN", "valueFrom": secret_ref}]


def _resources(cpus: int, gpus: int, memory_bytes: int) -> dict[str, Any]:
    # Requests equal limits: Ray sizes a node from its container's limits, and a pod whose usage
    # may burst past its request is the first one evicted.
    amounts: dict[str, str] = {"cpu": str(cpus), "memory": f"{math.ceil(memory_bytes / 2**20)}Mi"}
    if gpus:
        amounts["nvidia.com/gpu"] = str(gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _job_name(spec_name: str) -> str:
    """elastune-NAME as a DNS label KubeRay can derive its cluster's and services' names from."""
    slug = re.sub(r"[^a-z0-9]+", "-", spec_name.lower()).strip("-")
    return f"elastune-{slug}"[:40].rstrip("-")


def _ray_version() -> str:
    return version("ray")  # the image is built from the same constraints.txt as this install


def _checked(options: RayJobOptions) -> tuple[str, str]:
    """(tracking URI, image), once every option is known to work in a cluster; an InputError
    naming every one that does not, otherwise."""
    problems = []
    uri = options.tracking_uri
    if uri is None or urlsplit(uri).scheme in _LOCAL_STORES:
        problems.append(
            f"--tracking-uri={uri!r}: a RayJob's cluster is deleted when the sweep ends, and a store on its "
            "disk with it; give an MLflow server the pods reach, e.g. http://mlflow.mlflow.svc:5000"
        )
    image = options.image
    if image is None:
        problems.append(
            "--image: required; no registry holds elastune's image, so a cluster cannot pull one by default. "
            f"Build docker/Dockerfile and push it where the cluster pulls from (in the repository root: {_PUSH}), then "
            "--image registry.example.com/elastune:0.1.0 (kind or minikube: load a local build into the "
            "cluster, `kind load docker-image elastune:0.1.0`, and give --image elastune:0.1.0)"
        )
    elif not image or any(c.isspace() for c in image):
        problems.append(f"--image={image!r}: give an image reference, e.g. registry.example.com/elastune:0.1.0")
    if options.namespace is not None and not _DNS_LABEL.fullmatch(options.namespace):
        problems.append(
            f"--namespace={options.namespace!r}: a namespace is lowercase letters, digits and '-', at most "
            "63 characters, starting and ending with a letter or digit"
        )
    if problems:
        raise InputError("\n".join(problems))
    assert uri is not None and image is not None
    return uri, image


_PUSH = (
    "`docker build -f docker/Dockerfile -t registry.example.com/elastune:0.1.0 . && "
    "docker push registry.example.com/elastune:0.1.0`"
)


def image_warning(image: str | None) -> str | None:
    """A line saying that no cluster can pull `image` from a registry, or None. A reference with no
    '/' names an official image of Docker Hub's library (`elastune:0.1.0` is docker.io/library/elastune),
    where no elastune image is: it runs only where the image is already on every node (a kind or
    minikube cluster a local build was loaded into)."""
    if image is None or "/" in image:
        return None
    return (
        f"--image={image!r} names no registry, so a cluster looks for it in Docker Hub's library, which holds "
        "no elastune image: its pods start only where the image is already on every node (`kind load "
        f"docker-image {image}`, `minikube image load {image}`); otherwise push it (in the repository root: {_PUSH}) "
        "and give that name"
    )
