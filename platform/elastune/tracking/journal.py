"""A sweep's journal: the records its driver could not write to the MLflow store, kept on disk
until the store takes them.

A store that is a server goes away for minutes (a restart, a lost node), and the driver is its
only writer (tracking/mlflow.py): what it cannot write is lost unless it is kept. While a sweep
runs, `SweepJournal` sends each write to the store while it answers, and appends it to
`journal.jsonl` in the sweep's state folder (`$ELASTUNE_HOME/sweeps/SWEEP_ID`, tuning/state.py)
while it does not; once the store answers again, the journal is written to it in order and
removed. A journal still there when the driver ends is written by `elastune sync SWEEP_ID`, or
first thing by `elastune sweep --resume SWEEP_ID`.

The file is JSON, one `Entry` a line (never pickle): what the tracker was asked to do and the
records it was given, already validated. Each line is flushed to disk (fsync) before the driver
goes on, so a crash loses at most the line being written. It is read back through the record
schemas (records.py): the state folder is trusted, but a line cut short by a crash or edited by
hand is refused, naming the line, before anything of the journal is written.

No mlflow here: the writer is the tracker, seen through `Writer`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from elastune.errors import InputError
from elastune.tracking.records import RecordError, SweepRecord, TrialRecord

__all__ = [
    "JOURNAL_FILE",
    "RETRY_EVERY_S",
    "Entry",
    "Journal",
    "JournalError",
    "SweepJournal",
    "Writer",
    "active_journal",
    "journaled_view",
    "journaling",
    "journaling_to",
    "view_while_down",
]

JOURNAL_FILE = "journal.jsonl"
# While the store does not answer, a write tries it again at most this often: a try costs a refused
# connection, or, for a host that no longer answers at all, a 5 s probe (`Writer.answers`) that
# holds the driver up; the store hears again from the driver within this long once it is back.
RETRY_EVERY_S = 15.0
# A line holds one trial's record and the sweep's fields, the spec among them (at most 4 MiB:
# tuning/state.py); a longer one was not written by elastune.
MAX_LINE_BYTES = 8 * 1024 * 1024

Kind = Literal["trial", "confirmation", "sweep", "end"]
# What each kind replays as (SweepTracker's methods): log_trial, log_confirmation, update_sweep, finish_sweep.
_TRIAL_KINDS = frozenset({"trial", "confirmation"})
_KINDS = _TRIAL_KINDS | {"sweep", "end"}


class JournalError(InputError):
    """A journal line that is not one elastune wrote: names the file and the line."""


@dataclass
class Entry:
    """One write: a trial's record (`trial`), a confirmation's figures on an ended trial
    (`confirmation`), the sweep's fields (`sweep`) or its end (`end`).

    In the driver, `sweep` is the whole record the caller gave (trials included); on disk it is the
    sweep's fields alone: each trial is an entry of its own, and a replay reads the trials back
    from the store (`SweepTracker.replay`), so a line stays the size of one record however many
    trials the sweep has."""

    kind: Kind
    sweep: SweepRecord
    trial: TrialRecord | None = None

    def to_line(self) -> bytes:
        data: dict[str, Any] = {"kind": self.kind, "sweep": replace(self.sweep, trials=[]).to_dict()}
        if self.trial is not None:
            data["trial"] = self.trial.to_dict()
        return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


class Journal:
    """The file `journal.jsonl` in a sweep's state folder: appended to, read whole, removed."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / JOURNAL_FILE

    @property
    def pending(self) -> bool:
        return os.path.lexists(self.path)

    def append(self, entry: Entry) -> None:
        """Add one line and put it on disk before returning: the driver goes on only once a record it
        could not write is kept. O_NOFOLLOW: a link planted at the name is refused, not written through."""
        created = not self.pending
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "ab") as out:
            out.write(entry.to_line())
            out.flush()
            os.fsync(out.fileno())
        if created:  # the file's name in its folder must reach the disk too, or a crash loses the file
            _fsync_folder(self.path.parent)

    def entries(self, sweep_id: str | None = None) -> list[Entry]:
        """Every line, in order, validated (JournalError naming the first bad line); with `sweep_id`,
        each line must be that sweep's."""
        fd = self._open_own()
        entries: list[Entry] = []
        with os.fdopen(fd, "rb") as lines:
            while line := lines.readline(MAX_LINE_BYTES + 1):
                entries.append(self._entry(line, f"{self.path} line {len(entries) + 1}", sweep_id))
        return entries

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def _open_own(self) -> int:
        """The file, opened for reading, if it is one this user alone could have written: a regular
        file (no link followed), owned by this user, without group or world write. Checked on the
        open file, so what is checked is what is read."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise JournalError(
                f"{self.path}: cannot be read as a journal ({exc.strerror}; a symlink is refused)"
            ) from None
        info = os.fstat(fd)
        if (
            stat.S_ISREG(info.st_mode)
            and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return fd
        os.close(fd)
        raise JournalError(
            f"{self.path}: not this user's own file (owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}), "
            "so it is not read; if you trust it, make it yours alone (chown, `chmod go-w`) and run this again"
        )

    @staticmethod
    def _entry(line: bytes, where: str, sweep_id: str | None) -> Entry:
        if len(line) > MAX_LINE_BYTES:
            raise JournalError(f"{where}: over {MAX_LINE_BYTES:,} bytes; elastune did not write it")
        if not line.endswith(b"\n"):
            raise JournalError(
                f"{where}: cut short (the driver stopped while writing it); remove that line and run again "
                "(its record was not written anywhere: a resume runs its trial again)"
            )
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            raise JournalError(f"{where}: not JSON; elastune did not write it (edited by hand?)") from None
        entry = _validated(data, where)
        if sweep_id is not None and entry.sweep.sweep_id != sweep_id:
            raise JournalError(f"{where}: a record of sweep {entry.sweep.sweep_id!r}, not of {sweep_id!r}")
        return entry


def _validated(data: Any, where: str) -> Entry:
    """An entry from a parsed line, every field through the record schemas (records.py)."""
    if not isinstance(data, dict) or not {"kind", "sweep"} <= set(data) <= {"kind", "sweep", "trial"}:
        raise JournalError(f"{where}: not a journal entry (an object of kind, sweep and, for a trial, trial)")
    kind = data["kind"]
    if not isinstance(kind, str) or kind not in _KINDS:
        raise JournalError(f"{where}: kind={kind!r} is none of {', '.join(sorted(_KINDS))}")
    if (kind in _TRIAL_KINDS) != ("trial" in data):
        raise JournalError(f"{where}: a {kind!r} entry {'needs' if kind in _TRIAL_KINDS else 'holds no'} trial")
    try:
        sweep = SweepRecord.from_dict(data["sweep"]) if isinstance(data["sweep"], dict) else None
        trial = TrialRecord.from_dict(data["trial"]) if isinstance(data.get("trial"), dict) else None
    except RecordError as exc:
        raise JournalError(f"{where}: {exc}") from None
    if sweep is None or sweep.trials or (kind in _TRIAL_KINDS and trial is None):
        raise JournalError(f"{where}: not a journal entry (the sweep's fields and a trial are objects; no trials list)")
    return Entry(cast(Kind, kind), sweep, trial)  # one of _KINDS, checked above


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems refuse fsync on a folder
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Writer(Protocol):
    """What a journal writes through: the sweep's tracker (tracking/mlflow.py)."""

    tracking_uri: str

    def apply(self, entry: Entry) -> None:
        """Write one entry to the store, as the driver asked for it."""

    def replay(self, entries: Sequence[Entry]) -> None:
        """Write a journal's entries to the store, in order; idempotent."""

    def answers(self) -> bool:
        """Whether the store takes requests now."""


