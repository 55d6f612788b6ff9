"""A checkpoint never runs code, and a checkpoint.path the run cannot use is refused up front.

Every bad checkpoint.path goes through the real CLI (`elastune train`): exit 2, one line naming
checkpoint.path, and nothing built, run, written or left behind (no `<file>.tmp`, no folder).
"Nothing built" is observed by recording every call of the loop's `build_workload` (the call
still goes through): the refusal must come before the first one.
"""

from __future__ import annotations

import os
import pickle
import shlex
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from elastune.cli import main
from elastune.config import RunConfig
from elastune.errors import ConfigError
from elastune.training import loop
from elastune.training.loop import train

from tests.conftest import TINY

MakeCfg = Callable[..., RunConfig]


class RunsShell:
    """What an attacker plants: unpickling it runs a shell command (here: creates a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each workload the training loop builds (its model comes next), recorded as it goes through."""
    seen: list[str] = []
    real = loop.build_workload

    def recording(cfg: RunConfig) -> Any:
        seen.append(cfg.workload)
        return real(cfg)

    monkeypatch.setattr(loop, "build_workload", recording)
    yield seen


def run_train(*sets: str) -> int:
    args = ["train"]
    for item in [*TINY, "steps=2", *sets]:
        args += ["--set", item]
    return main(args)


def listing(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


# -- files that are not elastune checkpoints


@pytest.mark.parametrize("form", ["bare_pickle", "torch_archive"])
def test_a_pickle_that_runs_code_is_refused_unread(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], form: str
) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "run.ckpt"
    if form == "bare_pickle":
        evil.write_bytes(pickle.dumps(RunsShell(marker)))
    else:  # a torch.save archive shaped like a checkpoint, with the object inside
        torch.save(
            {"model": RunsShell(marker), "optimizers": {}, "scaler": {}, "loop": {}, "rng": 0, "config": {}}, evil
        )
    before = listing(tmp_path)

    code = run_train(f"checkpoint.path={evil}", "checkpoint.resume=true")

    assert code == 2
    assert not marker.exists()  # the command never ran
    assert builds == []  # refused before the model was built
    assert listing(tmp_path) == before  # the file as it was, no run.ckpt.tmp
    err = capsys.readouterr().err
    assert f"checkpoint.path='{evil}'" in err and "is not an elastune checkpoint" in err
    if form == "torch_archive":
        assert "posix.system" in err and "would run code" in err


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(lambda p: p.write_bytes(os.urandom(4096)), id="random_bytes"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty"),
        pytest.param(lambda p: p.write_text("seed: 1\n"), id="text"),
        pytest.param(lambda p: torch.save({"weights": torch.zeros(3)}, p), id="torch_without_keys"),
        pytest.param(lambda p: torch.save([torch.zeros(3)], p), id="torch_list"),
        pytest.param(
            lambda p: torch.save(
                {
                    "model": {},
                    "optimizers": {},
                    "scaler": {},
                    "loop": {"step": -1},
                    "rng": torch.zeros(2),
                    "config": {},
                },
                p,
            ),
            id="torch_bad_loop",
        ),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_refused(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], content: Callable[[Path], None]
) -> None:
    target = tmp_path / "run.ckpt"
    content(target)
    before = listing(tmp_path)

    assert run_train(f"checkpoint.path={target}", "checkpoint.resume=true") == 2

    assert builds == []
    assert listing(tmp_path) == before
    assert f"checkpoint.path='{target}'" in capsys.readouterr().err


def tamper_model(payload: dict[str, Any]) -> None:
    name = next(iter(payload["model"]))
    payload["model"][name] = torch.zeros(3, 3)  # a table of another shape


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(tamper_model, id="model_shape"),
        pytest.param(lambda p: p.update(rng=torch.zeros(5)), id="rng_dtype"),
        pytest.param(lambda p: p.update(scaler={"scale": "x"}), id="scaler"),
        pytest.param(lambda p: p.update(optimizers={"dense": {"state": {}, "param_groups": []}}), id="optimizer"),
        pytest.param(lambda p: p["loop"].update(extra=1), id="loop_key"),
    ],
)
def test_a_tampered_checkpoint_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper: Callable[[dict[str, Any]], None]
) -> None:
    # Plain data, but not what this run wrote: exit 2 (some only once the model shows they do not
    # fit it), and the file is left as it was, never overwritten by a fresh run.
    target = tmp_path / "run.ckpt"
    assert run_train(f"checkpoint.path={target}") == 0
    payload = torch.load(target, weights_only=True)
    tamper(payload)
    torch.save(payload, target)
    before = listing(tmp_path)

    assert run_train(f"checkpoint.path={target}", "checkpoint.resume=true") == 2

    assert listing(tmp_path) == before
    assert f"checkpoint.path='{target}'" in capsys.readouterr().err


