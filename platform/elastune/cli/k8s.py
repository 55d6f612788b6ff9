"""`elastune k8s rayjob SPEC`: print the KubeRay manifests that run a sweep on Kubernetes.

Registered in cli/app.py as `elastune k8s`. Validates the spec and the options first (a bad one is
exit 2 and nothing on stdout; no --image is one: no registry holds elastune's image for a cluster to
pull), then prints the YAML stream for `kubectl apply -f -` (elastune.deploy.k8s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["k8s_app"]

k8s_app = typer.Typer(help="Kubernetes manifests for elastune's jobs (KubeRay).", no_args_is_help=True)


@k8s_app.command()
def rayjob(
    spec: Annotated[Path, typer.Argument(help="Sweep spec YAML (see search_spaces/).")],
    image: Annotated[
        str | None,
        typer.Option(
            help="The image docker/Dockerfile builds, pushed where the cluster pulls from, e.g. "
            "registry.example.com/elastune:0.1.0 (required: no registry holds one for you)."
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow server the pods reach, e.g. http://mlflow.mlflow.svc:5000 (required)."),
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace of every object; default kubectl's.")] = None,
) -> None:
    """A RayJob (and its spec ConfigMap and token Secret) running SPEC's sweep on a cluster sized for it."""
    from elastune.cli.common import err
    from elastune.deploy.k8s import RayJobOptions, image_warning, rayjob_yaml
    from elastune.tuning.spec import load_sweep_spec

    parsed = load_sweep_spec(spec)
    options = RayJobOptions(image=image, tracking_uri=tracking_uri, namespace=namespace)
    manifests = rayjob_yaml(parsed, spec.read_text(), options)
    warning = image_warning(options.image)
    if warning is not None:  # on stderr: stdout is the YAML that `kubectl apply -f -` reads
        err.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    print(manifests, end="")