class SweepJournal:
    """A running sweep's writes: to the store while it answers, to the journal while it does not.

    A write that fails while the store still answers (a record it refuses) is an error, raised as
    before; one that fails because it does not answer goes to the journal, and so does every write
    after it until the journal has been written (in order: a later record never lands before an
    earlier one). The console hears of an outage once, and once that it is over.

    It also keeps the driver's own view of the sweep (the last record it was given, with every trial
    it was told of): while the journal holds what the store lacks, the driver reads the sweep from
    that view (`journaled_view`). Called from the driver's main thread only, where Tune calls its
    callbacks.
    """

    def __init__(self, journal: Journal, writer: Writer, echo: Callable[[str], None]) -> None:
        self.journal, self.writer, self.echo = journal, writer, echo
        self.view: SweepRecord | None = None
        self._down = False  # the journal holds what the store lacks
        self._next_try = 0.0  # time.monotonic() before which the store is not tried again

    @property
    def pending(self) -> bool:
        return self._down

    @property
    def path(self) -> Path:
        return self.journal.path

    def write(self, entry: Entry) -> None:
        self._remember(entry)
        if not (self.catch_up() and self._tried(lambda: self.writer.apply(entry))):
            self._keep(entry)

    def catch_up(self, now: bool = False) -> bool:
        """Write the journal to the store if it answers again (tried at most every RETRY_EVERY_S,
        unless `now`); True when nothing is left to write."""
        if not self._down:
            return True
        if not now and time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + RETRY_EVERY_S
        if not self.writer.answers():  # a quick no (the replay's own first request could take 20 s)
            return False
        entries = self.journal.entries()
        if not self._tried(lambda: self.writer.replay(entries)):
            return False  # down again: the journal stays whole, and is written whole next time
        self.journal.remove()
        self._down = False
        self.echo(f"MLflow store {self.writer.tracking_uri} answers again: {len(entries)} journaled record(s) written")
        return True

    def _tried(self, write: Callable[[], None]) -> bool:
        """Run `write`; False when it failed because the store does not answer, else its error goes on."""
        try:
            write()
        except Exception:
            if self.writer.answers():
                raise
            return False
        return True

    def _keep(self, entry: Entry) -> None:
        if not self._down:
            self._down = True
            self._next_try = time.monotonic() + RETRY_EVERY_S
            self.echo(
                f"MLflow store {self.writer.tracking_uri} does not answer: this sweep's records are journaled "
                f"in {self.journal.path} until it does"
            )
        self.journal.append(entry)

    def _remember(self, entry: Entry) -> None:
        """The view: the entry's record, with the trials of the view before it that it lacks (each
        caller holds its own copy of the record) and the entry's trial, the newest word on it."""
        trials = {t.trial_id: t for t in (self.view.trials if self.view is not None else [])}
        trials |= {t.trial_id: t for t in entry.sweep.trials}
        if entry.trial is not None:
            trials[entry.trial.trial_id] = entry.trial
        self.view = replace(entry.sweep, trials=sorted(trials.values(), key=lambda t: (t.number, t.trial_id)))