def test_a_checkpoint_of_another_config_is_refused_before_the_build(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "run.ckpt"
    assert run_train(f"checkpoint.path={target}") == 0
    builds.clear()
    before = listing(tmp_path)

    assert run_train(f"checkpoint.path={target}", "checkpoint.resume=true", "seed=7") == 2

    assert builds == []
    assert listing(tmp_path) == before
    assert "was written by a run with different seed" in capsys.readouterr().err


def test_a_file_that_is_not_a_checkpoint_is_never_overwritten(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("not elastune's\n")

    assert run_train(f"checkpoint.path={precious}") == 2  # no resume: the run would only write it

    assert builds == []
    assert precious.read_text() == "not elastune's\n"
    assert not (tmp_path / "notes.txt.tmp").exists()
    assert "would overwrite it" in capsys.readouterr().err


# -- places a checkpoint cannot be written

# Resuming reads the file; every run writes it at its end, and every=N before.
WHEN = pytest.mark.parametrize(
    "when", [["checkpoint.resume=true"], ["checkpoint.every=1"], []], ids=["resume", "every", "end"]
)


@WHEN
def test_a_folder_is_refused(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], when: list[str]
) -> None:
    folder = tmp_path / "ckpts"
    folder.mkdir()
    (folder / "keep.txt").write_text("kept")
    before = listing(tmp_path)

    assert run_train(f"checkpoint.path={folder}", *when) == 2

    assert builds == []
    assert listing(tmp_path) == before  # no ckpts.tmp beside it
    err = capsys.readouterr().err
    assert f"checkpoint.path='{folder}': is a folder" in err and str(folder / "run.ckpt") in err


@WHEN
def test_a_special_file_is_refused(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], when: list[str]
) -> None:
    # A FIFO stands for every file that is not a regular one (/dev/null, a socket): as root, today's
    # code would replace it by the checkpoint.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    assert run_train(f"checkpoint.path={fifo}", *when) == 2

    assert builds == []
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]
    assert f"checkpoint.path='{fifo}': is not a regular file" in capsys.readouterr().err


@WHEN
def test_a_missing_folder_is_refused_not_created(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], when: list[str]
) -> None:
    target = tmp_path / "no" / "such" / "run.ckpt"

    assert run_train(f"checkpoint.path={target}", *when) == 2

    assert builds == []
    assert list(tmp_path.iterdir()) == []  # no folder made
    assert f"its folder '{target.parent}' does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
@WHEN
def test_an_unwritable_folder_is_refused(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], where: str, when: list[str]
) -> None:
    # Tests run as root, which chmod does not stop: a file used as a folder, and /proc, refuse writes to anyone.
    if where == "under_a_file":
        (tmp_path / "a_file").write_text("x")
        target = tmp_path / "a_file" / "run.ckpt"
    else:
        target = Path("/proc") / f"elastune-test-{os.getpid()}.ckpt"
    before = listing(tmp_path)

    assert run_train(f"checkpoint.path={target}", *when) == 2

    assert builds == []
    assert listing(tmp_path) == before
    assert not target.exists() and not target.with_name(target.name + ".tmp").exists()
    err = capsys.readouterr().err
    assert f"checkpoint.path='{target}'" in err
    assert ("is not a folder" in err) if where == "under_a_file" else ("cannot create a file in '/proc'" in err)


# -- real checkpoints still resume exactly, and only they do


ROUND_TRIPS = {
    "full+adam": ["embedding.strategy=full", "optimizer.sparse=adam", "optimizer.dense=adam"],
    "half+rowwise_adagrad": ["embedding.strategy=half", "optimizer.sparse=rowwise_adagrad"],
    "int8+sgd": ["embedding.strategy=int8", "optimizer.sparse=sgd", "optimizer.dense=sgd"],
    "cached+adagrad": ["embedding.strategy=cached", "optimizer.sparse=adagrad", "optimizer.dense=adagrad"],
    "fp16+grad_scaler": ["precision=fp16", "optimizer.sparse=rowwise_adagrad"],
}


def tensors(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a checkpoint payload, by its path (tensors and plain values)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in tensors(sub, f"{prefix}/{key}").items()}
    if isinstance(tree, list | tuple):
        return {k: v for i, sub in enumerate(tree) for k, v in tensors(sub, f"{prefix}/{i}").items()}
    return {prefix: tree}


@pytest.mark.parametrize("args", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_a_real_checkpoint_resumes_bit_exactly_and_a_planted_one_is_refused(
    tiny_cfg: MakeCfg, tmp_path: Path, args: list[str]
) -> None:
    straight, half_way, planted = tmp_path / "straight.ckpt", tmp_path / "half.ckpt", tmp_path / "planted.ckpt"
    marker = tmp_path / "pwned"
    train(tiny_cfg(*args, "steps=4", f"checkpoint.path={straight}"))
    train(tiny_cfg(*args, "steps=2", f"checkpoint.path={half_way}"))
    shutil.copy(half_way, tmp_path / "kept.ckpt")

    # The same checkpoint with one object planted in its optimizer state is refused, unrun.
    payload = torch.load(half_way, weights_only=True)
    payload["optimizers"]["dense"]["param_groups"][0]["planted"] = RunsShell(marker)
    torch.save(payload, planted)
    with pytest.raises(ConfigError, match=r"posix\.system"):
        train(tiny_cfg(*args, "steps=4", f"checkpoint.path={planted}", "checkpoint.resume=true"))
    assert not marker.exists()

    # The real one resumes to exactly the uninterrupted run: weights, optimizer and scaler state.
    result = train(tiny_cfg(*args, "steps=4", f"checkpoint.path={half_way}", "checkpoint.resume=true"))
    assert result.steps == 4
    assert not (tmp_path / "half.ckpt.tmp").exists()
    a, b = torch.load(straight, weights_only=True), torch.load(half_way, weights_only=True)
    assert a["loop"] == b["loop"] and a["scaler"] == b["scaler"]
    assert torch.equal(a["rng"], b["rng"])
    for part in ("model", "optimizers"):
        left, right = tensors(a[part]), tensors(b[part])
        assert left.keys() == right.keys()
        for key, value in left.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, right[key]), f"{part}{key} differs after resume"
            else:
                assert value == right[key], f"{part}{key}"
    # ...and the comparison has teeth: the half-way weights are not the finished ones.
    kept = torch.load(tmp_path / "kept.ckpt", weights_only=True)["model"]
    assert any(not torch.equal(kept[k], a["model"][k]) for k in kept)
