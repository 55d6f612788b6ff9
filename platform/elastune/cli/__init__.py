"""The `elastune` command line. Thin: parse, call the library, print.

One module per group of commands (run.py: train, estimate, config; sweep.py: sweep, results;
ui.py: the web UI; edo.py: EDO's status; k8s.py: Kubernetes manifests), registered in app.py.
"""

from elastune.cli.app import app, main

__all__ = ["app", "main"]
