"""`other`, the overhead beyond the traced tensors, is never opaque: `estimate` names its terms
(memory/overhead.py), they sum to it, and `elastune estimate` shows each (issue 34, point 3, first part)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from elastune.cli import main
from elastune.config import RunConfig
from elastune.memory.estimate import estimate
from elastune.memory.overhead import CPU_FIT, CpuInputs, VirtualFit, cpu_other, cpu_other_parts, virtual_other_parts

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
    expected = 13.1 * MiB + (3.6 * MiB if sparse != "adam" else 0)
    assert abs(est.overhead["runtime"] - expected) <= 2, est.overhead


def test_the_virtual_devices_terms_are_named_and_sum_to_other(tiny_cfg: MakeCfg) -> None:
    est = estimate(tiny_cfg(), virtual=True)
    assert set(est.overhead) == {"runtime", "small_block_heap"}
    assert sum(est.overhead.values()) == est.breakdown["other"]
    assert est.overhead["runtime"] == int(3.84 * MiB)  # fitted
    # a tiny config's steps make some small blocks, far fewer than the cap (26.8 MiB a step)
    assert 0 < est.overhead["small_block_heap"] < 0.3982 * 26.8 * MiB / 2


def test_small_block_churn_past_the_fit_halfs_range_is_priced_as_its_most() -> None:
    fit = VirtualFit(runtime=5 * MiB, churn_share=0.5, churn_cap=20 * MiB)
    assert virtual_other_parts(10 * MiB, fit) == {"runtime": 5 * MiB, "small_block_heap": 5 * MiB}
    assert (
        virtual_other_parts(20 * MiB, fit)
        == virtual_other_parts(50 * MiB, fit)
        == {
            "runtime": 5 * MiB,
            "small_block_heap": 10 * MiB,
        }
    )


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
