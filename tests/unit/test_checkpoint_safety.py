"""A checkpoint never runs code, and a checkpoint.path the run cannot use is refused up front.

Every bad checkpoint.path goes through the real CLI (`elastune train`): exit 2, one line naming
checkpoint.path, and nothing built, run, written or left behind (no temporary file, no folder).
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
    """Every entry under `folder` with its bytes (None for a folder, a link's target for a symlink)."""
    return {
        str(p.relative_to(folder)): (
            f"-> {os.readlink(p)}".encode() if p.is_symlink() else p.read_bytes() if p.is_file() else None
        )
        for p in sorted(folder.rglob("*"))
    }


def leftovers(folder: Path) -> list[str]:
    """Temporary files a checkpoint write left in `folder` (atomic_write's: `<name>.<random>.tmp`)."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


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


# -- a real checkpoint's numbers, tampered with: bounded like the config

# The config every run below trains and resumes with (run_train: TINY, steps=2): micro 64, accum 1.
EFFECTIVE = 64


@pytest.fixture(scope="module")
def real_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A checkpoint written by a real 2-step run of each precision asked for, trained once per module."""
    made: dict[str, Path] = {}

    def real(precision: str) -> Path:
        if precision not in made:
            made[precision] = tmp_path_factory.mktemp(precision) / "run.ckpt"
            assert run_train(f"checkpoint.path={made[precision]}", f"precision={precision}") == 0
        return made[precision]

    return real


def set_in(*keys: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    """A tamper that sets payload[keys[0]][keys[1]]... to `value`."""

    def tamper(payload: dict[str, Any]) -> None:
        inner = payload
        for key in keys[:-1]:
            inner = inner[key]
        inner[keys[-1]] = value

    return tamper


def nan_in_a_weight(payload: dict[str, Any]) -> None:
    weight = payload["model"]["top.0.weight"]
    assert weight.dtype == torch.float32 and torch.isfinite(weight).all()  # real, finite weights before
    weight[0, 0] = float("nan")


def inf_in_adam_state(payload: dict[str, Any]) -> None:
    payload["optimizers"]["dense"]["state"][0]["exp_avg_sq"][-1] = float("inf")


def nan_under_a_shared_list(payload: dict[str, Any]) -> None:
    # 64 levels of [x, x]: a small file (pickle shares x), 2^64 paths to the NaN for a naive walk.
    nested: list[Any] = [float("nan")]
    for _ in range(64):
        nested = [nested, nested]
    payload["optimizers"]["dense"]["param_groups"][0]["planted"] = nested


# (tamper, what the error says after "checkpoint.path='FILE': ", refused before the model is built)
BOUNDS = {
    "nan_weight": (nan_in_a_weight, "model.top.0.weight hold NaN or inf", False),
    "inf_adam_state": (inf_in_adam_state, "optimizers.dense.state.0.exp_avg_sq hold NaN or inf", False),
    "nan_lr": (set_in("optimizers", "dense", "param_groups", 0, "lr", value=float("nan")), "lr=nan hold NaN", False),
    "nan_shared": (nan_under_a_shared_list, "optimizers.dense.param_groups.0.planted.1.1.", False),
    "micro_2^40": (
        set_in("loop", "micro", value=2**40),
        f"loop.micro=1099511627776 x loop.accum=1 is not this config's effective batch {EFFECTIVE}",
        True,
    ),
    "accum_2^40": (
        set_in("loop", "accum", value=2**40),
        f"loop.micro=64 x loop.accum=1099511627776 is not this config's effective batch {EFFECTIVE}",
        True,
    ),
    "step_2^62": (set_in("loop", "step", value=2**62), "loop.step=4611686018427387904 is beyond steps=2", True),
    "step_negative": (set_in("loop", "step", value=-1), "loop.step=-1 is below 0", True),
    "step_past_the_run": (
        lambda p: p["loop"].update(step=5, samples=5 * EFFECTIVE),
        "loop.step=5 is beyond steps=2; raise steps to at least 5",
        True,
    ),
    "micro_bool": (set_in("loop", "micro", value=True), "loop.micro=True is a bool, not an int", True),
    "step_float": (set_in("loop", "step", value=2.0), "loop.step=2.0 is a float, not an int", True),
    "step_tensor": (set_in("loop", "step", value=torch.tensor(2)), "loop.step=tensor(2) is a Tensor, not an int", True),
    "samples": (set_in("loop", "samples", value=10**9), "loop.samples=1000000000 is not loop.step=2 x", True),
    "oom_retries_2^62": (set_in("loop", "oom_retries", value=2**62), "loop.oom_retries=4611686018427387904", True),
    "huge_int": (set_in("loop", "samples", value=2**200), "loop.samples=<a 201-bit number>", True),
    "adam_step_negative": (
        set_in("optimizers", "dense", "state", 0, "step", value=torch.tensor(-1.0)),
        "optimizers.dense.state.0.step=-1.0 is not a count of steps from 0 to loop.step=2",
        True,
    ),
    "adam_step_2^40": (
        set_in("optimizers", "dense", "state", 0, "step", value=torch.tensor(2.0**40)),
        "optimizers.dense.state.0.step=1099511627776.0 is not a count of steps",
        True,
    ),
    "rng_short": (lambda p: p.update(rng=p["rng"][:100].clone()), "malformed rng", True),
}


@pytest.mark.parametrize(("tamper", "said", "before_build"), BOUNDS.values(), ids=BOUNDS.keys())
def test_a_checkpoint_out_of_the_configs_bounds_is_refused_and_kept(
    tmp_path: Path,
    builds: list[str],
    capsys: pytest.CaptureFixture[str],
    real_checkpoints: Callable[[str], Path],
    tamper: Callable[[dict[str, Any]], None],
    said: str,
    before_build: bool,
) -> None:
    # A real checkpoint of this very config, one number changed (weights_only-loadable data): exit 2
    # naming the field and its value, nothing trained, and the file kept byte for byte (no fresh run
    # overwrites it). Today's code trains on (NaN, a step past the run: exit 0 at 0 samples/s) or
    # crashes mid-run (micro x accum = 2^40).
    target = tmp_path / "run.ckpt"
    payload = torch.load(real_checkpoints("fp32"), weights_only=True)
    assert payload["loop"] == {"step": 2, "samples": 2 * EFFECTIVE, "micro": 64, "accum": 1, "oom_retries": 0}
    tamper(payload)
    torch.save(payload, target)
    before = listing(tmp_path)

    code = run_train(f"checkpoint.path={target}", "checkpoint.resume=true")

    err = capsys.readouterr().err
    assert code == 2, err
    assert f"checkpoint.path='{target}': " in err and said in err, err
    assert "Traceback" not in err
    if said != "malformed rng":
        assert "delete the file or set checkpoint.resume=false" in err  # the fix
    assert listing(tmp_path) == before
    if before_build:
        assert builds == []


def test_a_checkpoint_split_finer_than_the_config_is_refused(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str], real_checkpoints: Callable[[str], Path]
) -> None:
    # The same effective batch (64) split as 32 x 2 now: the checkpoint's micro-batch 64 is one the run
    # never trains at (it only halves batch.micro), so it is refused rather than silently used.
    target = tmp_path / "run.ckpt"
    shutil.copy(real_checkpoints("fp32"), target)
    before = listing(tmp_path)

    code = run_train(f"checkpoint.path={target}", "checkpoint.resume=true", "batch.micro=32", "batch.accum=2")

    assert code == 2
    assert "loop.micro=64 is above batch.micro=32" in capsys.readouterr().err
    assert listing(tmp_path) == before and builds == []


SCALER = {
    "scale_0": (set_in("scaler", "scale", value=0.0), "scaler.scale=0.0 is not above 0"),
    "tracker_float": (set_in("scaler", "_growth_tracker", value=2.5), "scaler._growth_tracker=2.5 is not an int"),
    "interval": (set_in("scaler", "growth_interval", value=1), "scaler.growth_interval=1 is not this run's 2000"),
    "scale_inf": (set_in("scaler", "scale", value=float("inf")), "malformed scaler"),
}


@pytest.mark.parametrize(("tamper", "said"), SCALER.values(), ids=SCALER.keys())
def test_an_fp16_checkpoints_scaler_out_of_bounds_is_refused_and_kept(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    real_checkpoints: Callable[[str], Path],
    tamper: Callable[[dict[str, Any]], None],
    said: str,
) -> None:
    target = tmp_path / "run.ckpt"
    payload = torch.load(real_checkpoints("fp16"), weights_only=True)
    assert payload["scaler"]["growth_interval"] == 2000 and payload["scaler"]["scale"] > 0
    tamper(payload)
    torch.save(payload, target)
    before = listing(tmp_path)

    code = run_train(f"checkpoint.path={target}", "checkpoint.resume=true", "precision=fp16")

    err = capsys.readouterr().err
    assert code == 2, err
    assert f"checkpoint.path='{target}': " in err and said in err, err
    assert listing(tmp_path) == before


def test_a_file_that_is_not_a_checkpoint_is_never_overwritten(
    tmp_path: Path, builds: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("not elastune's\n")

    assert run_train(f"checkpoint.path={precious}") == 2  # no resume: the run would only write it

    assert builds == []
    assert precious.read_text() == "not elastune's\n"
    assert leftovers(tmp_path) == []
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


LINKED = {
    "dangling": lambda elsewhere: elsewhere / "missing.ckpt",
    "empty_file": lambda elsewhere: (elsewhere / "empty").touch() or elsewhere / "empty",
    "a_checkpoint": lambda elsewhere: elsewhere / "real.ckpt",
}


@pytest.mark.parametrize("points_at", LINKED.values(), ids=LINKED.keys())
@WHEN
def test_a_symlink_is_refused_and_nothing_is_written_through_or_over_it(
    tmp_path: Path,
    builds: list[str],
    capsys: pytest.CaptureFixture[str],
    real_checkpoints: Callable[[str], Path],
    points_at: Callable[[Path], Path],
    when: list[str],
) -> None:
    # A link planted at checkpoint.path (in a shared folder) could point anywhere: today's run
    # follows it to resume, and its final rename replaces the link with a regular file.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(real_checkpoints("fp32"), elsewhere / "real.ckpt")
    link = tmp_path / "run.ckpt"
    link.symlink_to(points_at(elsewhere))
    before = listing(tmp_path)

    assert run_train(f"checkpoint.path={link}", *when) == 2

    assert builds == []
    assert listing(tmp_path) == before and link.is_symlink()
    assert f"checkpoint.path='{link}': is a symbolic link" in capsys.readouterr().err


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
    assert not target.exists() and not list(target.parent.glob(f"{target.name}*.tmp"))
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
    assert leftovers(tmp_path) == []
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