_ACTIVE: dict[str, SweepJournal] = {}  # sweep id -> its journal, while its driver runs in this process


@contextlib.contextmanager
def journaling(sweep_id: str, folder: Path, writer: Writer, echo: Callable[[str], None]) -> Iterator[SweepJournal]:
    """While a sweep's driver runs: every tracker of this process that writes the sweep to the same
    store writes through its journal, and so through one tracker (`writer`), whose run ids are then
    the ones every write sees."""
    journal = _ACTIVE[sweep_id] = SweepJournal(Journal(folder), writer, echo)
    try:
        yield journal
    finally:
        _ACTIVE.pop(sweep_id, None)


def active_journal(sweep_id: str, tracking_uri: str) -> SweepJournal | None:
    journal = _ACTIVE.get(sweep_id)
    return journal if journal is not None and journal.writer.tracking_uri == tracking_uri else None


def journaling_to(tracking_uri: str) -> bool:
    """Whether a sweep of this process writes to this store through a journal."""
    return any(j.writer.tracking_uri == tracking_uri for j in _ACTIVE.values())


def view_while_down(sweep_id: str, tracking_uri: str) -> SweepRecord | None:
    """A copy of the driver's own view of its sweep where the store does not answer now, though
    nothing was journaled yet (it went down between two writes); None otherwise."""
    journal = active_journal(sweep_id, tracking_uri)
    if journal is None or journal.view is None or journal.writer.answers():
        return None
    return copy.deepcopy(journal.view)


def journaled_view(sweep_id: str, tracking_uri: str) -> SweepRecord | None:
    """A copy of the driver's own view of the sweep while its journal holds what the store lacks;
    None otherwise (the store has it all)."""
    journal = active_journal(sweep_id, tracking_uri)
    if journal is None or not journal.pending or journal.view is None:
        return None
    return copy.deepcopy(journal.view)
