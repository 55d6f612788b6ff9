"""The `elastune` command: every subcommand registered in one place, and `main`, which turns
errors into exit codes.

Exit codes: 0 ok, 1 runtime failure (or a sweep where no trial completed), 2 invalid input (nothing
launched, written or lost; or a sweep where nothing was feasible), 130 / 143 a sweep stopped by
SIGINT / SIGTERM (resumable).
"""

from __future__ import annotations

import typer
from rich.markup import escape

from elastune.cli import doctor, edo, run, sweep, sync, ui
from elastune.cli.common import err
from elastune.cli.k8s import k8s_app
from elastune.errors import ElastuneError
from elastune.text import printable

__all__ = ["app", "main"]

app = typer.Typer(
    help="Find, then run, the fastest way to train an embedding-heavy model inside a memory ceiling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(run.train)
app.command()(run.estimate)
app.command()(sweep.sweep)
app.command()(sweep.results)
app.command()(sweep.sweeps)
app.command()(sync.sync)
app.command()(doctor.doctor)
config_app = typer.Typer(help="Inspect run configs.", no_args_is_help=True)
config_app.command("schema")(run.config_schema)
config_app.command("show")(run.config_show)
app.add_typer(config_app, name="config")
app.command("ui")(ui.ui)
app.add_typer(edo.edo_app, name="edo")
app.add_typer(k8s_app, name="k8s")


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=False)
    except ElastuneError as exc:
        # soft_wrap: a path (or the resume command, an interrupted sweep's last line) stays whole.
        # An error may quote what was read back (a stored record, a data file): no control
        # character of it reaches the terminal, line by line so a list of problems keeps its lines.
        text = "\n".join(printable(line) for line in str(exc).split("\n"))
        err.print(f"[bold red]{exc.label}:[/] {escape(text)}", highlight=False, soft_wrap=True)
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
