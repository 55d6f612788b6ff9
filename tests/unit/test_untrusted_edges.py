"""Edges of what a remote client may send (elastune/untrusted.py) that the UI's own tests reach only
through the API: a workload that is not a name, and a job id that would climb out of the jobs folder;
then each check's exact output for the cases bench/mutation.py found no fast test held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from elastune import yamlsafe
from elastune.config import RunConfig
from elastune.errors import ConfigError, Problem
from elastune.untrusted import (
    CLIENT_KEYS,
    client_checkpoint,
    limit_problems,
    override_problems,
    parse_client_overrides,
    read_stored_config,
    stored_config_problems,
)


@pytest.mark.parametrize("value", ["3", "[dlrm]", "{a: 1}", "true"])
def test_a_workload_that_is_not_a_name_is_refused(value: str) -> None:
    (problem,) = override_problems([f"workload={value}"])
    assert problem.path == "sets.workload"
    (stored,) = [p for p in stored_config_problems({"workload": 3}) if p.path == "from_sweep.workload"]
    assert stored.value == 3


@pytest.mark.parametrize("job_id", ["..", ".", "../../etc", "a/../../b", "/abs", "..\\x", ""])
def test_a_job_id_never_names_a_folder_outside_the_jobs_folder(
    job_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path))
    path = client_checkpoint(job_id)
    jobs = (tmp_path / "jobs").resolve()
    assert path.parent.resolve().parent == jobs and path.name == "checkpoint.pt"
    assert path.parent.name not in {"", ".", ".."} and "/" not in path.parent.name


# -- every check with its exact output, worked out by hand from the rules in untrusted.py's
# docstrings (bench/mutation.py found most of the module reached only by the UI's slow tests)

FIX = (
    "cannot be set from the UI or another remote client; "
    "a remote client may set only these run-config keys (none names a file): "
)
OPEN_DATA = (
    "data.loader_workers, data.pin_memory, data.pooling, data.prefetch, data.rows_scale, data.seed, data.zipf_alpha"
)
OPEN_OPTIONS = (
    "workload_options.activation_checkpointing, workload_options.bottom_mlp, workload_options.bucket_by_length, "
    "workload_options.checkpoint_every, workload_options.context, workload_options.heads, workload_options.layers, "
    "workload_options.mean_length, workload_options.padding, workload_options.tie_embeddings, "
    "workload_options.top_mlp, workload_options.vocab"
)
DLRM_OPTIONS = "not an option a remote client may set for workload 'dlrm'; open: bottom_mlp, top_mlp"
LM_OPTIONS = (
    "not an option a remote client may set for workload 'lm'; open: activation_checkpointing, bucket_by_length, "
    "checkpoint_every, context, heads, layers, mean_length, padding, tie_embeddings, vocab"
)
IMPORT = (
    "a remote client may name an installed workload (a built-in or an elastune.workloads plugin), not an import "
    "path MODULE:FACTORY; launch that one from the command line"
)
STORED = (
    "the stored config sets a key a remote client may not (it names a file, or is unknown); train it from the "
    "command line after checking it, or pick another sweep"
)


def no_options(workload: str) -> str:
    return (
        f"workload {workload!r} has no options a remote client may set (a workload's option could name a file); "
        "launch it from the command line"
    )


def test_open_keys_pass_and_closed_ones_are_named_with_their_open_neighbours() -> None:
    assert override_problems(["batch.micro=8", "seed=3", "batch={micro: 8, accum: 2}"]) == []
    # A closed key: the hint lists the open keys of its section; a section with none, every open key.
    assert override_problems(["data.path=/etc/passwd", "checkpoint.path=/tmp/x"], field="overrides") == [
        Problem("overrides.data.path", "/etc/passwd", FIX + OPEN_DATA),
        Problem("overrides.checkpoint.path", "/tmp/x", FIX + ", ".join(sorted(CLIENT_KEYS))),
    ]
    # A whole section is checked key by key: the closed key inside it is found.
    assert override_problems(["data={seed: 1, path: /x}"]) == [Problem("sets.data.path", "/x", FIX + OPEN_DATA)]
    # workload_options has no keys of its own: as a value it is closed, its hint the open options;
    # so is an option's sub-key (its section is its key's first part, not the option).
    assert override_problems(["workload_options=3", "workload_options.extra={a: 1}"]) == [
        Problem("sets.workload_options", 3, FIX + OPEN_OPTIONS),
        Problem("sets.workload_options.extra.a", 1, FIX + OPEN_OPTIONS),
    ]


def test_malformed_pairs_are_left_to_parse_client_overrides_and_the_rest_still_checked() -> None:
    closed = Problem("sets.checkpoint.path", "x", FIX + ", ".join(sorted(CLIENT_KEYS)))
    assert override_problems(["novalue", "=3", "nonsense.key=1", "checkpoint.path=x"]) == [closed]
    # A value yamlsafe refuses (an anchor) is not read, so not judged here; parse_client_overrides says why.
    assert override_problems(["checkpoint.path=&a x"]) == []
    assert parse_client_overrides(["checkpoint.path=&a x"], field="overrides") == (
        {},
        [
            Problem(
                "overrides.checkpoint.path",
                "&a x",
                "defines an anchor (&a); anchors are not accepted: write the value out",
            )
        ],
    )
    (problem,) = parse_client_overrides(["novalue"])[1]
    assert (problem.path, problem.message) == ("sets.novalue", "overrides look like key=value, e.g. batch.micro=2048")
    assert parse_client_overrides(["batch.micro=8", "seed=2"]) == ({"batch": {"micro": 8}, "seed": 2}, [])


def test_a_workload_is_a_name_never_an_import_path() -> None:
    assert override_problems(["workload=dlrm", "workload=lm"]) == []
    assert override_problems(["workload=pkg.mod:make", "workload={a: 1}"]) == [
        Problem("sets.workload", "pkg.mod:make", IMPORT),
        Problem("sets.workload", 1, IMPORT),  # workload.a: a key under it is not a name either
    ]
    # Its options are not judged against an import path (the path itself is refused).
    assert override_problems(["workload=a:b", "workload_options.layers=2"]) == [Problem("sets.workload", "a:b", IMPORT)]


def test_options_are_open_only_for_their_own_built_in_workload() -> None:
    assert override_problems(["workload=dlrm", "workload_options.bottom_mlp=[8]"]) == []
    # The options may come before the workload, in pairs of their own.
    assert override_problems(["workload_options.vocab=10", "workload=dlrm"]) == [
        Problem("sets.workload_options.vocab", 10, DLRM_OPTIONS)  # lm's, open, but not for dlrm
    ]
    assert override_problems(["workload=mine", "workload_options.layers=2"]) == [
        Problem("sets.workload_options.layers", 2, no_options("mine"))
    ]
    # An option no workload opens is refused once, by the allowlist, not again as an option.
    assert override_problems(["workload=lm", "workload_options.data_path=/x"]) == [
        Problem("sets.workload_options.data_path", "/x", FIX + OPEN_OPTIONS)
    ]
    # Without a workload named here, the options wait for the whole run's check (limit_problems).
    assert override_problems(["workload_options.vocab=10"]) == []


def test_limit_problems_holds_a_client_run_to_its_limits_and_its_workloads_options() -> None:
    at = RunConfig.model_validate({"steps": 100_000, "eval": {"samples": 1 << 20, "batch": 1 << 16}})
    assert limit_problems(at) == []
    over = RunConfig.model_validate(
        {
            "workload_options": {"vocab": 5, "extra": {"a": 1}},
            "steps": 100_001,
            "eval": {"samples": (1 << 20) + 1, "batch": (1 << 16) + 1},
        }
    )
    tail = " for a run launched from the UI or another remote client; run a bigger one from the command line"
    assert limit_problems(over) == [
        Problem("workload_options.vocab", 5, DLRM_OPTIONS),
        Problem("workload_options.extra.a", 1, DLRM_OPTIONS),
        Problem("steps", 100_001, "must be ≤ 100,000" + tail),
        Problem("eval.samples", 1_048_577, "must be ≤ 1,048,576" + tail),
        Problem("eval.batch", 65_537, "must be ≤ 65,536" + tail),
    ]
    lm = RunConfig.model_validate({"workload": "lm", "workload_options": {"layers": 2, "data_path": "/x"}})
    assert limit_problems(lm) == [Problem("workload_options.data_path", "/x", LM_OPTIONS)]
    plugin = RunConfig.model_validate({"workload": "mine", "workload_options": {"layers": 2}})
    assert limit_problems(plugin) == [Problem("workload_options.layers", 2, no_options("mine"))]


def test_a_stored_config_may_set_closed_keys_only_to_their_defaults() -> None:
    assert stored_config_problems(RunConfig().to_dict()) == []  # a full dump: closed keys at their defaults
    assert stored_config_problems({"seed": 7, "checkpoint": {"path": None}}) == []  # open; closed at default
    assert stored_config_problems({"checkpoint": {"path": "/x"}, "bogus": 1}, field="config") == [
        Problem("config.checkpoint.path", "/x", STORED),
        Problem("config.bogus", 1, STORED),  # unknown: no default to keep
    ]
    moved = "moved to workload_options.bottom_mlp (workload dlrm); set it there; pick a sweep run since"
    assert stored_config_problems({"model": {"bottom_mlp": [8]}}) == [
        Problem("from_sweep.model.bottom_mlp", [8], moved)
    ]


def test_a_stored_config_names_an_installed_workload_and_only_its_open_options() -> None:
    # An import path is refused, the keys after it still checked, its options not (no workload to hold them to).
    assert stored_config_problems({"workload": "a:b", "workload_options": {"x": 1}, "checkpoint": {"path": "/x"}}) == [
        Problem("from_sweep.workload", "a:b", IMPORT),
        Problem("from_sweep.checkpoint.path", "/x", STORED),
    ]
    assert stored_config_problems({"workload": {"a": 1}}) == [Problem("from_sweep.workload", 1, IMPORT)]
    assert stored_config_problems({"workload": "lm", "workload_options": {"layers": 2, "data_path": "/x"}}) == [
        Problem("from_sweep.workload_options.data_path", "/x", LM_OPTIONS)
    ]
    # No workload stored: the default's (dlrm) options are the open ones.
    assert stored_config_problems({"workload_options": {"vocab": 5}}) == [
        Problem("from_sweep.workload_options.vocab", 5, DLRM_OPTIONS)
    ]


def test_read_stored_config_reads_a_plain_mapping(tmp_path: Path) -> None:
    path = tmp_path / "best_config.yaml"
    path.write_text("batch:\n  micro: 8\nseed: 3\n")
    assert read_stored_config(path) == {"batch": {"micro": 8}, "seed": 3}
    path.write_text("")
    assert read_stored_config(path) == {}  # an empty file: nothing set
    most = yamlsafe.STORED_CONFIG.max_chars
    path.write_text("#" * most)  # a comment of exactly the most characters read: nothing set
    assert read_stored_config(path) == {}


def _refused(path: Path, field: str | None = None) -> Problem:
    with pytest.raises(ConfigError) as info:
        read_stored_config(path) if field is None else read_stored_config(path, field)
    (problem,) = info.value.problems
    assert (problem.path, problem.value) == (field or "config", str(path))
    return problem


def test_read_stored_config_refuses_what_is_not_a_plain_mapping(tmp_path: Path) -> None:
    path = tmp_path / "best_config.yaml"
    missing = tmp_path / "missing.yaml"
    assert _refused(missing, "from_sweep").message == (
        f"cannot be read ([Errno 2] No such file or directory: '{missing}'); give a readable YAML file"
    )
    path.write_bytes(b"\xff: 1\n")
    assert _refused(path).message == (
        "cannot be read ('utf-8' codec can't decode byte 0xff in position 0: invalid start byte); "
        "give a readable YAML file"
    )
    path.write_text("#" * (yamlsafe.STORED_CONFIG.max_chars + 1))
    assert _refused(path).message == (
        "is longer than 262,144 characters, more than a run config; a client's run reads plain YAML only"
    )
    path.write_text("a: &x 1\nb: *x\n")
    assert _refused(path).message == (
        "defines an anchor (&x); anchors are not accepted: write the value out; a client's run reads plain YAML only"
    )
    path.write_text("a: [1\n")
    message = _refused(path).message
    assert message.startswith("is not valid YAML (") and message.endswith("); fix the syntax")
    path.write_text("- a\n- b\n")
    assert _refused(path).message == "must be a YAML mapping of keys to values"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_read_stored_config_reads_no_more_than_its_limit_of_an_endless_file() -> None:
    # A planted "file" that never ends (a device, a pipe): refused after max_chars + 1 characters.
    assert _refused(Path("/dev/zero")).message == (
        "is longer than 262,144 characters, more than a run config; a client's run reads plain YAML only"
    )


def test_a_stored_config_is_read_as_utf8_whatever_the_locale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "best_config.yaml"
    path.write_text("description: café\n", encoding="utf-8")
    real_open = Path.open

    def latin1_by_default(
        self: Path, mode: str = "r", buffering: int = -1, encoding: str | None = None, **kw: Any
    ) -> Any:
        return real_open(self, mode, buffering, encoding or "latin-1", **kw)

    # A machine whose locale encoding is Latin-1: read without saying UTF-8, "é" would be "Ã©".
    monkeypatch.setattr(Path, "open", latin1_by_default)
    assert read_stored_config(path) == {"description": "café"}


def test_a_job_id_keeps_its_safe_characters_and_a_bounded_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path))
    jobs = tmp_path / "jobs"
    assert client_checkpoint("Xjob-1_2.é") == jobs / "Xjob-1_2.é" / "checkpoint.pt"  # letters of any script
    assert client_checkpoint("a/b c:d") == jobs / "a_b_c_d" / "checkpoint.pt"
    assert client_checkpoint("..x..") == jobs / "x" / "checkpoint.pt"
    assert client_checkpoint("...") == jobs / "job" / "checkpoint.pt"
    assert client_checkpoint("a" * 200) == jobs / ("a" * 128) / "checkpoint.pt"
    assert client_checkpoint("..x..").parent.is_dir()  # made, and asking again is fine
