"""`elastune k8s rayjob`: the KubeRay manifests that run a sweep.

No installed package ships KubeRay's RayJob CRD schema, so the structure is checked against the
fields the ray.io/v1 RayJob CRD requires (hand-checked against KubeRay's API reference): spec.entrypoint;
rayClusterSpec.headGroupSpec.rayStartParams and template.spec.containers; each workerGroupSpec's
groupName, replicas, minReplicas, maxReplicas, rayStartParams and template.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.cli import main
from elastune.deploy.k8s import SPEC_MOUNT, TOKEN_KEY, TOKEN_SECRET, worker_shape
from elastune.tuning.spec import load_sweep_spec, validate_sweep_spec
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "search_spaces" / "dlrm_quick.yaml"
URI = "http://mlflow.mlflow.svc:5000"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


IMAGE = "registry.example.com/elastune:0.1.0"


def rayjob_docs(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    """The manifests `elastune k8s rayjob ARGS` prints (with --image IMAGE where ARGS name none)."""
    image = [] if "--image" in args else ["--image", IMAGE]
    assert main(["k8s", "rayjob", *args, *image]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs}


def containers(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    found = list(cluster["headGroupSpec"]["template"]["spec"]["containers"])
    for group in cluster["workerGroupSpecs"]:
        found += group["template"]["spec"]["containers"]
    return found + rayjob["spec"]["submitterPodTemplate"]["spec"]["containers"]


def test_the_output_is_a_secret_a_configmap_and_a_rayjob(capsys: pytest.CaptureFixture[str]) -> None:
    docs = rayjob_docs(capsys, str(QUICK), "--tracking-uri", URI)
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("v1", "Secret"),
        ("v1", "ConfigMap"),
        ("ray.io/v1", "RayJob"),
    ]
    for doc in docs:
        name = doc["metadata"]["name"]
        assert _DNS_LABEL.fullmatch(name) and len(name) <= 63, name


def test_the_rayjob_has_the_fields_the_crd_requires(capsys: pytest.CaptureFixture[str]) -> None:
    spec = by_kind(rayjob_docs(capsys, str(QUICK), "--tracking-uri", URI))["RayJob"]["spec"]
    assert isinstance(spec["entrypoint"], str) and spec["shutdownAfterJobFinishes"] is True
    cluster = spec["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert all(isinstance(v, str) for v in head["rayStartParams"].values())
    assert head["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert cluster["workerGroupSpecs"]
    for group in cluster["workerGroupSpecs"]:
        assert {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= set(group)
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())
        assert group["template"]["spec"]["containers"][0]["name"]
    assert spec["submitterPodTemplate"]["spec"]["restartPolicy"] == "Never"


def test_the_entrypoint_is_the_ray_job_a_host_submits_with_the_shipped_spec(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = by_kind(rayjob_docs(capsys, str(QUICK), "--tracking-uri", URI))
    rayjob, config_map = docs["RayJob"], docs["ConfigMap"]
    python, dash_m, module, path = rayjob["spec"]["entrypoint"].split()
    assert (python, dash_m, module) == ("python", "-m", "elastune.jobs.sweep")  # as `ray job submit -- ...`
    assert (ROOT / "jobs" / "sweep.py").is_file()
    assert config_map["data"][Path(path).name] == QUICK.read_text()  # the file as written
    head_pod = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    volume = next(
        v for v in head_pod["volumes"] if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    )
    mount = next(m for m in head_pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount["mountPath"] == str(Path(path).parent) == SPEC_MOUNT


def test_the_token_is_a_secret_referenced_by_every_container_and_never_a_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = by_kind(rayjob_docs(capsys, str(QUICK), "--tracking-uri", URI))
    secret = docs["Secret"]
    assert secret["metadata"]["name"] == TOKEN_SECRET
    assert "data" not in secret and "stringData" not in secret  # the user fills it with kubectl
    for container in containers(docs["RayJob"]):
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert "value" not in env["RAY_AUTH_TOKEN"]
        assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": TOKEN_SECRET, "key": TOKEN_KEY}}


def test_the_tracking_uri_and_namespace_come_from_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    docs = rayjob_docs(capsys, str(QUICK), "--tracking-uri", URI, "--namespace", "sweeps", "--image", "r.example/e:1")
    assert {d["metadata"]["namespace"] for d in docs} == {"sweeps"}
    rayjob = by_kind(docs)["RayJob"]
    assert {c["image"] for c in containers(rayjob)} == {"r.example/e:1"}
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"name": "MLFLOW_TRACKING_URI", "value": URI} in head["env"]


def _spec(cpus: float, gpus: float, workers: int, concurrent: int, ceiling: str | None) -> Any:
    raw = yaml.safe_load(QUICK.read_text())
    raw["resources"] = {"cpus_per_trial": cpus, "gpus_per_trial": gpus, "workers_per_trial": workers}
    raw["budget"]["max_concurrent"] = concurrent
    raw["constraints"]["memory_ceiling"] = ceiling
    if workers > 1:  # DDP: dense gradients, and a batch that splits over the workers
        raw["parameters"] = {"batch.micro": {"type": "choice", "values": [256, 512]}}
        raw["base"]["optimizer"] = {"sparse": "adam"}
        raw["constraints"]["reference"] = {"batch.micro": 512}
    return validate_sweep_spec(raw)


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # cpus, gpus, workers, max_concurrent, ceiling -> replicas, trials per pod, cpus, gpus, memory
        ((1, 0, 1, 2, "256MiB"), (2, 1, 1, 0, 256 * 2**20 + 2 * 2**30)),
        ((4, 1, 1, 3, "10GiB"), (3, 1, 4, 1, 6 * 2**30)),  # a GPU trial's ceiling is device memory
        ((2, 0.25, 1, 6, "4GiB"), (2, 4, 8, 1, 18 * 2**30)),  # EDO: four trials share a pod's GPU
        ((0.5, 0, 1, 3, None), (2, 2, 1, 0, 10 * 2**30)),
        ((1, 1, 2, 2, None), (2, 1, 2, 2, 6 * 2**30)),  # a DDP trial's two workers in one pod
    ],
)
def test_workers_are_sized_from_the_spec(resources: tuple[Any, ...], expected: tuple[int, ...]) -> None:
    shape = worker_shape(_spec(*resources))
    assert (shape.replicas, shape.trials_per_pod, shape.cpus, shape.gpus, shape.memory_bytes) == expected


@settings(max_examples=60, deadline=None)
@given(
    cpus=st.sampled_from([0.25, 0.5, 1, 1.5, 2, 8]),
    gpus=st.sampled_from([0, 0.1, 0.25, 1 / 3, 0.5, 1, 2]),
    concurrent=st.integers(1, 16),
)
def test_max_concurrent_trials_always_fit(cpus: float, gpus: float, concurrent: int) -> None:
    spec = _spec(cpus, gpus, 1, concurrent, "1GiB")
    shape = worker_shape(spec)
    assert shape.replicas * shape.trials_per_pod >= concurrent
    assert shape.cpus >= shape.trials_per_pod * cpus - 1e-9 and shape.gpus >= shape.trials_per_pod * gpus - 1e-9
    assert shape.replicas == math.ceil(concurrent / shape.trials_per_pod)  # no pod more than needed


def test_the_worker_requests_are_the_computed_shape(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    raw = yaml.safe_load(QUICK.read_text())
    raw["resources"] = {"cpus_per_trial": 2, "gpus_per_trial": 0.5}
    raw["budget"]["max_concurrent"] = 4
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    shape = worker_shape(load_sweep_spec(path))
    group = by_kind(rayjob_docs(capsys, str(path), "--tracking-uri", URI))["RayJob"]["spec"]["rayClusterSpec"]
    worker = group["workerGroupSpecs"][0]
    resources = worker["template"]["spec"]["containers"][0]["resources"]
    assert worker["replicas"] == shape.replicas == 2
    assert worker["rayStartParams"] == {"num-cpus": "4", "num-gpus": "1"}
    assert resources["requests"] == resources["limits"]
    assert resources["requests"] == {"cpu": "4", "memory": f"{shape.memory_bytes // 2**20}Mi", "nvidia.com/gpu": "1"}
    assert group["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # trials run on workers only


@pytest.mark.parametrize("spec", sorted((ROOT / "search_spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_spec_makes_a_rayjob(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert by_kind(rayjob_docs(capsys, str(spec), "--tracking-uri", URI))["RayJob"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tracking-uri", URI, "--set-nothing"], "No such option"),
        ([], "--tracking-uri=None"),
        (["--tracking-uri", "sqlite:///mlflow.db"], "deleted when the sweep ends"),
        (["--tracking-uri", "./mlruns"], "deleted when the sweep ends"),
        (["--tracking-uri", URI, "--namespace", "Sweeps_1"], "--namespace='Sweeps_1'"),
        (["--tracking-uri", URI, "--image", "a b"], "--image='a b'"),
        # no image: none is pullable by default (issue 37, point 7); said with the push that makes one
        (["--tracking-uri", URI], "--image: required"),
        (["--tracking-uri", URI], "docker push registry.example.com/elastune:0.1.0"),
        ([], "--image: required"),  # every bad option at once, the tracking URI's too
    ],
)
def test_bad_options_exit_2_and_print_nothing(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["k8s", "rayjob", str(QUICK), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err


def test_a_bad_spec_exits_2_naming_the_field_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = yaml.safe_load(QUICK.read_text())
    raw["budget"]["max_concurrent"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["k8s", "rayjob", str(path), "--tracking-uri", URI, "--image", IMAGE]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "budget.max_concurrent" in captured.err


def test_an_image_without_a_registry_is_warned_about_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """A local tag (`elastune:0.1.0` is Docker Hub's library/elastune, which holds no such image) runs
    only where it was loaded into every node (kind, minikube): printed, with a warning on stderr."""
    assert main(["k8s", "rayjob", str(QUICK), "--tracking-uri", URI, "--image", "elastune:0.1.0"]) == 0
    captured = capsys.readouterr()
    warning = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "--image='elastune:0.1.0' names no registry" in warning[0], captured.err
    assert "kind load docker-image elastune:0.1.0" in warning[0] and "docker push" in warning[0]
    rayjob = by_kind(list(yaml.safe_load_all(captured.out)))["RayJob"]  # stdout is the manifests alone
    assert {c["image"] for c in containers(rayjob)} == {"elastune:0.1.0"}
    for pullable in (IMAGE, "someone/elastune:0.1.0", "localhost:5000/elastune:0.1.0"):
        assert main(["k8s", "rayjob", str(QUICK), "--tracking-uri", URI, "--image", pullable]) == 0
        assert "warning" not in capsys.readouterr().err, pullable
