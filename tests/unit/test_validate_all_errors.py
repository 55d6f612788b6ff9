"""Every problem of a config at once: a refused value does not hide a problem that pydantic checks
only once fields are valid (a section's rule, the run's rule) or that the components check only on
a valid config (the fbgemm backend's bf16 rule), and a default standing in for a refused value is
never blamed for anything.

Through the CLI's own validation of a YAML file (`elastune config show --check FILE`), as a user meets it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from elastune.cli import main
from elastune.embeddings.fbgemm import fbgemm_import_error
from elastune.validate import config_problems


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, object]) -> list[str]:
    """The problem lines `elastune config show --check` prints for `config` (written as a YAML file)."""
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(config))
    assert main(["config", "show", "--check", str(run)]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    head = re.search(r"invalid config \(.*run\.yaml\): (\d+) problem\(s\)", said.err)
    assert head is not None, said.err
    lines = [line.strip()[2:] for line in said.err.splitlines() if line.strip().startswith("- ")]
    assert int(head.group(1)) == len(lines), said.err
    return lines


def test_a_bad_value_a_sections_rule_and_the_runs_rule_are_said_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """embedding.dtype=bf17 kept the embedding section's rule and the run's rule from running:
    each of the three used to show only once the one before it was fixed."""
    lines = refused(
        tmp_path,
        capsys,
        {
            "steps": 100,
            "warmup_steps": 500,
            "embedding": {"strategy": "half", "dtype": "bf17", "cache_rows": 5, "cache_ratio": 0.5},
            "optimizer": {"sparse": "rowwise_adagrad"},  # half updates its own rows: no fourth problem
        },
    )
    assert len(lines) == 3, lines
    assert lines[0].startswith("embedding.dtype='bf17': must be one of 'fp16' or 'bf16'")
    assert any("embedding.cache_rows or embedding.cache_ratio, not both" in line for line in lines[1:]), lines
    assert any("warmup_steps=500 must be below steps=100" in line for line in lines[1:]), lines


def test_a_bad_field_hides_neither_the_runs_rule_nor_the_fbgemm_bf16_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """batch.micro=0 (a field), warmup_steps over steps (the run's rule) and a half table stored
    in bf16 on the fbgemm backend (a component's rule, asked only of a valid config)."""
    lines = refused(
        tmp_path,
        capsys,
        {
            "batch": {"micro": 0},
            "steps": 100,
            "warmup_steps": 500,
            "embedding": {"backend": "fbgemm", "strategy": "half", "dtype": "bf16"},
            "optimizer": {"sparse": "rowwise_adagrad"},
        },
    )
    assert len(lines) == 3, lines
    assert lines[0] == "batch.micro=0: must be ≥ 1"
    assert any("warmup_steps=500 must be below steps=100" in line for line in lines), lines
    backend = [line for line in lines if line.startswith("embedding.backend='fbgemm'")]
    assert len(backend) == 1, lines
    if fbgemm_import_error() is None:  # else the line says fbgemm is not installed: the same field, found
        assert "not embedding.dtype='bf16'" in backend[0], backend


def test_a_default_standing_in_for_a_refused_value_is_never_blamed() -> None:
    """steps='many' is refused; the run's rule would compare warmup_steps=400 with the default 300
    standing in for it, a problem of a value the user did not give: not said."""
    cfg, problems = config_problems({"steps": "many", "warmup_steps": 400})
    assert cfg is None
    assert [p.path for p in problems] == ["steps"], problems
    # the same rule, with values the user gave, is said
    _, problems = config_problems({"steps": 300, "warmup_steps": 400})
    assert [p.message for p in problems] == [
        "warmup_steps=400 must be below steps=300, or no step is measured; lower warmup_steps or raise steps"
    ]


def test_a_refused_value_inside_a_list_and_a_missing_key_are_set_aside_whole() -> None:
    """A bad table size (an item of data.table_rows) and an override without its `match` (a key the
    value lacks): each is said, and the rest of the config still checked (warmup_steps)."""
    raw = {
        "data": {"table_rows": [100, 1]},
        "embedding": {"overrides": [{"strategy": "int8"}]},
        "steps": 10,
        "warmup_steps": 10,
    }
    cfg, problems = config_problems(raw)
    assert cfg is None
    paths = [p.path for p in problems]
    assert "data.table_rows.1" in paths and "embedding.overrides.0.match" in paths, problems
    assert any("warmup_steps=10 must be below steps=10" in p.message for p in problems), problems


def test_a_valid_config_still_validates() -> None:
    cfg, problems = config_problems({"batch": {"micro": 64}})
    assert problems == [] and cfg is not None and cfg.batch.micro == 64
