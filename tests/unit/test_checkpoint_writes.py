"""A checkpoint write opens no name it did not create, and leaves nothing behind when it fails.

Checkpoint folders may be shared: whoever can write there can plant a symlink, or already has a
file, at any name a run would write through. A run writes each file (the checkpoint and the data
artifact beside it) to a fresh private file of its own (mode 0600, created exclusively with a
random name) and renames it over the target. What a write sees while it runs is observed from
inside it: the payload holds an object whose pickling (torch.save calls its __reduce__) lists the
folder, or raises.
"""

from __future__ import annotations

import collections
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from elastune.config import RunConfig
from elastune.training.checkpoint import LoopState, save_checkpoint
from elastune.training.optim import Optimizers
from torch import nn

from tests.unit.test_checkpoint_safety import leftovers, listing, run_train

MakeCfg = Callable[..., RunConfig]


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    """The common umask: a file opened the ordinary way would be 0644, readable by everyone."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def is_checkpoint(path: Path) -> bool:
    payload = torch.load(path, weights_only=True)
    return sorted(payload) == ["config", "loop", "model", "optimizers", "rng", "scaler"]


# -- names someone else put where the old write went first (`<path>.tmp`)


def test_a_symlink_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    # Today's write opens `run.ckpt.tmp` by name: it follows the link, overwrites the victim with
    # the checkpoint, then renames the link itself over run.ckpt.
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    planted = tmp_path / "run.ckpt.tmp"
    planted.symlink_to(victim)
    target = tmp_path / "run.ckpt"

    assert run_train(f"checkpoint.path={target}") == 0

    assert victim.read_text() == "someone else's file\n"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    assert not target.is_symlink() and is_checkpoint(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "run.ckpt.tmp", "victim.txt"]


def test_a_users_own_file_at_the_temporary_name_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "run.ckpt.tmp"
    mine.write_text("my notes\n")
    target = tmp_path / "run.ckpt"

    assert run_train(f"checkpoint.path={target}", "checkpoint.every=1") == 0  # three writes: steps 1, 2, end

    assert mine.read_text() == "my notes\n"
    assert is_checkpoint(target) and leftovers(tmp_path) == ["run.ckpt.tmp"]


def test_the_checkpoint_is_private_to_its_owner(tmp_path: Path) -> None:
    # 0600 whatever the umask: the weights (and a vocabulary, the data's own values) are the user's.
    target = tmp_path / "run.ckpt"

    assert run_train(f"checkpoint.path={target}") == 0

    assert mode(target) == 0o600


def test_the_vocabulary_beside_the_checkpoint_is_written_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    data = tmp_path / "d.csv"
    data.write_text("y,x1,city\n" + "".join(f"{i % 2},{i % 7},c{i % 5}\n" for i in range(300)))
    folder = tmp_path / "ckpts"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    (folder / "run.ckpt.vocab.json.tmp").symlink_to(victim)
    target = folder / "run.ckpt"

    code = run_train(
        f"checkpoint.path={target}",
        "data.source=table",
        f"data.path={data}",
        "data.schema={label: y, dense: [x1], categorical: [city]}",
        "eval.samples=256",
    )

    assert code == 0
    assert victim.read_text() == "someone else's file\n"
    vocabulary = folder / "run.ckpt.vocab.json"
    assert not vocabulary.is_symlink() and '"c0"' in vocabulary.read_text()
    assert mode(vocabulary) == 0o600 and mode(target) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["run.ckpt", "run.ckpt.vocab.json", "run.ckpt.vocab.json.tmp"]


# -- what a write looks like while it runs, and after it fails


class Spy:
    """Put in a payload: when torch.save pickles it, `look` runs (the write is under way)."""

    def __init__(self, look: Callable[[], None]) -> None:
        self.look = look

    def __reduce__(self) -> tuple[Any, ...]:
        self.look()
        return (collections.OrderedDict, ())  # loads back under weights_only=True as an empty dict


def save(tmp_path: Path, tiny_cfg: MakeCfg, spy: Spy) -> Path:
    """save_checkpoint of a small real model, with `spy` in the config it records."""
    target = tmp_path / "run.ckpt"
    cfg = tiny_cfg()
    model = nn.Linear(3, 1)
    save_checkpoint(
        target,
        model=model,
        opts=Optimizers(model, cfg.optimizer),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        state=LoopState(),
        config={**cfg.to_dict(), "spy": spy},
    )
    return target


def test_the_file_being_written_is_new_and_private(tmp_path: Path, tiny_cfg: MakeCfg) -> None:
    notes = tmp_path / "run.ckpt.tmp"
    notes.write_text("my notes\n")
    seen: dict[str, int] = {}
    notes_then: list[str] = []

    def look() -> None:
        seen.update({p.name: mode(p) for p in tmp_path.iterdir()})
        notes_then.append(notes.read_text())

    target = save(tmp_path, tiny_cfg, Spy(look))

    assert notes_then == ["my notes\n"]
    assert seen.pop("run.ckpt.tmp") == 0o644  # the user's file, as umask 022 made it
    (name, written), *others = seen.items()
    assert others == [] and name.startswith("run.ckpt.") and name.endswith(".tmp")
    assert written == 0o600  # while half written, only its owner can read it
    assert is_checkpoint(target) and mode(target) == 0o600
    assert not (tmp_path / name).exists()  # renamed onto the target


@pytest.mark.parametrize(
    "failure", [OSError(28, "No space left on device"), KeyboardInterrupt()], ids=["disk_full", "interrupted"]
)
def test_a_failed_write_leaves_the_folder_as_it_was(tmp_path: Path, tiny_cfg: MakeCfg, failure: BaseException) -> None:
    (tmp_path / "run.ckpt.tmp").write_text("my notes\n")
    (tmp_path / "run.ckpt").write_bytes(b"the previous checkpoint")
    before = listing(tmp_path)

    def fail() -> None:
        raise failure

    with pytest.raises(type(failure)):
        save(tmp_path, tiny_cfg, Spy(fail))

    assert listing(tmp_path) == before  # the old checkpoint, the user's file, and no temporary
