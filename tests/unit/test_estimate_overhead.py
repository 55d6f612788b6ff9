"""`other`, the overhead beyond the traced tensors, is never opaque: `estimate` names its terms
(memory/overhead.py), they sum to it, and `elastune estimate` shows each (issue 34, point 3, first part)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from elastune.cli import main
from elastune.config import RunConfig
from elastune.memory.estimate import estimate
from elastune.memory.overhead import CPU_FIT, CpuInputs, cpu_other, cpu_other_parts

from tests.conftest import TINY

MakeCfg = Callable[..., RunConfig]
MiB = 2**20


@pytest.mark.parametrize("sparse", ["adam", "rowwise_adagrad"])
def test_the_cpu_terms_are_named_and_sum_to_other(tiny_cfg: MakeCfg, sparse: str) -> None:
    est = estimate(tiny_cfg(f"optimizer.sparse={sparse}"))
    assert set(est.overhead) == {"runtime", "activation_holes", "heap_rounding", "gradient_holes"}
    assert sum(est.overhead.values()) == est.breakdown["other"]
    assert all(v >= 0 for v in est.overhead.values()), est.overhead
    # the fitted runtime: 15.5 MiB, 4.3 MiB more where a row-wise optimizer updates the rows
    expected = 15.5 * MiB + (4.3 * MiB if sparse != "adam" else 0)
    assert abs(est.overhead["runtime"] - expected) <= 2, est.overhead


def test_the_virtual_devices_terms_are_named_and_sum_to_other(tiny_cfg: MakeCfg) -> None:
    est = estimate(tiny_cfg(), virtual=True)
    assert est.overhead == {"runtime": int(7.06 * MiB)} == {"runtime": est.breakdown["other"]}  # fitted


def test_naming_the_terms_leaves_the_heap_models_figure_as_it_was() -> None:
    """The model's formula, written out here from its coefficients (overhead.py's docstring)."""
    x = CpuInputs(traced=80 * MiB, train_peak=70 * MiB, heap_activations=20 * MiB, heap_gradients=6 * MiB,
                  row_optimizer=False)  # fmt: skip
    holes = max(x.traced, x.train_peak + CPU_FIT.activation_share * x.heap_activations) - x.traced
    by_hand = CPU_FIT.fixed + holes + CPU_FIT.traced_share * x.traced + CPU_FIT.gradient_share * x.heap_gradients
    assert cpu_other(x) == int(by_hand)
    assert cpu_other_parts(x)["activation_holes"] == holes > 0


def test_estimate_shows_each_term(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for s in TINY for a in ("--set", s)]
    assert main(["estimate", *args]) == 0
    shown = capsys.readouterr().out
    for label in ("runtime (torch, autograd, data, kernels' scratch)", "heap: freed activation blocks",
                  "heap: page and chunk rounding", "heap: freed gradient blocks"):  # fmt: skip
        assert label in shown, shown
    assert main(["estimate", "--format", "json", *args]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert sum(payload["overhead"].values()) == payload["breakdown"]["other"]
