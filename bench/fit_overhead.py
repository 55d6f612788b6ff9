"""Refit the CPU heap model's coefficients (platform/elastune/memory/overhead.py, `CPU_FIT`) from the
estimator benchmark's records, jointly over every suite that recorded its heap-model inputs.

bench/estimator.py records, per config, what the model reads from the trace (`CpuInputs`) beside
the measured peak (the highest of its fresh runs). This script minimises the squared *relative*
error (the benchmark's criterion is relative: within ±10%) over all of them at once, so no suite's
configs are tuned at another's expense: a grid over the activation share (it sits inside a max),
linear least squares for the other four coefficients at each point.

    python bench/fit_overhead.py                       # newest record of each CPU suite
    python bench/fit_overhead.py --records a.json b.json

It prints the fitted `CpuFit`, and the error per config and per suite under the fit and under the
coefficients in overhead.py now. Paste the fit into overhead.py, then re-run bench/estimator.py on
each suite: the re-run's fresh measurements are the check, not this fit's residuals.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from elastune.memory.overhead import CPU_FIT, CpuFit, CpuInputs, cpu_other

RECORDS = Path(__file__).resolve().parent / "records"
SUITES = ("estimator-cpu", "estimator-two_tower-cpu", "estimator-lm-cpu")
_MiB = 2**20


def newest_records() -> list[Path]:
    """The newest record of each CPU estimator suite that carries heap-model inputs."""
    found = []
    for suite in SUITES:
        for path in sorted(RECORDS.glob(f"{suite}-*.json"), key=lambda p: json.loads(p.read_text())["date"] + p.name)[
            ::-1
        ]:
            if _rows(path):
                found.append(path)
                break
    return found


def _rows(path: Path) -> list[tuple[str, CpuInputs, int]]:
    record = json.loads(path.read_text())
    table = record.get("table") or {}
    if "heap model inputs" not in table.get("columns", []):
        return []
    column = table["columns"].index("heap model inputs")
    rows = []
    for row in table["rows"]:
        inputs = dict(row[column])
        measured = inputs.pop("measured")
        rows.append((f"{record['benchmark']}: {row[1]}", CpuInputs(**inputs), measured))
    return rows


def fit(rows: list[tuple[str, CpuInputs, int]]) -> CpuFit:
    measured = np.array([m for _, _, m in rows], dtype=float)
    best: tuple[float, CpuFit] | None = None
    for share in np.arange(0.0, 1.51, 0.01):
        # other = fixed + row_optimizer*[row] + holes(share) + traced_share*traced + gradient_share*grads
        holes = np.array([max(x.traced, x.train_peak + share * x.heap_activations) - x.traced for _, x, _ in rows])
        design = np.array([[1.0, float(x.row_optimizer), x.traced, x.heap_gradients] for _, x, _ in rows])
        target = measured - np.array([x.traced for _, x, _ in rows]) - holes
        weights = 1 / measured  # relative error
        coef, *_ = np.linalg.lstsq(design * weights[:, None], target * weights, rcond=None)
        candidate = CpuFit(
            fixed=float(coef[0]),
            row_optimizer=float(coef[1]),
            activation_share=round(float(share), 2),
            traced_share=float(coef[2]),
            gradient_share=float(coef[3]),
        )
        loss = float(np.sum((_predict(rows, candidate) / measured - 1) ** 2))
        if best is None or loss < best[0]:
            best = (loss, candidate)
    assert best is not None
    return best[1]


def _predict(rows: list[tuple[str, CpuInputs, int]], coefficients: CpuFit) -> np.ndarray:
    return np.array([x.traced + cpu_other(x, coefficients) for _, x, _ in rows], dtype=float)


def report(rows: list[tuple[str, CpuInputs, int]], coefficients: CpuFit, title: str) -> dict[str, Any]:
    errors = _predict(rows, coefficients) / np.array([m for _, _, m in rows]) - 1
    print(f"\n{title}")
    by_suite: dict[str, list[float]] = {}
    for (label, _, measured), error in zip(rows, errors, strict=True):
        by_suite.setdefault(label.split(":")[0], []).append(float(error))
        flag = "" if abs(error) <= 0.10 else "  <- outside ±10%"
        print(f"  {label:58} measured {measured / _MiB:8.1f} MiB  error {error:+6.1%}{flag}")
    for suite, errs in by_suite.items():
        within = sum(abs(e) <= 0.10 for e in errs)
        print(f"  {suite}: {within}/{len(errs)} within ±10%, max |error| {max(map(abs, errs)):.1%}")
    return by_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", nargs="*", type=Path, help="estimator records (default: newest per CPU suite)")
    args = parser.parse_args()
    paths = args.records or newest_records()
    rows = [row for path in paths for row in _rows(path)]
    if not rows:
        raise SystemExit("no estimator record with heap-model inputs: run bench/estimator.py first")
    print("records: " + ", ".join(p.name for p in paths))
    report(rows, CPU_FIT, "coefficients in overhead.py now:")
    fitted = fit(rows)
    report(rows, fitted, "refitted:")
    print(
        "\nCPU_FIT = CpuFit(\n"
        f"    fixed={fitted.fixed / _MiB:.1f} * _MiB,\n"
        f"    row_optimizer={fitted.row_optimizer / _MiB:.1f} * _MiB,\n"
        f"    activation_share={fitted.activation_share:.2f},\n"
        f"    traced_share={fitted.traced_share:.4f},\n"
        f"    gradient_share={fitted.gradient_share:.3f},\n)"
    )


if __name__ == "__main__":
    main()
