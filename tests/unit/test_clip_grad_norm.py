"""`optimizer.clip_grad_norm`: off by default; when set, the dense parameters' gradient norm is at
most the bound when the optimizer steps (fp16's loss scale taken off first); a sweep may fix it in
its base but never search it (it changes quality, not speed)."""

from __future__ import annotations

import json

import pytest
import torch
from elastune.cli import main
from elastune.errors import ConfigError
from elastune.training.optim import Optimizers
from elastune.tuning.spec import validate_sweep_spec
from elastune.validate import load_run_config
from elastune.workloads import build_workload

from tests.conftest import TINY
from tests.integration.sweep_specs import TINY_BASE, tiny_spec


def _norm_at_step(*sets: str, precision: str = "fp32") -> tuple[float, float]:
    """(dense gradient norm before the step, as the optimizer used it)."""
    cfg = load_run_config(None, [*TINY, f"precision={precision}", *sets])
    workload = build_workload(cfg)
    torch.manual_seed(0)
    model = workload.build_model()
    opts = Optimizers(model, cfg.optimizer)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=precision == "fp16")
    batch = workload.data_source().read(0, cfg.batch.micro)
    scaler.scale(workload.loss(model, batch)).backward()
    dense = opts.dense.param_groups[0]["params"]
    before = float(torch.nn.utils.get_total_norm([p.grad for p in dense if p.grad is not None]))
    opts.step(scaler)  # clip_grad_norm_ rewrites the grads in place; the step leaves them
    after = float(torch.nn.utils.get_total_norm([p.grad for p in dense if p.grad is not None]))
    return before / scaler.get_scale() if precision == "fp16" else before, after


def test_the_bound_holds_when_the_optimizer_steps() -> None:
    before, after = _norm_at_step()
    assert after == pytest.approx(before)  # off: untouched
    before, after = _norm_at_step("optimizer.clip_grad_norm=0.01")
    assert before > 0.01 and after == pytest.approx(0.01, rel=1e-4)


def test_fp16_clips_the_true_gradient_not_the_scaled_one() -> None:
    _, after = _norm_at_step("optimizer.clip_grad_norm=0.01", precision="fp16")
    assert after == pytest.approx(0.01, rel=1e-3)  # not 0.01 x the loss scale


def test_a_run_trains_with_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["train", "--format", "json", *[a for s in [*TINY, "optimizer.clip_grad_norm=1.0"] for a in ("--set", s)]])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["config"]["optimizer"]["clip_grad_norm"] == 1.0


def test_a_sweep_fixes_it_but_never_searches_it() -> None:
    fixed = {**TINY_BASE, "optimizer": {"clip_grad_norm": 1.0}}
    assert validate_sweep_spec(tiny_spec(base=fixed)).base["optimizer"]["clip_grad_norm"] == 1.0
    searched = {"optimizer.clip_grad_norm": {"type": "choice", "values": [0.5, 1.0]}}
    with pytest.raises(ConfigError, match=r"parameters\.optimizer\.clip_grad_norm.*set it in base"):
        validate_sweep_spec(tiny_spec(parameters=searched))
