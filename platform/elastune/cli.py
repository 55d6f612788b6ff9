"""The `elastune` command line. Thin: parse, call the library, print.

Exit codes: 0 ok, 1 runtime failure, 2 invalid input (nothing launched, written or lost).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from elastune.config import RunConfig, load_run_config
from elastune.errors import ElastuneError

__all__ = ["app", "main"]

app = typer.Typer(
    help="Find, then run, the fastest way to train an embedding-heavy model inside a memory ceiling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect run configs.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.command("ui")(__import__("elastune.ui_cli", fromlist=["ui"]).ui)  # `elastune ui`: see ui_cli.py

out = Console()
err = Console(stderr=True)


class Format(str, Enum):
    table = "table"
    json = "json"


ConfigArg = Annotated[Path | None, typer.Argument(help="YAML run config; without it the embedded defaults are used.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a key, e.g. --set batch.micro=2048 (repeatable)."),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table for people, json for scripts.")]


@app.command()
def train(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Train one configuration; print throughput, measured and predicted peak memory, quality."""
    from elastune.training.loop import Progress
    from elastune.training.loop import train as run_training

    cfg = load_run_config(config, set_ or [])
    err.print(
        f"[bold]training[/] {cfg.workload} · {cfg.embedding.strategy} · {cfg.precision} · "
        f"batch {cfg.batch.micro}×{cfg.batch.accum} · {cfg.steps} steps · device {cfg.device}"
    )

    def show(p: Progress) -> None:
        rate = f"{p.samples_per_s:,.0f} samples/s" if p.samples_per_s else "warming up"
        err.print(f"  step {p.step:>5}/{p.steps}  loss {p.loss:.4f}  {rate}", highlight=False)

    result = run_training(cfg, on_progress=show)
    if format is Format.json:
        print(json.dumps(_result_dict(result), indent=2))
        return
    table = Table(title="elastune train", show_header=False)
    for label, value in _summary_rows(result):
        table.add_row(label, value)
    out.print(table)


@app.command()
def estimate(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Predict a config's peak memory without running it (fake-tensor trace + overhead model)."""
    from elastune.memory.estimate import estimate as run_estimate
    from elastune.training.precision import resolve_device

    cfg = load_run_config(config, set_ or [])
    est = run_estimate(cfg, resolve_device(cfg.device))
    if format is Format.json:
        payload = {
            "estimated_peak_bytes": est.peak_bytes,
            "kind": est.kind,
            "breakdown": est.breakdown,
            "traced_peak_bytes": est.traced_peak_bytes,
            "seconds": est.seconds,
            "config": cfg.to_dict(),
        }
        print(json.dumps(payload, indent=2))
        return
    table = Table(title=f"elastune estimate ({est.kind}, {est.seconds:.2f} s)")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    table.add_column("", justify="right")
    for part, size in est.breakdown.items():
        table.add_row(part, f"{size:,}", human_bytes(size))
    table.add_row("[bold]peak[/]", f"[bold]{est.peak_bytes:,}[/]", f"[bold]{human_bytes(est.peak_bytes)}[/]")
    out.print(table)


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON schema of a run config."""
    print(json.dumps(RunConfig.model_json_schema(), indent=2))


@config_app.command("show")
def config_show(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Print the resolved config (defaults, then the file, then --set overrides)."""
    import yaml

    cfg = load_run_config(config, set_ or [])
    if format is Format.json:
        print(json.dumps(cfg.to_dict(), indent=2))
    else:
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")


def _result_dict(result: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(result)


def _summary_rows(r: Any) -> list[tuple[str, str]]:
    est = r.estimated_peak_bytes
    error = ""
    if est and r.peak_memory_bytes:
        error = f" ({(est - r.peak_memory_bytes) / r.peak_memory_bytes:+.1%} vs measured)"
    return [
        ("throughput", f"{r.samples_per_s:,.0f} samples/s (after {r.config['warmup_steps']} warm-up steps)"),
        ("peak memory, measured", f"{human_bytes(r.peak_memory_bytes)} ({r.peak_memory_kind})"),
        ("peak memory, predicted", f"{human_bytes(est) if est else 'n/a'}{error}"),
        ("eval AUC", f"{r.val_auc:.4f}"),
        ("eval log loss", f"{r.val_logloss:.4f} (constant-prediction baseline {r.baseline_logloss:.4f})"),
        ("steps × effective batch", f"{r.steps} × {r.effective_batch} = {r.samples:,} samples"),
        ("micro-batch × accumulation", f"{r.micro_batch} × {r.accum}"),
        ("OOM retries", str(r.oom_retries)),
        ("device", r.device),
        ("timed training", f"{r.elapsed_s:.1f} s"),
    ]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=False)
    except ElastuneError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except SystemExit as exc:  # typer's --help and usage errors
        return int(exc.code or 0)
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except Exception as exc:
        # Usage errors arrive here with standalone_mode=False. Recent typer releases vendor their
        # own click, so they are recognised by shape (show() and exit_code), not by class.
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
