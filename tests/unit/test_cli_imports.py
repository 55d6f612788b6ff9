"""`elastune --help`, every subcommand's `--help`, `elastune config schema` and `elastune config show`
(without --check) answer without importing torch, Ray, MLflow or Optuna (seconds of imports on a
small machine, for a page of text): those imports wait inside the commands that need them.

Each check runs the real CLI in a fresh interpreter, so nothing an earlier test imported hides an
import, and reads `sys.modules` afterwards: a check of what was imported, not a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "ray", "mlflow", "optuna")

# Runs `main` for the top-level --help, then for each command the typer app registers (walked from
# the app itself, so a command added later is checked too), then `config schema` and `config show`.
PROBE = """
import contextlib, io, json, sys
import typer
from elastune.cli.app import app, main

def paths(command, prefix):  # a group has commands (recent typer vendors its own click: no isinstance)
    yield prefix
    if getattr(command, "commands", None):
        for name, sub in command.commands.items():
            yield from paths(sub, [*prefix, name])

said = {}
for path in [*paths(typer.main.get_command(app), []), ["config", "schema", "CALL"], ["config", "show", "CALL"]]:
    argv = path[:-1] if path[-1:] == ["CALL"] else [*path, "--help"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(argv)
    said[" ".join(argv)] = [code, out.getvalue()]
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"said": said, "heavy": heavy}))
"""

# Every command a user can ask --help of; the probe must reach each (a walk that found nothing
# would otherwise pass).
COMMANDS = {
    "train",
    "estimate",
    "sweep",
    "results",
    "sweeps",
    "sync",
    "doctor",
    "config schema",
    "config show",
    "ui",
    "edo status",
    "k8s rayjob",
}


def test_help_of_every_command_imports_no_heavy_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *HEAVY], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    said = result["said"]
    asked = {argv.removesuffix(" --help") for argv in said if argv.endswith(" --help")}
    assert asked >= COMMANDS, sorted(COMMANDS - asked)
    for argv, (code, text) in said.items():
        assert code == 0, (argv, text)
        if argv.endswith("--help"):
            assert "Usage:" in text, (argv, text)
    assert '"properties"' in said["config schema"][1]  # the schema itself, printed
    assert "strategy: full" in said["config show"][1]  # the resolved defaults, printed
    assert result["heavy"] == [], f"imported to print help: {result['heavy']}"


def test_the_probe_sees_an_import_of_torch() -> None:
    """The check above can fail: the same probe, after a command that needs torch, names it."""
    probe = PROBE.replace("heavy = ", "import elastune.component_checks\nheavy = ")
    done = subprocess.run(
        [sys.executable, "-c", probe, *HEAVY], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch" in json.loads(done.stdout.strip().splitlines()[-1])["heavy"]
