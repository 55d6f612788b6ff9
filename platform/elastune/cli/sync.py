"""`elastune sync SWEEP_ID`: write the journal a sweep left to the MLflow store.

A sweep whose store stopped answering keeps what it could not write in `journal.jsonl` in its
state folder (tracking/journal.py); one that ended with the store still down exits 1 and names
this command. It reads that file alone: in the folder the sweep id names (tuning/state.py), and
only if it is this user's own, writable by nobody else (tracking/journal.py); every line is
validated through the record schemas before anything is written (a malformed one: exit 2, naming
the line).
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from elastune.cli.common import TrackingOpt, out
from elastune.errors import InputError, Problem

__all__ = ["sync"]


def sync(
    sweep_id: Annotated[str, typer.Argument(help="The sweep whose journal to write (the id the sweep printed).")],
    tracking_uri: TrackingOpt = None,
) -> None:
    """Write what a sweep journaled while its MLflow store was down ($ELASTUNE_HOME/sweeps/SWEEP_ID/journal.jsonl)
    to the store, then remove the journal."""
    from elastune.tracking.journal import JOURNAL_FILE
    from elastune.tracking.mlflow import resolve_tracking_uri, write_journal
    from elastune.tuning.state import check_sweep_id
    from elastune.tuning.sweep import sweeps_home

    home = sweeps_home().expanduser().resolve()
    state = check_sweep_id(sweep_id, home, field="SWEEP_ID")
    if not os.path.lexists(state):
        raise InputError(
            str(
                Problem(
                    "SWEEP_ID",
                    sweep_id,
                    f"no sweep state at {state}; run this on the machine that ran the sweep's driver, "
                    "or set ELASTUNE_HOME to the folder that holds it",
                )
            )
        )
    written = write_journal(state, sweep_id, tracking_uri)
    uri = resolve_tracking_uri(tracking_uri)
    if written:
        out.print(f"sweep {sweep_id}: {written} journaled record(s) written to {uri}; journal removed", highlight=False)
    else:
        out.print(f"sweep {sweep_id}: nothing to write (no {JOURNAL_FILE} in {state})", highlight=False)
