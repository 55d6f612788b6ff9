"""docs/config.md is what `python -m elastune.config_reference` writes from the models now: a field
added, renamed or re-described in the code fails here until the page is generated again."""

from __future__ import annotations

from pathlib import Path

from elastune.config_reference import main, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "config.md"


def test_the_config_reference_is_current() -> None:
    assert PAGE.read_text() == render(), "docs/config.md is behind the models: run python -m elastune.config_reference"


def test_every_key_of_the_run_config_and_the_sweep_spec_is_on_the_page() -> None:
    from elastune.config import RunConfig
    from elastune.dotted import flatten
    from elastune.tuning.spec import SweepSpec

    text = render()
    run_keys = flatten(RunConfig().model_dump(by_alias=True, exclude={"workload_options"}))
    spec = SweepSpec.model_validate({"parameters": {"seed": {"type": "choice", "values": [0]}}})
    spec_keys = flatten(spec.model_dump(exclude={"parameters", "base"}))
    missing = [key for key in [*run_keys, *spec_keys] if f"| `{key}` |" not in text]
    assert missing == []


def test_check_fails_on_a_page_that_is_behind(tmp_path: Path) -> None:
    page = tmp_path / "config.md"
    page.write_text(render().replace("| `batch.micro` |", "| `batch.size` |"))
    assert main([str(page), "--check"]) == 1
    assert main([str(page)]) == 0 and main([str(page), "--check"]) == 0  # written again, current
